"""The Qt-free controller of a dock: its input, its parameters, its one runner, the job state
machine and its settings.

Every job of a dock -- the full run, the live preview, the kernel warm-up and the method's
other jobs (eSRRF's sweep, flat-field's apply and autotune) -- goes through the dock's one
:class:`DockController`, so one job at a time holds the device:

- a *preview* or a *warm-up* gives way: a newer preview supersedes a running one, any other job
  cancels it first, and a job asked for while the kernels are being prepared is queued (a run or
  a preview) or refused;
- a *run* or a *side job* (any other kind) is never disturbed: a second request is refused with
  a sentence that says what is running (:meth:`DockController.refusal`); previews wait for it.

The controller receives the runner (:class:`~napari_gpuscope.widgets._runner.JobRunner` in a
dock, anything with the same few members in a test) and imports no Qt. The view (the dock)
makes the jobs, shows their progress and results, and asks the controller what may start.

Examples
--------
>>> class Runner:  # what the controller needs of a runner
...     running, tag = False, None
...     def start(self, job, *, description, tag=None, wanted=None):
...         self.running, self.tag = True, tag
...     def cancel(self):
...         was, self.running, self.tag = self.running, False, None
...         return was
...     def request_stop(self):
...         return self.running
>>> jobs = DockController(Runner(), title="TV denoise", method_id="tv")
>>> jobs.launch(DockJob(RUN, name="blobs"), iter(()), description="TV denoise: blobs")
>>> jobs.refusal(RUN)
"TV denoise is already running on 'blobs'; it was not started again (Escape cancels it)."
>>> jobs.refusal("sweep")
"TV denoise is running on 'blobs'; start the sweep when it has finished (Escape cancels it)."
>>> jobs.take().kind, jobs.is_running()
('run', True)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from napari_gpuscope.widgets._settings import DockSettings

if TYPE_CHECKING:
    from napari_gpuscope.compute.jobs import Job, Progress
    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.compute.preview import PlaneView

__all__ = [
    "PREVIEW",
    "RUN",
    "WARMUP",
    "DockController",
    "DockJob",
    "JobHandlers",
    "JobRefused",
    "Runner",
    "unprepared_kernels",
]

RUN, PREVIEW, WARMUP = "run", "preview", "warmup"
"""The kinds of job the dock itself makes; any other kind is a side job (``"sweep"``...)."""
_YIELDING = (PREVIEW, WARMUP)


class JobRefused(ValueError):
    """A job was not started: another one holds the device (the message says which)."""


def unprepared_kernels(device: str, packages: tuple[str, ...] | None = None) -> list[str]:
    """The registered fused ops (under ``packages``, see
    :func:`~napari_gpuscope.compute.kernels.ops_under`) whose path on ``device`` is not decided
    yet.

    The kernels module keeps, per op and device, the outcome of its compile and self-test
    (:func:`~napari_gpuscope.compute.kernels.path_report`), so a method imported later, with
    kernels of its own, is prepared too.
    """
    from napari_gpuscope.compute import kernels

    decided = kernels.path_report(device)
    return [op.name for op in kernels.ops_under(packages) if op.name not in decided]


class Runner(Protocol):
    """What the controller needs of a runner (:class:`~napari_gpuscope.widgets.JobRunner`)."""

    @property
    def running(self) -> bool: ...

    @property
    def tag(self) -> Any: ...

    def start(
        self,
        job: Job[Any],
        *,
        description: str,
        tag: Any = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> int | None: ...

    def cancel(self) -> bool: ...

    def request_stop(self) -> bool: ...


def _nothing(*_: Any) -> None:
    return None


@dataclass
class JobHandlers:
    """How a side job's owner (a panel of the dock) hears of its job, on the GUI thread.

    ``ended()`` follows ``succeeded``/``failed`` and a cancel: the job is gone.
    """

    succeeded: Callable[[Any, float], None] = _nothing
    failed: Callable[[BaseException], None] = _nothing
    progressed: Callable[[Progress], None] = _nothing
    ended: Callable[[], None] = _nothing


@dataclass
class DockJob:
    """What the dock remembers about the running job.

    Attributes
    ----------
    kind : str
        :data:`RUN`, :data:`PREVIEW`, :data:`WARMUP` or a side job's kind (e.g. ``"sweep"``).
    layer : napari.layers.Layer or None
        The input (None only for a warm-up).
    params : Params or None
        The parameters it runs with.
    device : str
        Where it runs.
    name : str
        The input's name at the start (messages).
    title : str
        What the job is called in messages (a side job's own title, e.g. ``"the sweep"``).
    outputs : OutputLayers or None
        The layers a run or preview streams into.
    view : PlaneView or None
        A preview's displayed plane.
    handlers : JobHandlers or None
        A side job's owner; None for the dock's own jobs.
    """

    kind: str
    layer: Any = None
    params: Params | None = None
    device: str = ""
    name: str = ""
    title: str = ""
    outputs: Any = None
    view: PlaneView | None = None
    handlers: JobHandlers | None = field(default=None, repr=False)

    @property
    def is_side_job(self) -> bool:
        """Whether the job is one of the method's other jobs (not run, preview, warm-up)."""
        return self.kind not in (RUN, *_YIELDING)


class DockController:
    """One dock's input, parameters, runner, job state and settings (Qt-free).

    The view writes the input (:meth:`set_input`, from its layer picker) and builds the
    parameters from its controls (:meth:`update_params`, on every change and whenever a job
    starts); the controller keeps the layer weakly, the latest valid parameters and, while the
    controls describe invalid ones, the reason (:attr:`params_error`), which a run asked for
    then fails with.

    Parameters
    ----------
    runner : Runner
        The dock's one runner.
    title : str
        The method's title (messages).
    method_id : str
        The method (the settings file).
    """

    def __init__(self, runner: Runner, *, title: str, method_id: str) -> None:
        self.runner = runner
        self.title = title
        self.settings = DockSettings(method_id)
        self.job: DockJob | None = None
        self.queued: str | None = None
        """A run or preview asked for while the kernels were being prepared."""
        self.saving = False
        """Whether parameter changes are written to the settings (once loaded, not while
        resetting or after release)."""
        self._input: weakref.ref[Any] | None = None
        self.params: Params | None = None
        """The latest valid parameters the view's controls described."""
        self.params_error: str | None = None
        """Why the controls' current values are not valid parameters (None: they are)."""

    # ---------------------------------------------------------------- input and parameters
    @property
    def input_layer(self) -> Any:
        """The dock's input layer (None: none, or it was deleted)."""
        return self._input() if self._input is not None else None

    def set_input(self, layer: Any) -> None:
        """The input the view's picker shows (held weakly: the user may delete the layer)."""
        self._input = weakref.ref(layer) if layer is not None else None

    def update_params(self, build: Callable[[], Params]) -> Params:
        """Build the parameters from the view's controls and keep them, or keep the reason they
        are invalid and raise it (a ``ValueError``: ``ParameterError`` names the field).

        Examples
        --------
        >>> from napari_gpuscope.compute.tv import TVParams
        >>> jobs = DockController(None, title="TV denoise", method_id="tv")
        >>> jobs.update_params(lambda: TVParams(strength=2)).strength
        2.0
        >>> try:
        ...     jobs.update_params(lambda: TVParams(strength=-1))
        ... except ValueError:
        ...     pass
        >>> jobs.params.strength, jobs.params_error[:30]
        (2.0, 'TVParams.strength must be a fi')
        """
        try:
            params = build()
        except ValueError as exc:
            self.params_error = str(exc)
            raise
        self.params, self.params_error = params, None
        return params

    # ---------------------------------------------------------------- state
    def is_running(self) -> bool:
        """Whether a job (of any kind) is running or waiting to start."""
        return bool(self.runner.running)

    @property
    def kind(self) -> str | None:
        """The kind of the current job (None when idle)."""
        return None if self.job is None else self.job.kind

    @property
    def warming_up(self) -> bool:
        """Whether the kernels are being prepared."""
        return self.runner.tag == WARMUP

    def holds_device(self) -> bool:
        """Whether a job runs that nothing may disturb (a run or a side job)."""
        return self.job is not None and self.job.kind not in _YIELDING

    def refusal(self, kind: str) -> str | None:
        """Why a job of ``kind`` cannot start now (None: it can, superseding a preview, or
        queued behind the warm-up when it is a run or a preview)."""
        job = self.job
        if job is None or not self.holds_device():
            if kind not in (RUN, PREVIEW) and self.warming_up:
                return (
                    "The GPU kernels are being prepared (once per session); start it again "
                    "when they are ready."
                )
            return None
        if kind == PREVIEW:
            return "A preview waits for the running job."
        running = self.title if job.kind == RUN else job.title or job.kind
        where = f" on '{job.name}'" if job.name else ""
        if kind == job.kind:
            return (
                f"{running} is already running{where}; it was not started again (Escape "
                "cancels it)."
            )
        what = "it" if kind == RUN else f"the {kind}"
        return (
            f"{running} is running{where}; start {what} when it has finished (Escape cancels it)."
        )

    # ---------------------------------------------------------------- transitions
    def launch(
        self,
        record: DockJob,
        job: Job[Any],
        *,
        description: str,
        wanted: Callable[[str], bool] | None = None,
    ) -> None:
        """Start ``job`` on the runner as the current job (a running preview is superseded)."""
        self.job = record
        self.runner.start(job, description=description, tag=record.kind, wanted=wanted)

    def take(self) -> DockJob | None:
        """Forget the current job (it ended) and return it."""
        job, self.job = self.job, None
        return job

    def cancel(self) -> DockJob | None:
        """Cancel the running job (and what was queued); return it (None when nothing ran)."""
        self.queued = None
        job = self.job
        if not self.runner.cancel():
            return None
        self.job = None
        return job

    def cancel_preview(self) -> DockJob | None:
        """Cancel a queued or running preview; return the running one (None otherwise)."""
        if self.queued == PREVIEW:
            self.queued = None
        job = self.job
        if job is None or job.kind != PREVIEW:
            return None
        self.runner.cancel()
        self.job = None
        return job

    def request_stop(self) -> bool:
        """Ask a run or side job to finish now, keeping its result so far."""
        return self.holds_device() and self.runner.request_stop()

    def queue(self, kind: str) -> None:
        """Start ``kind`` (a run or preview) once the warm-up has finished; a run wins."""
        self.queued = RUN if RUN in (kind, self.queued) else kind

    def next_queued(self) -> str | None:
        """The queued job to start now that the runner is free (None: none, or still busy)."""
        queued, self.queued = self.queued, None
        if queued is not None and self.runner.running:
            return None
        return queued

    # ---------------------------------------------------------------- settings
    def load_settings(self, params_class: type[Params]) -> tuple[Params | None, dict[str, Any]]:
        """The saved ``(params, options)`` (see :meth:`DockSettings.load`)."""
        return self.settings.load(params_class)

    def save_settings(self, params: Callable[[], Params], options: dict[str, Any]) -> None:
        """Write the settings now (a few hundred bytes), so closing napari loses nothing;
        invalid parameters keep the last valid settings."""
        if not self.saving:
            return
        try:
            current = params()
        except ValueError:
            return
        self.settings.save(current, options)

    def forget_settings(self) -> None:
        """Delete the saved settings."""
        self.settings.clear()
