"""What a consumer holds to steer and watch a running job (:mod:`.jobs`).

:class:`CancelToken` asks a job to stop and roll back (:func:`~.jobs.run_job` then raises
:class:`JobCancelled`), :class:`StopToken` to return its best result so far, and
:class:`PreviewThrottle` says when a preview is worth its host copy. They are thread-safe where
a GUI thread sets them while a worker thread runs the job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["CancelToken", "JobCancelled", "PreviewThrottle", "StopToken"]


class JobCancelled(Exception):
    """Raised by :func:`run_job` when its :class:`CancelToken` was cancelled."""


class CancelToken:
    """Thread-safe flag that asks a running job to stop at its next yield (and roll back)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Request cancellation."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was requested."""
        return self._event.is_set()


class StopToken:
    """Thread-safe flag that asks a running job to return its best result so far."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def stop(self) -> None:
        """Request an early stop."""
        self._event.set()

    @property
    def requested(self) -> bool:
        """Whether an early stop was requested."""
        return self._event.is_set()


class PreviewThrottle:
    """Decides when a consumer should pay for materialising a preview.

    Copying a large volume to the host for every update would dominate the run time, so
    consumers make host copies at most every ``interval`` seconds (the first one immediately).

    Parameters
    ----------
    interval : float
        Minimum number of seconds between two previews.
    clock : callable
        Time source, replaceable in tests.

    Examples
    --------
    >>> ticks = iter([0.0, 0.1, 0.3])
    >>> throttle = PreviewThrottle(0.25, clock=lambda: next(ticks))
    >>> [throttle.due() for _ in range(3)]
    [True, False, True]
    """

    def __init__(self, interval: float = 0.25, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        """Return True (and restart the timer) when a preview should be made now."""
        now = self._clock()
        if self._last is None or now - self._last >= self.interval:
            self._last = now
            return True
        return False
