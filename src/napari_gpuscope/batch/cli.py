"""The batch subcommands of ``napari-gpuscope``: ``recipe``, ``run``, ``validate``, ``status``.

Exit codes: 0 all done; 1 some positions failed (the report and ``status`` say which and why);
2 a usage or configuration error (bad recipe, no input, store exists); 130 interrupted (the
report, when asked for, is written all the same).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from napari_gpuscope.batch.cluster import ClusterChoice
    from napari_gpuscope.batch.inputs import Position
    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.compute.params import Params

__all__ = ["add_parsers", "dispatch"]

COMMANDS = ("recipe", "run", "validate", "status")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the batch subcommands to the console command's subparsers."""
    from napari_gpuscope.methods import METHODS

    recipe = sub.add_parser(
        "recipe", help="write a recipe from a method's defaults (for scripts and tests)"
    )
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

    run = sub.add_parser("run", help="apply a recipe to every position of INPUT on Dask")
    run.add_argument("recipe", type=Path, help="recipe YAML")
    run.add_argument("input", help="glob of TIFF files, OME-Zarr image or HCS plate")
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
        help=f"CPU workers (default 2, at most this machine's cores); SLURM: most jobs (1 to "
        f"{MAX_WORKERS})",
    )
    run.add_argument(
        "--cluster", default="local", help="local (default), slurm, or a scheduler address"
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
    run.add_argument("--dry-run", action="store_true", help="say what would run; compute nothing")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--dashboard", default=":0", help="local dashboard address (default: a free port)"
    )
    slurm = run.add_argument_group("SLURM (--cluster slurm, needs the hpc extra)")
    slurm.add_argument("--walltime", type=_walltime, default="01:00:00", help="per job, HH:MM:SS")
    slurm.add_argument("--queue", default=None, help="partition")
    slurm.add_argument("--account", default=None, help="account")
    slurm.add_argument(
        "--memory", type=_memory, default="32GB", help="host memory per job, e.g. 32GB"
    )

    validate = sub.add_parser(
        "validate",
        help="check INPUT against a recipe as a run would (artifacts, shapes, axes, pixel size, "
        "each file read whole: truncated files, NaN pixels)",
    )
    validate.add_argument("recipe", type=Path)
    validate.add_argument("input")

    status = sub.add_parser("status", help="done / failed / pending per position of OUT.zarr")
    status.add_argument("out", type=Path)


MAX_WORKERS = 1000
"""The most workers (local) or SLURM jobs ``--workers`` accepts."""


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


def _walltime(text: str) -> str:
    """``--walltime``: ``HH:MM:SS`` with minutes and seconds below 60, not zero."""
    import re

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
            f"expected a size of at least 1MB with its unit, e.g. 32GB or 500MiB, got {text!r}"
        )
    return text.strip()


def _fail(message: str, code: int = 2) -> int:
    print(f"napari-gpuscope: {message}", file=sys.stderr)
    return code


def dispatch(args: argparse.Namespace) -> int:
    """Run a batch subcommand; returns the exit code."""
    from napari_gpuscope.batch.inputs import InputError
    from napari_gpuscope.batch.recipes import RecipeError

    try:
        return {"recipe": _recipe, "run": _run, "validate": _validate, "status": _status}[
            args.command
        ](args)
    except (RecipeError, InputError, ValueError, RuntimeError) as exc:
        return _fail(str(exc))
    except OSError as exc:  # a file the command itself reads or writes (not a position's)
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        return _fail("interrupted; finished positions are kept: rerun with --resume", 130)


def _recipe(args: argparse.Namespace) -> int:
    from napari_gpuscope.batch.recipes import (
        SCHEMA_VERSION,
        Artifact,
        ArtifactFile,
        Recipe,
        RecipeError,
        file_sha256,
    )
    from napari_gpuscope.methods import method

    try:
        params_class = method(args.method).job_spec(args.job).params_class()
    except KeyError as exc:
        return _fail(f"--job: {exc.args[0]}")
    import yaml

    changes: dict[str, object] = {}
    for item in args.changes:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            return _fail(f"--set {item!r}: expected NAME=VALUE")
        try:
            changes[name.strip()] = _field_value(params_class, name.strip(), value)
        except (ValueError, yaml.YAMLError) as exc:  # or a number beyond Python's 4300 digits
            why = " ".join(str(exc).split(";")[0].split())
            return _fail(f"--set {name.strip()}: cannot read {value[:40]!r}: {why}")
    from napari_gpuscope.methods import load

    job = method(args.method).job_spec(args.job)
    # The hooks are loaded only to check artifacts: a recipe of defaults loads no job code.
    hooks = load(job.batch) if job.batch and args.artifacts else None
    check = getattr(hooks, "check_artifact", None)
    artifacts = []
    for item in args.artifacts:
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not name or not Path(path).is_file():
            return _fail(f"--artifact {item!r}: expected NAME=PATH of an existing file")
        folder = args.output.resolve().parent
        if not Path(path).resolve().is_relative_to(folder):
            # Allowed (a shared profiles folder), but the recipe names it relative to itself.
            print(
                f"warning: --artifact {item!r} is outside the recipe's folder {folder}; the "
                "recipe names it by a relative path: move the recipe and the artifact together",
                file=sys.stderr,
            )
        if not job.batch:  # artifacts reach a job only through its batch hooks
            return _fail(f"--artifact {item!r}: the {job.id!r} job of {args.method} takes none")
        try:  # loads as what the job needs; the other files it consists of are pinned too
            others = [Path(other) for other in check(name, Path(path))] if check else []
        except (ValueError, OSError) as exc:
            return _fail(f"--artifact {item!r}: {exc}")

        def relative(file: Path) -> str:
            # Relative to the recipe, which is how run and validate resolve it.
            return os.path.relpath(Path(file).resolve(), args.output.resolve().parent)

        files = [ArtifactFile(path=relative(f), sha256=file_sha256(f)) for f in others]
        artifacts.append(
            Artifact(name=name, path=relative(Path(path)), sha256=file_sha256(path), files=files)
        )
    data = {
        "schema_version": SCHEMA_VERSION,
        "method": args.method,
        "job": args.job,
        "params": {**params_class().to_dict(), **changes},
        "artifacts": [artifact.model_dump() for artifact in artifacts],
    }
    try:
        checked = Recipe.from_data(data, origin="--set")
        consistent = getattr(hooks, "check_params", None)
        if consistent is not None:  # artifacts that contradict the parameters
            try:
                consistent(checked.params_model(), [artifact.name for artifact in artifacts])
            except ValueError as exc:
                return _fail(str(exc))
        recipe = Recipe.from_params(
            checked.params_model(),
            job=args.job,
            artifacts=artifacts,
            source="napari-gpuscope recipe (defaults)",
        )
    except RecipeError as exc:
        return _fail(str(exc))
    recipe.save(args.output)
    job = f" {recipe.job}" if recipe.job else ""
    print(f"wrote {args.output} ({args.method}{job}, recipe {recipe.hash()[:12]})")
    return 0


def _field_value(params_class: type[Params], name: str, text: str) -> object:
    """``--set NAME=TEXT`` read as the field's type (the model validates the value itself).

    A choice or string field takes the text as it is (``--set noise_model=no`` is the string,
    not YAML's false); ``null``/``none``/``~`` is None where the field allows it; numbers,
    booleans and lists are YAML, a number written ``1e-5`` included (YAML 1.1 reads it as a
    string). An unknown name is passed on, for the recipe's error that lists the valid names.
    """
    import yaml

    if name not in params_class.names():
        return yaml.safe_load(text)
    info = params_class.info(name)
    stripped = text.strip()
    if info.optional and stripped.lower() in ("null", "none", "~"):
        return None
    if info.kind == "str":
        return stripped
    parsed = yaml.safe_load(text)
    if info.kind == "floats" and isinstance(parsed, list):
        return [_number(item) for item in parsed]
    return _number(parsed) if info.kind in ("float", "int") else parsed


def _number(parsed: object) -> object:
    """A YAML 1.1 string that is a number (``1e-5``) as that number; anything else unchanged."""
    if isinstance(parsed, str) and parsed.strip().lower() not in ("nan", "inf", "-inf", "+inf"):
        try:
            return float(parsed)
        except ValueError:
            return parsed
    return parsed


def _run(args: argparse.Namespace) -> int:
    from napari_gpuscope.batch.cluster import ClusterChoice
    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.recipes import load_recipe

    recipe = load_recipe(args.recipe)
    problems = recipe.check_artifacts(args.recipe.parent)
    if problems:
        return _fail("; ".join(problems))
    positions = discover(args.input)
    from napari_gpuscope.batch.status import validate_inputs

    # The first position only (every one would cost a metadata read each on the driver).
    first = validate_inputs(recipe, positions[:1], recipe_dir=args.recipe.parent, pixels=False)
    for problem in first:
        print(
            f"warning: {problem} (check every position with 'napari-gpuscope validate')",
            file=sys.stderr,
        )
    if args.cluster == "local" and args.device == "cpu" and args.workers is not None:
        cores = os.cpu_count() or 1
        if args.workers > cores:
            return _fail(
                f"--workers {args.workers}: this machine has {cores} cores; give 1 to {cores} "
                "(one worker process per core)"
            )
    choice = ClusterChoice(
        cluster=args.cluster,
        device=args.device,
        workers=args.workers,
        dashboard=args.dashboard,
        walltime=args.walltime,
        queue=args.queue,
        account=args.account,
        memory=args.memory,
    )
    if choice.uses_gpu and choice.cluster == "local":
        from napari_gpuscope.batch.cluster import gpu_indices

        gpu_indices(choice.device)  # a clear error before any worker starts
    print(
        f"{recipe.method}: {len(positions)} positions from {args.input} -> {args.out} "
        f"on {args.device} (recipe {recipe.hash()[:12]})"
    )
    from napari_gpuscope.batch.store import BatchStore

    if args.dry_run:
        from napari_gpuscope.batch.runner import plan

        todo, skipped, unreadable = plan(
            recipe, positions, BatchStore(args.out), resume=args.resume
        )
        print(f"dry run: would compute {len(todo)}, skip {len(skipped)} (complete)")
        for name, reason in unreadable.items():
            print(f"  unreadable {name}: {reason}")
        return 1 if unreadable else 0
    from napari_gpuscope.batch.lock import StoreLock
    from napari_gpuscope.batch.runner import check_run

    # Before the cluster starts: a locked, unwritable, corrupt or earlier store, or a changed
    # artifact, is refused (exit 2) without a worker or a dashboard.
    with StoreLock(BatchStore(args.out), wait=args.wait):
        check_run(
            recipe,
            args.out,
            resume=args.resume,
            overwrite=args.overwrite,
            recipe_dir=args.recipe.parent,
        )
        return _run_on_cluster(args, recipe, positions, choice)


def _run_on_cluster(
    args: argparse.Namespace, recipe: Recipe, positions: list[Position], choice: ClusterChoice
) -> int:
    from napari_gpuscope.batch.cluster import open_client
    from napari_gpuscope.batch.progress import ProgressBar
    from napari_gpuscope.batch.runner import StoreExistsError, run_batch

    with open_client(choice) as client:
        if client.dashboard_link:
            print(f"Dask dashboard: {client.dashboard_link}")
        bar = None if args.no_progress else ProgressBar(len(positions))

        def update(done: int, failed: int, total: int) -> None:
            if bar is not None:
                bar.total = total  # the positions to compute (resumed ones are not counted)
                bar.update(done=done, failed=failed)

        try:
            report = run_batch(
                recipe,
                positions,
                args.out,
                client,
                resume=args.resume,
                overwrite=args.overwrite,
                device=choice.task_device,
                input_name=str(args.input),
                recipe_dir=args.recipe.parent,
                on_update=update,
                wait=args.wait,
            )
        except StoreExistsError as exc:
            return _fail(str(exc))
        if bar is not None and report.done + list(report.failed):
            bar.update(done=len(report.done), failed=len(report.failed), final=True)
    if args.report is not None:
        report.write(args.report)
    for line in report.lines():
        print(line, file=sys.stderr if line.startswith(("FAILED", "INTERRUPTED")) else sys.stdout)
    return report.exit_code


def _validate(args: argparse.Namespace) -> int:
    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.recipes import load_recipe
    from napari_gpuscope.batch.status import validate_inputs

    recipe = load_recipe(args.recipe)
    positions = discover(args.input)
    from napari_gpuscope.batch.status import has_input_facts

    problems = validate_inputs(recipe, positions, recipe_dir=args.recipe.parent)
    for problem in problems:
        print(problem)
    if not has_input_facts(recipe):
        print(
            f"note: {args.recipe} records no input facts (axes, pixel size, units, ndim, dtype), "
            "so the positions were checked for readability, pixels and the job's own input "
            "checks only; save the recipe from the dock (its Recipe row records the layer's "
            "facts) or add an 'input' section"
        )
    print(
        f"{len(positions)} positions, {len(problems)} problem(s); recipe {recipe.method} "
        f"{recipe.hash()[:12]}"
    )
    return 1 if problems else 0


def _status(args: argparse.Namespace) -> int:
    from napari_gpuscope.batch.status import store_status

    status = store_status(args.out)
    for line in status.lines():
        print(line)
    return 1 if status.failed else 0
