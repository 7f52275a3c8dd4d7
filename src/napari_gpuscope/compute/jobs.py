"""The progress protocol every method follows.

A *job* is a generator that yields :class:`Progress` updates and finally returns its result
(``return result`` inside the generator, which Python delivers as ``StopIteration.value``).
Three consumers drive the same generator:

- :func:`run_job` -- the plain blocking call used by scripts and by each method's blocking
  function (``tv.denoise`` is ``run_job(tv.iter_denoise(...))``);
- the widgets' worker threads (superqt ``GeneratorWorker`` emits ``yielded`` for every update
  and ``returned`` with the result);
- tests, which can stop iterating at any point.

Cancellation happens between yields: a consumer that stops iterating calls ``close()`` on the
generator, which raises ``GeneratorExit`` at the paused ``yield`` so ``finally`` blocks release
device memory. Methods therefore yield often (per frame, tile or a few iterations).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "CancelToken",
    "Job",
    "JobCancelled",
    "PreviewThrottle",
    "Progress",
    "mapped",
    "run_job",
    "scaled",
]

R = TypeVar("R")


@dataclass(frozen=True)
class Progress:
    """One progress update of a running job.

    Parameters
    ----------
    fraction : float
        Completed fraction of the whole job, in ``[0, 1]``.
    message : str
        Short human-readable status, e.g. ``"iteration 40/200, gap 3.1e-03"``.
    preview : numpy.ndarray, optional
        Host copy of the current estimate (or of the part named by ``preview_region``).
        Jobs send previews sparingly (see :class:`PreviewThrottle`); ``None`` means
        "nothing new to show".
    preview_region : tuple of slice, optional
        Where ``preview`` belongs inside the full output. ``None`` means ``preview`` is the whole
        output.
    metrics : Mapping[str, float]
        Numbers worth plotting or showing (loss, duality gap, iteration, fitted parameters).
    """

    fraction: float
    message: str
    preview: np.ndarray | None = None
    preview_region: tuple[slice, ...] | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction <= 1.0 + 1e-9:
            raise ValueError(f"Progress.fraction must be within [0, 1], got {self.fraction!r}")


Job = Generator[Progress, None, R]
"""Type of a job: a generator of :class:`Progress` that returns ``R``."""


class JobCancelled(Exception):
    """Raised by :func:`run_job` when its :class:`CancelToken` was cancelled."""


class CancelToken:
    """Thread-safe flag that asks a running job to stop at its next yield."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Request cancellation."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was requested."""
        return self._event.is_set()


def run_job(
    job: Job[R],
    *,
    on_progress: Callable[[Progress], Any] | None = None,
    cancel: CancelToken | None = None,
) -> R:
    """Drive a job to completion and return its result.

    Parameters
    ----------
    job : generator
        A job generator (see the module docstring).
    on_progress : callable, optional
        Called with every :class:`Progress` update.
    cancel : CancelToken, optional
        Checked after every update; when set, the job is closed (its ``finally`` blocks run)
        and :class:`JobCancelled` is raised.

    Returns
    -------
    object
        Whatever the job returned.

    Raises
    ------
    JobCancelled
        If ``cancel`` was set while the job ran.
    """
    try:
        while True:
            update = next(job)
            if on_progress is not None:
                on_progress(update)
            if cancel is not None and cancel.cancelled:
                raise JobCancelled("the job was cancelled")
    except StopIteration as stop:
        return stop.value
    finally:
        job.close()


def mapped(job: Generator[Any, None, R], transform: Callable[[Any], Progress | None]) -> Job[R]:
    """Re-emit a generator's updates through ``transform`` and return its result.

    The building block for composing jobs: ``result = yield from mapped(sub_job, fn)``.
    ``transform`` may return ``None`` to drop an update. The wrapped generator is closed when
    the caller stops early, so its ``finally`` blocks run.

    Parameters
    ----------
    job : generator
        A job, or any generator of updates (e.g. a solver's ticks) that returns a result.
    transform : callable
        Maps one update to the :class:`Progress` to yield (or ``None`` to skip it).

    Returns
    -------
    object
        The wrapped generator's result.
    """
    try:
        while True:
            try:
                update = next(job)
            except StopIteration as done:
                return done.value
            progress = transform(update)
            if progress is not None:
                yield progress
    finally:
        job.close()


def scaled(job: Job[R], start: float, stop: float, prefix: str = "") -> Job[R]:
    """Re-map a sub-job's progress fractions into ``[start, stop]`` of a parent job.

    Use it with ``result = yield from scaled(sub_job, 0.2, 0.6, "chunk 2/5: ")``.

    Parameters
    ----------
    job : generator
        The sub-job.
    start, stop : float
        Part of the parent's progress range the sub-job covers.
    prefix : str
        Prepended to every message.

    Returns
    -------
    object
        The sub-job's result.
    """
    span = stop - start
    return (
        yield from mapped(
            job,
            lambda update: dataclasses.replace(
                update,
                fraction=min(1.0, start + span * update.fraction),
                message=prefix + update.message,
            ),
        )
    )


class PreviewThrottle:
    """Decides when a job should pay for a device-to-host preview copy.

    Copying a large volume to the host for every update would dominate the run time, so jobs
    send previews at most every ``interval`` seconds (the first one immediately).

    Parameters
    ----------
    interval : float
        Minimum number of seconds between two previews.
    clock : callable
        Time source, replaceable in tests.
    """

    def __init__(self, interval: float = 0.25, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        """Return True (and restart the timer) when a preview should be sent now."""
        now = self._clock()
        if self._last is None or now - self._last >= self.interval:
            self._last = now
            return True
        return False
