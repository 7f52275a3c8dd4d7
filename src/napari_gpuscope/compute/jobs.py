"""The progress protocol every method follows.

A *job* is a generator that yields :class:`Progress` updates and finally returns its result
(``return result`` inside the generator, which Python delivers as ``StopIteration.value``).
Three consumers drive the same generator:

- :func:`run_job` -- the plain blocking call used by scripts and by each method's blocking
  function (``tv.denoise`` is ``run_job(tv.iter_denoise(...))``, see :func:`blocking`);
- the widgets' worker threads, which materialise the outputs someone displays, in the worker
  thread, and hand the updates to the GUI thread;
- tests, which can stop iterating at any point.

Two ways to end a job early:

*Cancel* (roll back): the consumer stops iterating and calls ``close()``; ``GeneratorExit`` is
raised at the paused ``yield`` so ``finally`` blocks release device memory. Nothing is returned.

*Stop and keep* (the best so far): the consumer sends :data:`STOP` into the generator
(``job.send(STOP)``) at every resume after the request; a job that supports it finishes its
current step and returns its current result marked ``stopped_early``. ``yield`` expressions of
jobs therefore read ``command = yield Progress(...)``; a job that cannot stop early ignores the
command and simply runs on.

Outputs are *lazy*: ``Progress.outputs`` maps an output name to an :class:`Output` whose data may
be a zero-argument callable that makes the host copy. Only a consumer that displays the output
calls it (in the thread that iterates the job, while the job is paused at its ``yield``), so
previews cost nothing in scripts and batch runs.

What a consumer steers a job with (cancel and stop tokens) and paces its previews with is in
:mod:`.job_control`; jobs made of other jobs (their progress mapped, scaled into a range, or a
part that a stop ends) use :mod:`.job_parts`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from .job_control import CancelToken, JobCancelled, StopToken

if TYPE_CHECKING:
    from ._types import ArrayLike

__all__ = [
    "OUTPUT_KINDS",
    "STOP",
    "Job",
    "Output",
    "Progress",
    "blocking",
    "is_stop",
    "run_job",
]

R = TypeVar("R")

OUTPUT_KINDS = ("image", "vectors")
"""What an :class:`Output` holds: an image (any dimensionality) or napari vectors data
(``(N, 2, D)``: start point and direction of each vector)."""


class _Stop:
    """The "stop now and keep the best so far" command (singleton :data:`STOP`)."""

    _instance: _Stop | None = None

    def __new__(cls) -> _Stop:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "STOP"

    def __reduce__(self) -> str:
        return "STOP"


STOP = _Stop()
"""Sent into a job (``job.send(STOP)``) to ask it to return its current result now."""


def is_stop(command: object) -> bool:
    """Whether the value a ``yield`` returned is the :data:`STOP` command."""
    return command is STOP


@dataclass(frozen=True)
class Output:
    """One named partial or final output carried by a :class:`Progress` update.

    Parameters
    ----------
    data : numpy.ndarray or callable
        The host data, or a zero-argument callable that makes it (a device-to-host copy). A
        callable is only valid while the job is paused at the ``yield`` that carried it.
    region : tuple of slice, optional
        Where ``data`` belongs inside the full output; ``None`` means the whole output.
    kind : {"image", "vectors"}
        How a viewer should show it.
    shape : tuple of int, optional
        Shape of the *full* output (needed to place a region into an empty buffer).

    Examples
    --------
    >>> import numpy as np
    >>> out = Output(lambda: np.zeros((4, 4)), region=(slice(0, 4), slice(0, 4)))
    >>> out.is_lazy, out.materialize().is_lazy
    (True, False)
    """

    data: ArrayLike | Callable[[], ArrayLike]
    region: tuple[slice, ...] | None = None
    kind: str = "image"
    shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in OUTPUT_KINDS:
            raise ValueError(f"Output.kind must be one of {OUTPUT_KINDS}, got {self.kind!r}")

    @property
    def is_lazy(self) -> bool:
        """Whether ``data`` is still a callable that has not made its host copy."""
        return callable(self.data)

    def array(self) -> np.ndarray:
        """The host data (calls the callable of a lazy output)."""
        return np.asarray(self.data() if self.is_lazy else self.data)

    def materialize(self) -> Output:
        """This output with its host copy made (``self`` when it is not lazy)."""
        return dataclasses.replace(self, data=self.array()) if self.is_lazy else self


@dataclass(frozen=True)
class Progress:
    """One progress update of a running job.

    Parameters
    ----------
    fraction : float or None
        Completed fraction of the whole job, in ``[0, 1]``; ``None`` means indeterminate (an
        optimiser that stops on a criterion, an estimate, an autotune).
    message : str
        Short human-readable status, e.g. ``"iteration 40/1000, gap 3.1e-03"``.
    step : float, optional
        x-axis value of ``metrics`` (iteration, frame, evaluation).
    metrics : Mapping[str, float]
        Numbers worth plotting or showing (loss, duality gap, fitted parameters).
    outputs : Mapping[str, Output]
        Named partial results, usually lazy (see :class:`Output`).

    Examples
    --------
    >>> Progress(None, "estimating the camera model").indeterminate
    True
    """

    fraction: float | None
    message: str = ""
    step: float | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    outputs: Mapping[str, Output] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fraction is not None and not 0.0 <= self.fraction <= 1.0 + 1e-9:
            raise ValueError(
                f"Progress.fraction must be within [0, 1] or None, got {self.fraction!r}"
            )
        for name, output in self.outputs.items():
            if not isinstance(output, Output):
                raise TypeError(f"Progress.outputs[{name!r}] must be an Output, got {output!r}")

    @property
    def indeterminate(self) -> bool:
        """Whether the job cannot say how far along it is."""
        return self.fraction is None

    def materialized(self, names: Callable[[str], bool] | None = None) -> Progress:
        """A copy whose outputs selected by ``names`` have their host copies made.

        Outputs not selected are dropped (they would be stale once the job resumes).
        """
        keep = {
            name: output.materialize()
            for name, output in self.outputs.items()
            if names is None or names(name)
        }
        return dataclasses.replace(self, outputs=keep)


Job = Generator[Progress, object, R]
"""Type of a job: a generator of :class:`Progress` that accepts commands and returns ``R``."""


def run_job(
    job: Job[R],
    *,
    on_progress: Callable[[Progress], object] | None = None,
    cancel: CancelToken | None = None,
    stop: StopToken | None = None,
) -> R:
    """Drive a job to completion and return its result.

    Parameters
    ----------
    job : generator
        A job generator (see the module docstring).
    on_progress : callable, optional
        Called with every :class:`Progress` update, while the job is paused (lazy outputs may be
        materialised inside the callback, not after it).
    cancel : CancelToken, optional
        Checked after every update; when set, the job is closed (its ``finally`` blocks run)
        and :class:`JobCancelled` is raised.
    stop : StopToken, optional
        Checked after every update; once set, :data:`STOP` is sent at every resume.

    Returns
    -------
    object
        Whatever the job returned.

    Raises
    ------
    JobCancelled
        If ``cancel`` was set while the job ran.

    Examples
    --------
    >>> def count(n):
    ...     for i in range(n):
    ...         yield Progress((i + 1) / n, f"step {i + 1}")
    ...     return n
    >>> run_job(count(3))
    3
    """
    command: object = None
    try:
        while True:
            update = job.send(command)
            if on_progress is not None:
                on_progress(update)
            # Dropped before the job resumes: a lazy output pins the tensors it would copy, and
            # the job's next step plans its memory without them.
            update = None
            if cancel is not None and cancel.cancelled:
                raise JobCancelled("the job was cancelled")
            command = STOP if stop is not None and stop.requested else None
    except StopIteration as done:
        return done.value
    finally:
        job.close()


def blocking(
    job_function: Callable[..., Job[R]], unwrap: Callable[[R], object] | None = None
) -> Callable[..., object]:
    """Make the blocking twin of a job function: same signature, runs the job to completion.

    Parameters
    ----------
    job_function : callable
        ``iter_<method>(...) -> Job[Result]``.
    unwrap : callable, optional
        Applied to the job's result (e.g. ``lambda r: r.image`` to return the array only).

    Returns
    -------
    callable
        ``f(*args, **kwargs) = unwrap(run_job(job_function(*args, **kwargs)))`` with the
        signature of ``job_function``.

    Examples
    --------
    >>> def iter_square(x):
    ...     yield Progress(None, "squaring")
    ...     return x * x
    >>> square = blocking(iter_square)
    >>> square(3)
    9
    """

    @functools.wraps(job_function)
    def run(*args: object, **kwargs: object) -> object:
        result = run_job(job_function(*args, **kwargs))
        return result if unwrap is None else unwrap(result)

    signature = inspect.signature(job_function)
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=inspect.Signature.empty
    )
    return run
