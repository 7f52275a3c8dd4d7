"""The batch subcommands' arguments: the parsers of ``recipe``, ``run``, ``validate`` and
``status``, and the argument types that check ``--workers``, ``--walltime`` and ``--memory``
before anything runs (argparse exits 2 on a bad value)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MAX_WORKERS", "add_parsers"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the batch subcommands to the console command's subparsers."""
    from napari_gpuscope.methods import METHODS

    recipe = _add(sub, "recipe", "write a recipe from a method's defaults (for scripts and tests)")
    recipe.add_argument("method", choices=list(METHODS), help="method id")
    recipe.add_argument(
        "--job",
        default=None,
        help="the method's job, e.g. esrrf: sweep, flatfield: apply (default: its main job)",
    )
    recipe.add_argument(
        "--set",
        dest="changes",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change a parameter, read as the field's type: a number (1.5, 1e-4), true/false, "
        "a choice (poisson), a list ([0.5, 0.1, 0.1]) or null where the field allows None",
    )
    recipe.add_argument(
        "--artifact",
        dest="artifacts",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a file the method needs, pinned by its SHA-256 (flatfield: profile=scope.tif, a "
        "profile saved from the dock, used instead of fitting; dark_frame=dark.tif, a (Y, X) "
        "dark frame; fitting_weight=mask.tif, fit only where the mask is > 0)",
    )
    recipe.add_argument("-o", "--output", type=Path, required=True, help="recipe file to write")

    run = _add(
        sub,
        "run",
        "apply a recipe to every position of INPUT on Dask",
        "Exit codes: 0 all done, 1 some positions failed (the report and 'status' say which "
        "and why), 2 a usage or configuration error, 130 interrupted (rerun with --resume).",
    )
    run.add_argument("recipe", type=Path, help="recipe YAML")
    run.add_argument("input", nargs="+", help=INPUT_HELP)
    run.add_argument("--out", type=Path, required=True, help="output OME-Zarr store")
    run.add_argument(
        "--device",
        default="cuda",
        help="cuda:0,cuda:1,... (default: every visible GPU) or cpu for a reference run",
    )
    run.add_argument(
        "--workers",
        type=_int_range("--workers", 1, MAX_WORKERS),
        default=None,
        help=f"CPU workers (default 2, at most this machine's cores); slurm, pbs, lsf: the most "
        f"jobs at once (1 to {MAX_WORKERS})",
    )
    run.add_argument(
        "--cluster",
        type=_cluster,
        default="local",
        help="local (default); slurm, pbs or lsf (jobs submitted through dask-jobqueue); or "
        "the address of a running Dask scheduler (tcp://host:8786) whose GPU workers run one "
        "thread each ('dask worker ADDRESS --nthreads 1 --resources GPU=1', one per GPU)",
    )
    again = run.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true", help="skip positions already complete with this recipe"
    )
    again.add_argument("--overwrite", action="store_true", help="delete an earlier output first")
    run.add_argument(
        "--wait",
        action="store_true",
        help="when another run is writing OUT (its lock), wait for it instead of exiting 2",
    )
    run.add_argument("--report", type=Path, default=None, help="write a JSON report here")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would run and, on slurm, pbs or lsf, print the job script; compute nothing",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--dashboard", default=":0", help="local dashboard address (default: a free port)"
    )
    jobs = run.add_argument_group("jobs (--cluster slurm, pbs or lsf; needs the hpc extra)")
    jobs.add_argument("--walltime", type=_walltime, default="01:00:00", help="per job, HH:MM:SS")
    jobs.add_argument("--queue", default=None, help="queue (SLURM: partition)")
    jobs.add_argument("--account", default=None, help="account (LSF: project)")
    jobs.add_argument(
        "--memory", type=_memory, default="32GB", help="host memory per job, e.g. 32GB"
    )
    jobs.add_argument(
        "--gpus-per-job",
        type=_int_range("--gpus-per-job", 1, 64),
        default=1,
        help="GPUs per job, one worker process each (default 1)",
    )
    watch = run.add_argument_group(
        "watch (process positions as an acquisition writes them; resumes OUT)"
    )
    watch.add_argument(
        "--watch",
        action="store_true",
        help="keep looking at INPUT and compute each position once it is complete; Ctrl-C ends",
    )
    watch.add_argument(
        "--settle",
        type=_seconds("--settle"),
        default=3.0,
        help="seconds a file must stay unchanged before it is read (default 3)",
    )
    watch.add_argument(
        "--watch-idle",
        type=_seconds("--watch-idle"),
        default=None,
        help="end after this many seconds without a new position (default: only Ctrl-C)",
    )

    validate = _add(
        sub,
        "validate",
        "check INPUT against a recipe as a run would (artifacts, shapes, axes, pixel size, "
        "each file read whole: truncated files, NaN pixels)",
    )
    validate.add_argument("recipe", type=Path, help="recipe YAML")
    validate.add_argument("input", nargs="+", help=INPUT_HELP)

    status = _add(sub, "status", "done / failed / pending per position of OUT.zarr")
    status.add_argument("out", type=Path, help="the output OME-Zarr store of a run")


INPUT_HELP = (
    "one or more TIFF files or globs of them (quoted or not: data/*.tif), OME-Zarr images or "
    "HCS plates"
)

MAX_WORKERS = 1000
"""The most workers (local) or SLURM jobs ``--workers`` accepts."""


def _add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    more: str = "",
) -> argparse.ArgumentParser:
    """A subcommand whose own ``--help`` starts with its summary (the list's line)."""
    description = f"{summary[0].upper()}{summary[1:]}." + (f" {more}" if more else "")
    return sub.add_parser(name, help=summary, description=description)


def _seconds(option: str) -> Callable[[str], float]:
    """An argparse type: a number of seconds, 0 or more (argparse exits 2 otherwise)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(
                f"{option}: expected a number of seconds, 0 or more, got {text!r}"
            )
        return value

    return parse


def _int_range(option: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high`` (argparse exits 2 otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low} to {high}, got {text!r}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse


def _cluster(text: str) -> str:
    """``--cluster``: local, a scheduler's name, or a Dask scheduler's address."""
    from napari_gpuscope.batch.jobqueue import SCHEDULERS

    name = text.strip()
    if name in ("local", *SCHEDULERS) or "://" in name or re.fullmatch(r"[\w.-]+:\d+", name):
        return name
    raise argparse.ArgumentTypeError(
        f"expected local, {', '.join(SCHEDULERS)} or a scheduler address such as "
        f"tcp://host:8786, got {text!r}"
    )


def _walltime(text: str) -> str:
    """``--walltime``: ``HH:MM:SS`` with minutes and seconds below 60, not zero."""

    match = re.fullmatch(r"(\d{1,4}):([0-5]\d):([0-5]\d)", text.strip())
    if match is None or not any(int(part) for part in match.groups()):
        raise argparse.ArgumentTypeError(
            f"expected HH:MM:SS from 00:00:01 to 9999:59:59, got {text!r}"
        )
    return text.strip()


def _memory(text: str) -> str:
    """``--memory``: a positive size with its unit (``32GB``, ``500MiB``)."""
    from dask.utils import parse_bytes

    try:
        size = parse_bytes(text)
    except (ValueError, TypeError):
        size = 0
    if not isinstance(size, int) or size < 1 << 20 or not any(c.isalpha() for c in text):
        raise argparse.ArgumentTypeError(
            f"expected a size of at least 1MiB with its unit, e.g. 32GB or 500MiB, got {text!r}"
        )
    return text.strip()
