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
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.inputs import InputError, Position, discover_all

if TYPE_CHECKING:
    from distributed import Client

    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.batch.report import BatchReport

__all__ = ["DEFAULT_POLL_S", "DEFAULT_SETTLE_S", "PositionWatcher", "WatchReport", "watch_batch"]

DEFAULT_POLL_S = 1.0
"""Seconds between two looks at the INPUTs."""

DEFAULT_SETTLE_S = 3.0
"""Seconds a position must stay unchanged before it is read: longer than the gap between two
frames a writer flushes (a camera at 1 frame/s writing a TIFF frame by frame needs more)."""


@dataclass
class _Seen:
    identity: str
    since: float


class PositionWatcher:
    """The positions of some INPUTs that have settled, each handed out once per identity.

    Parameters
    ----------
    specs : sequence of str
        The INPUTs (as ``napari-gpuscope run`` takes them); one that matches nothing yet is
        simply empty for now.
    settle_s : float
        How long a position's identity must stay the same before it is handed out.
    clock : callable
        Seconds, monotonic (``time.monotonic``; a test steps its own).

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np, tifffile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> now = [0.0]
    >>> watcher = PositionWatcher([str(folder / "*.tif")], settle_s=2, clock=lambda: now[0])
    >>> watcher.poll()
    []
    >>> tifffile.imwrite(folder / "a.tif", np.zeros((4, 4), np.uint16))
    >>> watcher.poll(), watcher.waiting
    ([], 1)
    >>> now[0] = 2.5
    >>> [p.name for p in watcher.poll()], watcher.waiting
    (['a'], 0)
    >>> watcher.poll()  # handed out once
    []
    """

    def __init__(
        self,
        specs: Sequence[str],
        *,
        settle_s: float = DEFAULT_SETTLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settle_s < 0:
            raise ValueError(f"settle_s must be 0 or more seconds, got {settle_s}")
        self.specs = [str(spec) for spec in specs]
        self.settle_s = float(settle_s)
        self._clock = clock
        self._seen: dict[str, _Seen] = {}
        self._handed: dict[str, str] = {}  # name -> identity handed out

    @property
    def waiting(self) -> int:
        """Positions seen but not settled yet (or changed since they were handed out)."""
        return sum(
            1 for name, seen in self._seen.items() if self._handed.get(name) != seen.identity
        )

    def _current(self) -> list[Position]:
        found: list[Position] = []
        for spec in self.specs:
            try:
                found.extend(discover_all([spec]))
            except InputError:  # nothing written there yet, or a store not yet a Zarr group
                continue
        return found

    def poll(self) -> list[Position]:
        """The positions that have settled since the last poll (in the INPUTs' order)."""
        now = self._clock()
        ready = []
        for position in self._current():
            try:
                identity = position.identity()
                position.info()  # readable: a TIFF whose header is still being written is not
            except (OSError, ValueError, KeyError, InputError):
                self._seen.pop(position.name, None)
                continue
            seen = self._seen.get(position.name)
            if seen is None or seen.identity != identity:
                self._seen[position.name] = _Seen(identity, now)
                seen = self._seen[position.name]
            if self._handed.get(position.name) == identity:
                continue
            if now - seen.since >= self.settle_s:
                self._handed[position.name] = identity
                ready.append(position)
        return ready


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

    watcher = PositionWatcher(specs, settle_s=settle_s, clock=clock)
    report = WatchReport()
    last_news = clock()
    try:
        while True:
            if stop():
                report.stopped_by = "stop"
                break
            ready = watcher.poll()
            if ready:
                last_news = clock()
                round_report = run_batch(
                    recipe,
                    ready,
                    out,
                    client,
                    resume=True,
                    device=device,
                    input_name=" ".join(specs),
                    recipe_dir=recipe_dir,
                )
                report.rounds.append(round_report)
                if on_round is not None:
                    on_round(round_report)
                if round_report.interrupted:
                    report.stopped_by = "interrupt"
                    break
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


def describe_settings(settle_s: float, poll_s: float, idle_s: float | None) -> str:
    """One line for the terminal: what the watch waits for."""
    end = "Ctrl-C" if idle_s is None else f"{idle_s:g} s without a new position, or Ctrl-C"
    return (
        f"watching: a position is read once unchanged for {settle_s:g} s (looking every "
        f"{poll_s:g} s); ends after {end}"
    )
