"""The job side of a dock's view: it makes the jobs the model lets start and shows what the one
runner reports (progress, streamed outputs, results, errors), for the dock's own jobs (run,
preview, kernel warm-up), and hands a side job's reports to its owner's handlers.

It keeps the latest run's result layers and the live preview's layers (the model keeps every
layer the dock made).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from qtpy.QtCore import QObject

from napari_gpuscope.compute.devices import device_label, no_gpu_message
from napari_gpuscope.compute.preview import PlaneView, PreviewResult
from napari_gpuscope.compute.results import Geometry, result_name
from napari_gpuscope.dock.jobs import PREVIEW, RUN, WARMUP, DockJob, unprepared_kernels
from napari_gpuscope.dock.messages import is_expected, plain_error_message, sentence
from napari_gpuscope.dock.outputs import OutputLayers
from napari_gpuscope.dock.viewer_status import refresh_viewer_status
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance, provenance_of

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.jobs import Progress
    from napari_gpuscope.compute.results import MethodResult
    from napari_gpuscope.dock.context import MethodView
    from napari_gpuscope.dock.model import DockModel
    from napari_gpuscope.widgets._dock_parts import DockPanel
    from napari_gpuscope.widgets._runner import JobRunner
    from napari_gpuscope.widgets._status_view import StatusView

__all__ = ["JobView"]

RUN_PLOT_TITLE, LAST_RUN_PLOT_TITLE = "Run: ", "Last run: "
"""The metrics plot's title while it shows the current run, and once a preview is described."""


class JobView(QObject):
    """Starting a dock's own jobs and showing what its runner reports.

    Parameters
    ----------
    parent : QObject
        The dock (owner: the runner's signals go when it does).
    model : DockModel
        The dock's model: what runs and what may start.
    runner : JobRunner
        The model's runner (its signals are connected here).
    panel : DockPanel
        Progress, clock, plot and options.
    status : StatusView
        The status line, buttons and error reports.
    dock : MethodView
        The method's side of the dock (its hooks make and describe the jobs).
    """

    def __init__(
        self,
        parent: QObject,
        model: DockModel,
        *,
        runner: JobRunner,
        panel: DockPanel,
        status: StatusView,
        dock: MethodView,
    ) -> None:
        super().__init__(parent)
        self.dock, self.model, self.runner = dock, model, runner
        self.panel, self.status = panel, status
        self.viewer = dock.viewer
        self.preview_layers: dict[str, napari.layers.Layer] = {}
        self.last_results: list[napari.layers.Layer] = []
        runner.progressed.connect(self.on_progress)
        runner.succeeded.connect(self.on_succeeded)
        runner.failed.connect(self.on_failed)
        runner.stopped.connect(self.on_stopped)

    # ---------------------------------------------------------------- starting
    def start(self, kind: str) -> bool:
        """Start a run or a preview (:data:`RUN`, :data:`PREVIEW`) on the dock's input; say why
        not when it cannot start. Returns whether it started (or was queued)."""
        dock, preview = self.dock, kind == PREVIEW
        device = dock.device
        if device is None:
            self.status.report_error(no_gpu_message(), preview=preview)
            return False
        if self.model.warming_up:  # start once the kernels are ready
            self.model.queue(kind)
            self.status.set_status("Preparing GPU kernels first; the job starts right after.")
            self.status.update_buttons()
            return True
        layer = dock.input_layer
        try:
            if layer is not None and layer not in self.viewer.layers:
                raise ValueError(f"Layer '{layer.name}' is no longer in the viewer.")
            dock.validate_input(layer, check_values=not preview)
            assert layer is not None  # validate_input refuses None
            params = dock.params()
            view = PlaneView.of(self.viewer, layer) if preview else None
            job = (
                dock.make_preview_job(layer, params, device, view)
                if view is not None
                else dock.make_job(layer, params, device)
            )
        except ValueError as exc:  # ParameterError included: the message names the field
            # The input or a field is what to change: said in the dock, not notified on top.
            self.status.report_error(str(exc), preview=preview, expected=True)
            return False
        except Exception as exc:  # a bug must not take napari down; tell the user instead
            self.status.report_error(
                f"Could not start {dock.title}: {plain_error_message(exc)}", preview=preview
            )
            return False

        previous = self.model.job  # only a preview is ever superseded (a run never is)
        if previous is not None and previous.outputs is not None:
            self.preview_layers.update(previous.outputs.layers())  # for the next preview
        record = DockJob(kind, layer, params, device, name=layer.name, view=view)
        record.outputs = self._output_layers(record)
        self.model.launch(
            record,
            job,
            description=f"{dock.title}{' preview' if preview else ''}: {layer.name}",
            wanted=self._wants,
        )
        what = "Previewing" if preview else "Running"
        self.status.set_status(f"{what} {dock.title} on '{layer.name}' ({device})...")
        if not preview:  # a preview's few iterations would only blank the last run's curve
            self.panel.plot.reset(RUN_PLOT_TITLE, dock.metric_targets(params), dock.step_label)
        self.panel.start_clock(self.runner)
        self.status.update_buttons()
        return True

    def _wants(self, name: str) -> bool:
        streamed = self.dock.streamed_outputs
        return streamed is None or name in streamed

    def _output_layers(self, job: DockJob) -> OutputLayers:
        dock = self.dock
        layer, preview, params = job.layer, job.kind == PREVIEW, job.params
        streamed = dock.streamed_outputs
        main = streamed[0] if streamed else None
        tag = dock.short_title or dock.title
        # A run's streaming layer starts with the kind its result will have ("flatfield
        # running · tiles" becomes "flatfield · tiles [λ=auto]"; it was "BaSiC running").
        kinds = {} if preview else dict(zip(streamed or (), self._output_kinds(), strict=False))

        def name_of(output: str) -> str:
            # Provisional for a run: its result names its layers when it finishes. The kind
            # comes first, as in the result's names: napari's layer list elides the middle of
            # a long name, so its start is what stays readable.
            kind = kinds.get(output) or (tag if output == main or main is None else output)
            name = layer.name if layer is not None else job.name
            return result_name(f"{kind} {'preview' if preview else 'running'}", name)

        if preview:
            reuse = self.preview_layers
        elif self.panel.replace_last.isChecked():
            reuse = dict(zip(streamed or (), self.last_results, strict=False))
        else:
            reuse = {}

        def geometry(kwargs: dict[str, object], ndim: int) -> dict[str, object]:
            assert params is not None and layer is not None
            image = cast("napari.layers.Image", layer)
            return dock.output_geometry(kwargs, ndim, preview=preview, params=params, layer=image)

        return OutputLayers(
            self.viewer,
            layer,
            name_of,
            reuse=reuse,
            view=job.view,
            link=self.panel.link_display.isChecked(),
            owned=self.model.owned,
            geometry=geometry,
            display=dock.output_display,
            replaceable=self._earlier_result,
        )

    def _output_kinds(self) -> tuple[str, ...]:
        """What the main job's result layers show, in order (the registry's word for each)."""
        job_spec = getattr(self.model.spec, "job_spec", None)  # a test's spec may have none
        return tuple(job_spec().output_kinds) if job_spec is not None else ()

    def _earlier_result(self, layer: napari.layers.Layer) -> bool:
        """Whether ``layer`` is an earlier result of this dock's method (made by this dock, or
        with its method's provenance): one of the same name gives way to the new result."""
        if layer is self.dock.input_layer:
            return False  # what the run reads stays, whatever its name
        if layer in self.model.owned:
            return True
        record = provenance_of(layer)
        return isinstance(record, dict) and record.get("method") == self.dock.method_id

    # ---------------------------------------------------------------- the live preview's layers
    def stop_preview(self) -> None:
        """Cancel a queued or running preview (rolled back) and remove the preview layers."""
        job = self.model.cancel_preview()
        if job is not None:
            if job.outputs is not None:
                job.outputs.rollback()
            self.panel.stop_clock()
        layers, self.preview_layers = self.preview_layers, {}
        for layer in layers.values():
            if layer in self.viewer.layers:
                self.viewer.layers.remove(layer)

    # ---------------------------------------------------------------- runner reports
    def on_progress(self, update: Progress) -> None:
        """Show a progress update: its words, metrics and streamed outputs."""
        job = self.model.job
        if job is None or job.kind == WARMUP:
            self.panel.show_progress(update)
            return
        if job.handlers is not None:
            self.panel.show_progress(update)
            job.handlers.progressed(update)
            return
        if job.layer not in self.viewer.layers:  # input removed (or viewer closing): stop
            self.dock.cancel()
            return
        self.panel.show_progress(update)
        if update.metrics and job.kind == RUN:
            self.panel.plot.add(update.step, update.metrics)
            self.panel.plot.setVisible(True)
        for name, output in update.outputs.items():
            if output.is_lazy or job.outputs is None:
                continue
            try:
                job.outputs.show(name, output)
            except Exception as exc:  # raised in a Qt slot it would repeat on every update
                self.dock.cancel()
                self.status.report_error(
                    f"{self.dock.title} was cancelled: its output '{name}' could not be shown "
                    f"({plain_error_message(exc)}). Nothing was changed.",
                    preview=job.kind == PREVIEW,
                )
                return

    def on_succeeded(self, result: object, elapsed: float) -> None:
        """Show a finished job's result (or hand it to the side job's owner)."""
        job = self.model.take()
        if job is None or job.kind == WARMUP:
            self.panel.stop_clock()  # a preparation step: no time or full bar to report
            self._warmed_up(job, result)
            return
        if job.handlers is not None:
            self.panel.stop_clock(elapsed)
            self.panel.show_done()
            try:
                job.handlers.succeeded(result, elapsed)
            finally:
                job.handlers.ended()
            return
        # A run returns make_job's result, a preview a PreviewResult (typing only: unchecked).
        shown = cast("MethodResult | PreviewResult", result)
        self.panel.stop_clock(elapsed)
        preview = job.kind == PREVIEW
        try:
            layers = self._show_result(job, shown, elapsed)
            self.dock.on_result(
                shown, preview=preview, layer=cast("napari.layers.Image", job.layer)
            )
        except Exception as exc:  # never raise into the Qt loop
            if job.outputs is not None:
                job.outputs.rollback()
            self.status.report_error(
                f"{self.dock.title} finished but its result could not be shown: "
                f"{plain_error_message(exc)}",
                preview=preview,
            )
            return
        if preview:
            self.status.forget_preview_error()  # the same failure again would be news
            planes = cast(PreviewResult, shown).planes
            self.preview_layers = dict(zip(list(planes), layers, strict=False))
            # The status now describes the preview; the plot still shows the run's curve.
            if self.panel.plot.title == RUN_PLOT_TITLE:
                self.panel.plot.retitle(LAST_RUN_PLOT_TITLE)
        else:
            self.last_results = layers
            # napari selects the layer added last (phase's hidden absorption): select what shows.
            visible = [layer for layer in layers if layer.visible and layer in self.viewer.layers]
            if visible:
                self.viewer.layers.selection.active = visible[0]
        self.panel.show_done()
        self.status.set_status(f"{sentence(shown.describe())} Took {elapsed:.2f} s.")

    def _show_result(
        self, job: DockJob, result: MethodResult | PreviewResult, elapsed: float
    ) -> list[napari.layers.Layer]:
        assert job.params is not None and job.layer is not None and job.outputs is not None
        record = build_provenance(
            self.dock.method_id,
            job.params.to_dict(),
            device=device_label(job.device),
            input_name=job.layer.name,
            elapsed_seconds=elapsed,
            result=result.summary(),
        )
        metadata = {PROVENANCE_KEY: record}
        outputs = job.outputs
        if job.kind == PREVIEW:
            return outputs.finish_planes(cast(PreviewResult, result).planes, metadata)
        tuples = cast("MethodResult", result).layers(
            job.layer.name, Geometry.of_layer(job.layer), metadata
        )
        return outputs.finish(tuples, list(self.dock.streamed_outputs or outputs.order))

    def on_failed(self, exc: BaseException) -> None:
        """Say why a job failed (or tell the side job's owner); nothing it made stays."""
        job = self.model.take()
        self.panel.stop_clock()
        if job is not None and job.outputs is not None:
            job.outputs.rollback()
        if job is not None and job.handlers is not None:
            try:
                job.handlers.failed(exc)
            finally:
                job.handlers.ended()
            return
        if job is not None and job.kind == WARMUP:
            self.status.set_status(
                f"Could not prepare the GPU kernels ({plain_error_message(exc)}); jobs use the "
                "slower torch path."
            )
            return
        where = f" on '{job.layer.name}'" if job is not None and job.layer is not None else ""
        self.status.report_error(
            f"{self.dock.title} failed{where}: {plain_error_message(exc)}",
            preview=job is not None and job.kind == PREVIEW,
            expected=is_expected(exc),  # e.g. NaN found in a lazy input: the input, not a bug
        )

    def on_stopped(self) -> None:
        """The runner is free: start what was queued; refresh the buttons and napari's status."""
        queued = self.model.next_queued()
        if queued is not None:
            self.start(queued)
        self.status.update_buttons()
        refresh_viewer_status(self.viewer)  # napari redraws it only when the mouse moves

    # ---------------------------------------------------------------- kernel warm-up
    def warm_up(self, device: str | None) -> None:
        """Compile and self-test the kernels not yet prepared on ``device``, as a visible
        step."""
        if device is None:
            return
        self.model.spec.job_function()  # imports the method, which registers its kernels
        packages = self.dock.kernel_packages()
        if not unprepared_kernels(device, packages):
            return
        job = self.model.job
        if job is not None and job.kind != PREVIEW:
            return  # never disturb a run or side job (it pays the compile itself)
        if job is not None:  # a preview: prepare first, then preview again
            self.dock.cancel()
            self.model.queue(PREVIEW)
        from napari_gpuscope.compute import kernels

        self.model.launch(
            DockJob(WARMUP, device=device),
            kernels.warm_up(device, packages),
            description=f"{self.dock.title}: GPU kernels",
        )
        self.status.set_status(
            f"Preparing GPU kernels on {device} (once per session, so the first preview is "
            "quick)..."
        )
        self.panel.start_clock(self.runner)
        self.status.update_buttons()

    def _warmed_up(self, job: DockJob | None, ready: object) -> None:
        device = job.device if job is not None else ""
        outcome = ready if isinstance(ready, dict) else {}
        slow = sorted(name for name, ok in outcome.items() if not ok)
        if device.startswith("cuda") and slow:
            self.status.set_status(
                f"GPU kernels ready on {device}, except {', '.join(slow)}: those use the "
                "slower torch path (results are the same)."
            )
        else:
            self.status.show_idle(f"GPU kernels ready on {device}." if device else "")
