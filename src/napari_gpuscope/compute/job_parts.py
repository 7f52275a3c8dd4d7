"""Jobs made of other jobs: their updates mapped (:func:`mapped`), their progress scaled into
a part of a whole (:func:`scaled`), and a part that a Stop & keep ends early
(:func:`stoppable_part`). The protocol itself is :mod:`.jobs`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import TypeVar

from .jobs import STOP, Job, Progress

__all__ = ["mapped", "scaled", "stoppable_part"]

R = TypeVar("R")
Y = TypeVar("Y")


def mapped(job: Generator[Y, object, R], transform: Callable[[Y], Progress | None]) -> Job[R]:
    """Re-emit a generator's updates through ``transform`` and return its result.

    The building block for composing jobs: ``result = yield from mapped(sub_job, fn)``.
    ``transform`` may return ``None`` to drop an update. Commands sent to the outer job
    (:data:`STOP`) are forwarded to the wrapped one. The wrapped generator is closed when the
    caller stops early, so its ``finally`` blocks run.

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

    Examples
    --------
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> def ticks():
    ...     yield 1
    ...     yield 2
    ...     return "done"
    >>> run_job(mapped(ticks(), lambda k: Progress(k / 2, f"tick {k}")))
    'done'
    """
    command: object = None
    try:
        while True:
            try:
                update = job.send(command)
            except StopIteration as done:
                return done.value
            progress = transform(update)
            update = None  # see run_job: nothing of a past update is held while the job resumes
            command = None if progress is None else (yield progress)
            progress = None
    finally:
        job.close()


def scaled(job: Job[R], start: float, stop: float, prefix: str = "") -> Job[R]:
    """Re-map a sub-job's progress fractions into ``[start, stop]`` of a parent job.

    Use it with ``result = yield from scaled(sub_job, 0.2, 0.6, "chunk 2/5: ")``. Indeterminate
    updates stay indeterminate.

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

    Examples
    --------
    >>> def half():
    ...     yield Progress(0.5, "half way")
    >>> [u.fraction for u in scaled(half(), 0.5, 1.0)]
    [0.75]
    """
    span = stop - start

    def rescale(update: Progress) -> Progress:
        fraction = None if update.fraction is None else min(1.0, start + span * update.fraction)
        return dataclasses.replace(update, fraction=fraction, message=prefix + update.message)

    return (yield from mapped(job, rescale))


def stoppable_part(
    job: Job[R], start: float, stop: float, prefix: str = "", *, metrics: bool = True
) -> Job[R | None]:
    """Run a sub-job as one part of a parent job that may abandon it: its fractions mapped into
    ``[start, stop]``, ``prefix`` before its messages, its outputs dropped (the parent's layers
    stay as they are); on :data:`STOP` the sub-job is closed and the part returns ``None``
    instead of raising, so the parent can finish with what it has.

    Parameters
    ----------
    job : generator
        The sub-job.
    start, stop : float
        Part of the parent's progress range the sub-job covers.
    prefix : str
        Prepended to every message.
    metrics : bool
        Pass the sub-job's ``step`` and ``metrics`` on (False: the parent's plot is left alone).

    Returns
    -------
    object or None
        The sub-job's result, or None when stopped.

    Examples
    --------
    >>> def half():
    ...     yield Progress(0.5, "half way")
    ...     return "done"
    >>> part = stoppable_part(half(), 0.5, 1.0, "FRC: ")
    >>> next(part).message
    'FRC: half way'
    >>> part.send(STOP) is None
    Traceback (most recent call last):
    ...
    StopIteration
    """
    span = stop - start
    command = None
    try:
        while True:
            try:
                update = job.send(command)
            except StopIteration as done:
                return done.value
            fraction = None if update.fraction is None else min(1.0, start + span * update.fraction)
            passed = update if metrics else Progress(None)
            command = yield dataclasses.replace(
                passed, fraction=fraction, message=prefix + update.message, outputs={}
            )
            if command is STOP:
                return None
    finally:
        job.close()
