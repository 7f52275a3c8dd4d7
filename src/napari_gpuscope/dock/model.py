"""The Qt-free model of one method's dock: its method, input, parameters, job state and settings.

A :class:`DockModel` is what a dock *is*, without its widgets: the registry entry it runs, the
input layer (held weakly: the user may delete it), the latest valid parameters or why the
controls describe invalid ones, the one runner through which every job of the dock goes, the
job state machine (what runs, what is queued, what may start) and the settings saved between
sessions. It announces changes through psygnal signals (the events napari's own models use), so
the dock's parts follow it without calling each other; and it builds the method's jobs through
the registry (:meth:`DockModel.default_job`), as the CLI, batch and live runs do.

The model receives the runner (:class:`~napari_gpuscope.widgets._runner.JobRunner` in a dock,
anything with the same few members in a test, :class:`~napari_gpuscope.dock.jobs.Runner`) and
imports no Qt.

Examples
--------
>>> from napari_gpuscope.methods import method
>>> class Runner:  # what the model needs of a runner
...     running, tag = False, None
...     def start(self, job, *, description, tag=None, wanted=None):
...         self.running, self.tag = True, tag
...     def cancel(self):
...         was, self.running, self.tag = self.running, False, None
...         return was
...     def request_stop(self):
...         return self.running
>>> model = DockModel(method("tv"), Runner())
>>> model.title, model.params_class.__name__
('TV denoise', 'TVParams')
>>> model.launch(DockJob(RUN, name="blobs"), iter(()), description="TV denoise: blobs")
>>> model.refusal(RUN)
"TV denoise is already running on 'blobs'; it was not started again (Escape cancels it)."
>>> model.refusal("sweep")
"TV denoise is running on 'blobs'; start the sweep when it has finished (Escape cancels it)."
>>> model.take().kind, model.is_running()
('run', True)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from psygnal import Signal

from napari_gpuscope.dock.jobs import _YIELDING, PREVIEW, RUN, WARMUP, DockJob, Runner
from napari_gpuscope.dock.settings import DockSettings, SettingValue

if TYPE_CHECKING:
    import napari.layers
    from numpy.typing import ArrayLike

    from napari_gpuscope.compute.jobs import Job
    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.compute.results import MethodResult
    from napari_gpuscope.methods import MethodSpec

__all__ = ["DockModel"]


class DockModel:
    """One dock's method, input, parameters, runner, job state and settings (Qt-free).

    The view writes the input (:meth:`set_input`, from its layer picker) and builds the
    parameters from its controls (:meth:`update_params`, on every change and whenever a job
    starts); the model keeps the layer weakly, the latest valid parameters and, while the
    controls describe invalid ones, the reason (:attr:`params_error`), which a run asked for
    then fails with.

    Parameters
    ----------
    spec : MethodSpec
        The method's registry entry (``method(method_id)``,
        :data:`napari_gpuscope.methods.METHODS`).
    runner : Runner
        The dock's one runner.
    dock_defaults : Mapping, optional
        Where the dock starts (and Reset returns) other than the model's defaults.

    Attributes
    ----------
    input_changed : psygnal.Signal
        Emitted with the new input layer (or None) when it changes.
    params_changed : psygnal.Signal
        Emitted with the new valid parameters, or None when the controls became invalid.
    job_changed : psygnal.Signal
        Emitted with the kind of the job that started (or None when it ended).
    """

    input_changed = Signal(object)
    params_changed = Signal(object)
    job_changed = Signal(object)

    def __init__(
        self,
        spec: MethodSpec,
        runner: Runner,
        *,
        dock_defaults: Mapping[str, object] | None = None,
    ) -> None:
        self.spec = spec
        self.method_id = spec.id
        self.params_class: type[Params] = self.spec.params_class()
        self.title = self.spec.title
        self.runner = runner
        self.dock_defaults = dict(dock_defaults or {})
        self.settings = DockSettings(spec.id)
        self.job: DockJob | None = None
        self.queued: str | None = None
        """A run or preview asked for while the kernels were being prepared."""
        self.saving = False
        """Whether parameter changes are written to the settings (once loaded, not while
        resetting or after release)."""
        self._input: weakref.ref[napari.layers.Layer] | None = None
        self.params: Params | None = None
        """The latest valid parameters the view's controls described."""
        self.params_error: str | None = None
        """Why the controls' current values are not valid parameters (None: they are)."""
        self.owned: weakref.WeakKeyDictionary[
            napari.layers.Layer, weakref.ref[napari.layers.Layer]
        ] = weakref.WeakKeyDictionary()
        """Every layer the dock made (results, previews) -> its input layer, both weakly: the
        user may delete either."""

    # ---------------------------------------------------------------- the method
    def defaults(self) -> dict[str, object]:
        """The dock's default value of every parameter (``dock_defaults`` over the model's)."""
        model = {info.name: info.default for info in self.params_class.param_info()}
        return {**model, **self.dock_defaults}

    def default_job(
        self,
        data: ArrayLike,
        params: Params,
        device: str,
        **inputs: object,
    ) -> Job[MethodResult]:
        """The method's main job on ``data``, exactly as the registry builds it for the CLI,
        batch and live runs (``inputs``: the job's declared extra inputs, e.g. a dark frame).

        Examples
        --------
        >>> import numpy as np
        >>> from napari_gpuscope.compute.jobs import run_job
        >>> from napari_gpuscope.methods import method
        >>> model = DockModel(method("tv"), runner=None)
        >>> params = model.params_class(strength=1.0, max_iterations=5)
        >>> noisy = np.random.default_rng(0).normal(100.0, 5.0, (8, 8)).astype(np.float32)
        >>> job = model.default_job(noisy, params, "cpu")
        >>> run_job(job).image.shape
        (8, 8)
        """
        return self.spec.job_function()(data, params=params, device=device, **inputs)

    # ---------------------------------------------------------------- input and parameters
    @property
    def input_layer(self) -> napari.layers.Layer | None:
        """The dock's input layer (None: none, or it was deleted)."""
        return self._input() if self._input is not None else None

    def set_input(self, layer: napari.layers.Layer | None) -> None:
        """The input the view's picker shows (held weakly: the user may delete the layer);
        emits :attr:`input_changed` when it is another layer."""
        if layer is self.input_layer:
            return
        self._input = weakref.ref(layer) if layer is not None else None
        self.input_changed.emit(layer)

    def update_params(self, build: Callable[[], Params]) -> Params:
        """Build the parameters from the view's controls and keep them, or keep the reason they
        are invalid and raise it (a ``ValueError``: ``ParameterError`` names the field).

        Examples
        --------
        >>> from napari_gpuscope.compute.tv import TVParams
        >>> from napari_gpuscope.methods import method
        >>> model = DockModel(method("tv"), runner=None)
        >>> model.update_params(lambda: TVParams(strength=2)).strength
        2.0
        >>> try:
        ...     model.update_params(lambda: TVParams(strength=-1))
        ... except ValueError:
        ...     pass
        >>> model.params.strength, model.params_error[:30]
        (2.0, 'TVParams.strength must be a fi')
        """
        try:
            params = build()
        except ValueError as exc:
            changed = self.params_error != str(exc)
            self.params_error = str(exc)
            if changed:
                self.params_changed.emit(None)
            raise
        changed = params != self.params or self.params_error is not None
        self.params, self.params_error = params, None
        if changed:
            self.params_changed.emit(params)
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
        job: Job[object],
        *,
        description: str,
        wanted: Callable[[str], bool] | None = None,
    ) -> None:
        """Start ``job`` on the runner as the current job (a running preview is superseded)."""
        self.job = record
        self.runner.start(job, description=description, tag=record.kind, wanted=wanted)
        self.job_changed.emit(record.kind)

    def take(self) -> DockJob | None:
        """Forget the current job (it ended) and return it."""
        job, self.job = self.job, None
        if job is not None:
            self.job_changed.emit(None)
        return job

    def cancel(self) -> DockJob | None:
        """Cancel the running job (and what was queued); return it (None when nothing ran)."""
        self.queued = None
        job = self.job
        if not self.runner.cancel():
            return None
        self.job = None
        self.job_changed.emit(None)
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
        self.job_changed.emit(None)
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
    def load_settings(self) -> tuple[Params | None, dict[str, SettingValue]]:
        """The saved ``(params, options)`` (see :meth:`DockSettings.load`)."""
        return self.settings.load(self.params_class)

    def save_settings(
        self, params: Callable[[], Params], options: Mapping[str, SettingValue]
    ) -> None:
        """Write the settings now (a few hundred bytes), so closing napari loses nothing;
        invalid parameters keep the last valid settings."""
        if not self.saving:
            return
        try:
            current = params()
        except ValueError:
            return
        self.settings.save(current, dict(options))

    def forget_settings(self) -> None:
        """Delete the saved settings."""
        self.settings.clear()
