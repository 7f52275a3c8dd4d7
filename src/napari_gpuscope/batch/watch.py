"""``napari-gpuscope run --watch``: apply a recipe to positions as an acquisition writes them.

A microscope writing one TIFF per position (or OME-Zarr images into a store) is followed by
polling the INPUTs: a position is taken once it is *settled* -- readable, and its identity (the
TIFF's size and modification time, the Zarr array's shape and metadata time: what a completion
marker is keyed on, :meth:`~napari_gpuscope.batch.inputs.Position.identity`) unchanged for
``settle_s`` seconds -- so a file still being written is never read half-way. Each round of
settled positions runs through :func:`~napari_gpuscope.batch.runner.run_batch` with
``resume=True``: a position already complete in the store is skipped, one that changed since is
computed again, so a watch that is stopped and started again goes on where it stopped.

The watch ends when ``stop()`` says so (Ctrl-C on the command line), or after ``idle_s`` seconds
with no new position and none waiting to settle. Plain Python, no Qt; the clock and the sleep
are injectable so that tests step them instead of waiting.

Two things a plain run does over all its positions at once are refused or reported instead
(:func:`check_watch`):

- a job that *prepares* from every position of a run (flat-field's fit) would fit each round on
  that round's positions only, so positions would be corrected with different profiles: refused
  unless the prepared value is fixed by the recipe (a saved ``profile`` artifact);
- position names must be unique over all INPUTs, as for ``run``: a clash present at the start
  is refused with ``run``'s words; one that appears later is reported as a failed position of
  the round (the name stays with the input that had it first) and never blocks the idle end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.watch_positions import (
    DEFAULT_POLL_S,
    DEFAULT_SETTLE_S,
    PositionWatcher,
)

if TYPE_CHECKING:
    from distributed import Client

    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.batch.report import BatchReport

__all__ = [
    "DEFAULT_POLL_S",
    "DEFAULT_SETTLE_S",
    "PositionWatcher",
    "WatchReport",
    "check_watch",
    "check_watchable",
    "watch_batch",
]


@dataclass
class WatchReport:
    """What a watch did: one :class:`~napari_gpuscope.batch.report.BatchReport` per round.

    Attributes
    ----------
    rounds : list of BatchReport
        In order; each covers the positions that settled since the round before.
    stopped_by : str
        ``"stop"`` (asked), ``"idle"`` (``idle_s`` without a new position), ``"ctrl-c"``
        (between rounds: nothing cut short) or ``"interrupt"`` (a round was interrupted: its
        unfinished positions are computed by the next watch or ``--resume``).
    """

    rounds: list[BatchReport] = field(default_factory=list)
    stopped_by: str = "stop"

    @property
    def done(self) -> list[str]:
        """Positions computed, in the order they were (a re-written one may appear twice)."""
        return [name for report in self.rounds for name in report.done]

    @property
    def failed(self) -> dict[str, str]:
        """Positions whose latest round failed, with the reason."""
        out: dict[str, str] = {}
        for report in self.rounds:
            for name in report.done:
                out.pop(name, None)
            out.update(report.failed)
        return out

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, 1 otherwise (as a batch run's)."""
        return 1 if self.failed else 0

    def to_json(self) -> str:
        """The rounds' reports and how the watch ended, as JSON."""
        rounds = [json.loads(report.to_json()) for report in self.rounds]
        return json.dumps({"stopped_by": self.stopped_by, "rounds": rounds}, indent=2)

    def write(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path``."""
        path = Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    def lines(self) -> list[str]:
        """A summary for the terminal."""
        out = [
            f"watch: {len(self.done)} positions computed in {len(self.rounds)} rounds "
            f"(ended: {self.stopped_by})"
        ]
        out += [f"FAILED {name}: {reason}" for name, reason in self.failed.items()]
        return out


def check_watchable(recipe: Recipe) -> None:
    """Refuse a recipe whose job prepares from every position of a run (flat-field's fit).

    A watch runs each round on the positions settled since the round before, so such a
    ``prepare`` would be fitted anew on each round's positions (on one position, when files
    settle one by one) and each position corrected with another profile. Allowed when the
    prepared value is fixed by the recipe: hooks whose ``replaces_fit`` says the artifacts
    replace the fit (a saved ``profile``; eSRRF's drift trace), or jobs with no ``prepare``.

    Raises
    ------
    ValueError
        The recipe's job fits on all positions; the message says what to do instead.

    Examples
    --------
    >>> from napari_gpuscope.batch.recipes import Recipe
    >>> check_watchable(Recipe.from_defaults("tv"))
    >>> check_watchable(Recipe.from_defaults("flatfield"))
    Traceback (most recent call last):
    ...
    ValueError: --watch cannot run this flatfield recipe: ...
    """
    from napari_gpuscope.methods import load

    job = recipe.job_spec()
    hooks = load(job.batch) if job.batch else None
    if getattr(hooks, "prepare", None) is None:
        return
    # The runner's own default (tasks.prepare_run): any artifact replaces the fit.
    replaces_fit = getattr(hooks, "replaces_fit", lambda names: bool(names))
    if replaces_fit({artifact.name for artifact in recipe.artifacts}):
        return
    raise ValueError(
        f"--watch cannot run this {recipe.method} recipe: its {job.id!r} job fits once on every "
        "position of a run, and a watch runs each round on the positions settled since the "
        "last, so each round would be fitted on other positions and corrected differently. "
        "Fit once: run without --watch when the acquisition is complete, or save the profile "
        "(from the dock, or ShadingProfile.save) and watch with a recipe that names it, e.g. "
        f"'napari-gpuscope recipe {recipe.method} --job apply --artifact profile=PROFILE.tif "
        "-o apply.yaml'"
    )


def check_watch(recipe: Recipe, specs: Sequence[str]) -> None:
    """What a watch refuses before it starts: a recipe that fits on all positions
    (:func:`check_watchable`), or INPUTs mapping two positions to one name now.

    Raises
    ------
    ValueError
        See :func:`check_watchable`.
    InputError
        Two inputs map to one position name.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from napari_gpuscope.batch.recipes import Recipe
    >>> check_watch(Recipe.from_defaults("tv"), [str(pathlib.Path(tempfile.mkdtemp()) / "*.tif")])
    """
    check_watchable(recipe)
    PositionWatcher(specs, settle_s=0).check_unique()


def watch_batch(
    recipe: Recipe,
    specs: Sequence[str],
    out: str | Path,
    client: Client,
    *,
    device: str = "cpu",
    recipe_dir: str | Path | None = None,
    settle_s: float = DEFAULT_SETTLE_S,
    poll_s: float = DEFAULT_POLL_S,
    idle_s: float | None = None,
    stop: Callable[[], bool] = lambda: False,
    on_round: Callable[[BatchReport], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WatchReport:
    """Apply ``recipe`` to the positions of ``specs`` as they are written, until stopped.

    Parameters
    ----------
    recipe : Recipe
    specs : sequence of str
        The INPUTs to follow (globs of TIFF files, OME-Zarr stores).
    out : str or Path
        The OME-Zarr output store (created by the first round; later rounds resume it).
    client : distributed.Client
    device : str
        As :func:`~napari_gpuscope.batch.runner.run_batch`'s.
    recipe_dir : str or Path, optional
        Where the recipe's relative artifact paths start.
    settle_s, poll_s : float
        How long a position must stay unchanged, and how often the INPUTs are looked at.
    idle_s : float, optional
        End after this long with no new position and none waiting (None: only ``stop``).
    stop : callable
        Checked before every poll; True ends the watch (after the round in progress).
    on_round : callable, optional
        Called with each round's report.
    clock, sleep : callable
        Injectable for tests.

    Returns
    -------
    WatchReport

    Raises
    ------
    ValueError
        The recipe's job fits on every position of a run (:func:`check_watchable`).
    InputError
        Two of the INPUTs map to one position name at the start (one that appears later is
        a failed position of that round, named in its report).

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np, tifffile
    >>> from distributed import Client
    >>> from napari_gpuscope.batch.recipes import Recipe
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> tifffile.imwrite(folder / "pos0.tif", np.ones((16, 16), np.float32))
    >>> recipe = Recipe.from_params(TVParams(weight=0.1))
    >>> with Client(processes=False, n_workers=1, threads_per_worker=1,
    ...             dashboard_address=None) as client:
    ...     report = watch_batch(recipe, [str(folder / "*.tif")], folder / "out.zarr", client,
    ...                          settle_s=0, poll_s=0.01, idle_s=0.05)
    >>> report.done, report.stopped_by
    (['pos0'], 'idle')
    """
    from napari_gpuscope.batch.runner import run_batch

    check_watchable(recipe)
    watcher = PositionWatcher(specs, settle_s=settle_s, clock=clock)
    watcher.check_unique()
    input_name = " ".join(specs)
    report = WatchReport()
    last_news = clock()
    try:
        while True:
            if stop():
                report.stopped_by = "stop"
                break
            ready = watcher.poll()
            refused = watcher.take_refused()
            if ready or refused:
                round_report = (
                    run_batch(
                        recipe,
                        ready,
                        out,
                        client,
                        resume=True,
                        device=device,
                        input_name=input_name,
                        recipe_dir=recipe_dir,
                    )
                    if ready
                    else _refusals(recipe, input_name, out, device)
                )
                round_report.failed.update(refused)
                report.rounds.append(round_report)
                if on_round is not None:
                    on_round(round_report)
                if round_report.interrupted:
                    report.stopped_by = "interrupt"
                    break
                if ready:
                    last_news = clock()
                    continue  # look again at once: more may have settled meanwhile
            if watcher.waiting:
                last_news = clock()
            elif idle_s is not None and clock() - last_news >= idle_s:
                report.stopped_by = "idle"
                break
            sleep(poll_s)
    except KeyboardInterrupt:  # between rounds: nothing was cut short
        report.stopped_by = "ctrl-c"
    return report


def _refusals(recipe: Recipe, input_name: str, out: str | Path, device: str) -> BatchReport:
    """A round that computed nothing: only refused positions (filled in by the caller), said
    at once rather than waited for."""
    from napari_gpuscope.batch.report import BatchReport

    report = BatchReport(recipe.hash(), recipe.method, input_name, str(out), device)
    report.finish(0.0, {})
    return report


def describe_settings(settle_s: float, poll_s: float, idle_s: float | None) -> str:
    """One line for the terminal: what the watch waits for."""
    end = "Ctrl-C" if idle_s is None else f"{idle_s:g} s without a new position, or Ctrl-C"
    return (
        f"watching: a position is read once unchanged for {settle_s:g} s (looking every "
        f"{poll_s:g} s); ends after {end}"
    )
