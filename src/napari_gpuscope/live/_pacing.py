"""How many frames a live worker that fell behind takes in one job step.

Frames waiting in the buffer are taken together (a live eSRRF's chunk, a live flat-field's
apply job), which spares the per-step cost; but Stop & keep and Cancel act between steps, so a
step is kept to about :data:`STEP_SECONDS` at the rate measured so far, and the first step of a
session takes one frame (its rate is not known yet).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["STEP_SECONDS", "StepPacer"]

STEP_SECONDS: float | None = 0.5
"""The time one step of frames taken together may take (None: no limit but the method's own)."""

_DEFAULT = object()


class StepPacer:
    """The most frames the next step may take, from the time the last one took.

    Parameters
    ----------
    seconds : float or None, optional
        The time a step may take; by default :data:`STEP_SECONDS` (read when made). None: no
        limit (:meth:`most` is None).
    clock : callable
        Seconds, monotonic (tests give their own).

    Examples
    --------
    >>> now = iter([0.0, 0.1, 1.0, 1.8])
    >>> pacer = StepPacer(0.5, clock=lambda: next(now))
    >>> pacer.most()                   # no rate yet: one frame
    1
    >>> pacer.start(); pacer.done(1)   # one frame in 0.1 s
    >>> pacer.most()
    5
    >>> pacer.start(); pacer.done(4)   # four in 0.8 s: 0.2 s each
    >>> pacer.most()
    2
    >>> StepPacer(None).most() is None
    True
    """

    def __init__(
        self,
        seconds: float | object | None = _DEFAULT,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.seconds: float | None = STEP_SECONDS if seconds is _DEFAULT else seconds  # type: ignore[assignment]
        self.clock = clock
        self.per_frame: float | None = None
        """Seconds a frame took in the last step (None before the first)."""
        self._started: float | None = None

    def start(self) -> None:
        """A step begins now."""
        self._started = self.clock()

    def done(self, frames: int) -> None:
        """The step begun at :meth:`start` processed ``frames`` frames."""
        if self._started is not None and frames > 0:
            self.per_frame = max(self.clock() - self._started, 0.0) / frames
        self._started = None

    def most(self) -> int | None:
        """Frames the next step may take (at least 1), or None without a limit."""
        if self.seconds is None:
            return None
        if self.per_frame is None:
            return 1
        if self.per_frame <= 0:
            return None
        return max(1, int(self.seconds / self.per_frame))
