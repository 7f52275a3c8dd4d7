"""Which positions of some INPUTs have settled, for ``napari-gpuscope run --watch``.

One idea: a position is handed out once it is readable and its identity (what a completion
marker is keyed on, :meth:`~napari_gpuscope.batch.inputs.Position.identity`) has stayed the
same for ``settle_s`` seconds, once per identity; and a position name belongs to one input
file, the first seen alone with it (the store's position of that name comes from there): any
other file of that name is refused once, with the reason ``run`` gives, and not waited for.
:mod:`.watch` runs the rounds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from napari_gpuscope.batch.inputs import InputError, Position, checked_unique, discover_all

__all__ = ["DEFAULT_POLL_S", "DEFAULT_SETTLE_S", "PositionWatcher"]

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
    by_name : bool
        A position name belongs to one file (default: a store's positions are named so).
        False: every file is a position of its own, whatever its name (a live folder source,
        which hands on frames, not named positions).

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
        by_name: bool = True,
    ) -> None:
        if settle_s < 0:
            raise ValueError(f"settle_s must be 0 or more seconds, got {settle_s}")
        self.specs = [str(spec) for spec in specs]
        self.settle_s = float(settle_s)
        self._clock = clock
        self.by_name = by_name
        self._seen: dict[str, _Seen] = {}  # key (the name, or the file) -> identity seen
        self._handed: dict[str, str] = {}  # key -> identity handed out
        # name -> the source that has it: the first seen alone with it (the store's position of
        # that name comes from there); never reassigned.
        self._owner: dict[str, str] = {}
        self._refused: dict[str, str] = {}  # name -> reason, refused since take_refused()
        self._reported: set[tuple[str, str]] = set()  # (name, source) refused once already

    @property
    def waiting(self) -> int:
        """Positions seen but not settled yet (or changed since they were handed out)."""
        return sum(
            1 for name, seen in self._seen.items() if self._handed.get(name) != seen.identity
        )

    def _current(self) -> list[Position]:
        """Every position of the INPUTs now, each file once (as :func:`discover_all`)."""
        found: dict[tuple[str, str], Position] = {}
        for spec in self.specs:
            try:
                # Every file, clashing names included: check_unique and _owned refuse a clash.
                positions = discover_all([spec], unique=False)
            except InputError:  # nothing written there yet, or a store not yet a Zarr group
                continue
            for position in positions:
                found.setdefault((position.kind, os.path.abspath(position.source)), position)
        return list(found.values())

    def check_unique(self) -> None:
        """Refuse INPUTs that map two positions to one name now, in ``run``'s words.

        Raises
        ------
        InputError
            Two inputs map to one position name (rename one).
        """
        checked_unique(self._current())

    def take_refused(self) -> dict[str, str]:
        """Positions refused since the last call (name -> reason): a name another input had
        first. Each (name, file) is refused once; it is not waited for."""
        refused, self._refused = self._refused, {}
        return refused

    def _owned(self, positions: list[Position]) -> list[Position]:
        """The positions whose name is theirs; the others are noted as refused."""
        sources: dict[str, list[str]] = {}
        for position in positions:
            sources.setdefault(position.name, []).append(position.source)
        for name, found in sources.items():
            if len(found) == 1:
                self._owner.setdefault(name, found[0])
        kept = []
        for position in positions:
            owner = self._owner.get(position.name)
            if owner == position.source:
                kept.append(position)
                continue
            if (position.name, position.source) in self._reported:
                continue
            self._reported.add((position.name, position.source))
            first = owner if owner is not None else sources[position.name][0]
            other = position.source if first != position.source else sources[position.name][1]
            self._refused[position.name] = (
                f"not computed: two inputs map to the position name {position.name!r}: "
                f"{first!r} and {other!r}; rename one"
            )
        return kept

    def poll(self) -> list[Position]:
        """The positions that have settled since the last poll (in the INPUTs' order)."""
        now = self._clock()
        ready = []
        current = self._current()
        for position in self._owned(current) if self.by_name else current:
            key = position.name if self.by_name else os.path.abspath(position.source)
            try:
                identity = position.identity()
                position.info()  # readable: a TIFF whose header is still being written is not
            except (OSError, ValueError, KeyError, InputError):
                self._seen.pop(key, None)
                continue
            seen = self._seen.get(key)
            if seen is None or seen.identity != identity:
                self._seen[key] = _Seen(identity, now)
                seen = self._seen[key]
            if self._handed.get(key) == identity:
                continue
            if now - seen.since >= self.settle_s:
                self._handed[key] = identity
                ready.append(position)
        return ready
