"""The job side of a dock's view: it makes the jobs the controller lets start and shows what
the one runner reports (progress, streamed outputs, results, errors), for the dock's own jobs
(run, preview, kernel warm-up) and hands a side job's reports to its owner's handlers.

:class:`DockJobs` is a mixin of :class:`~napari_gpuscope.widgets.MethodDock`; the state it acts
on is the dock's :class:`~napari_gpuscope.widgets._controller.DockController`
(``self.jobs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from napari_gpuscope.compute.devices import device_label, no_gpu_message
from napari_gpuscope.compute.preview import PlaneView, PreviewResult
from napari_gpuscope.compute.results import Geometry, result_name
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets._controller import (
    PREVIEW,
    RUN,
    WARMUP,
    DockJob,
    unprepared_kernels,
)
from napari_gpuscope.widgets._messages import plain_error_message, sentence
from napari_gpuscope.widgets._outputs import OutputLayers
from napari_gpuscope.widgets._viewer_status import refresh_viewer_status

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.jobs import Progress
    from napari_gpuscope.compute.results import MethodResult

__all__ = ["DockJobs"]

RUN_PLOT_TITLE, LAST_RUN_PLOT_TITLE = "Run: ", "Last run: "
"""The metrics plot's title while it shows the current run, and once a preview is described."""


class DockJobs:
    """Starting the dock's jobs and reacting to the runner (mixin of ``MethodDock``)."""

    # ---------------------------------------------------------------- starting
    def _start(self: Any, kind: str) -> bool:
        preview = kind == PREVIEW
        device = self.device
        if device is None:
            self._report_error(no_gpu_message(), preview=preview)
            return False
        if self.jobs.warming_up:  # start once the kernels are ready
            self.jobs.queue(kind)
            self.set_status("Preparing GPU kernels first; the job starts right after.")
            self._update_buttons()
            return True
        layer = self.input_layer
        try:
            if layer is not None and layer not in self.viewer.layers:
                raise ValueError(f"Layer '{layer.name}' is no longer in the viewer.")
            self.validate_input(layer, check_values=not preview)
            params = self.params()
            view = PlaneView.of(self.viewer, layer) if preview else None
            job = (
                self.make_preview_job(layer, params, device, view)
                if preview
                else self.make_job(layer, params, device)
            )
        except ValueError as exc:  # ParameterError included: the message names the field
            self._report_error(str(exc), preview=preview)
            return False
        except Exception as exc:  # a bug must not take napari down; tell the user instead
            self._report_error(
                f"Could not start {self.title}: {plain_error_message(exc)}", preview=preview
            )
            return False

        previous = self.jobs.job  # only a preview is ever superseded (a run never is)
        if previous is not None and previous.outputs is not None:
            self._preview_layers.update(previous.outputs.layers())  # for the next preview
        record = DockJob(kind, layer, params, device, name=layer.name, view=view)
        record.outputs = self._output_layers(record)
        self._last_preview_error = None  # a later failure is news again
        self.jobs.launch(
            record,
            job,
            description=f"{self.title}{' preview' if preview else ''}: {layer.name}",
            wanted=self._wants,
        )
        what = "Previewing" if preview else "Running"
        self.set_status(f"{what} {self.title} on '{layer.name}' ({device})...")
        if not preview:  # a preview's few iterations would only blank the last run's curve
            self.panel.plot.reset(RUN_PLOT_TITLE, self.metric_targets(params), self.step_label)
        self.panel.start_clock(self.runner)
        self._update_buttons()
        return True

    def _wants(self: Any, name: str) -> bool:
        return self.streamed_outputs is None or name in self.streamed_outputs

    def _output_layers(self: Any, job: DockJob) -> OutputLayers:
        layer, preview, params = job.layer, job.kind == PREVIEW, job.params
        main = self.streamed_outputs[0] if self.streamed_outputs else None
        tag = self.short_title or self.title

        def name_of(output: str) -> str:
            # Provisional for a run: its result names its layers when it finishes. The kind
            # comes first, as in the result's names: napari's layer list elides the middle of
            # a long name, so its start is what stays readable.
            kind = tag if output == main or main is None else output
            return result_name(f"{kind} {'preview' if preview else 'running'}", layer.name)

        if preview:
            reuse = self._preview_layers
        elif self.panel.replace_last.isChecked():
            reuse = dict(zip(self.streamed_outputs or (), self.last_results, strict=False))
        else:
            reuse = {}

        def geometry(kwargs: dict[str, Any], ndim: int) -> dict[str, Any]:
            return self.output_geometry(kwargs, ndim, preview=preview, params=params, layer=layer)

        return OutputLayers(
            self.viewer,
            layer,
            name_of,
            reuse=reuse,
            view=job.view,
            link=self.panel.link_display.isChecked(),
            owned=self._owned,
            geometry=geometry,
            display=self.output_display,
        )

    # ---------------------------------------------------------------- runner reports
    def _on_progress(self: Any, update: Progress) -> None:
        job = self.jobs.job
        if job is None or job.kind == WARMUP:
            self.panel.show_progress(update)
            return
        if job.handlers is not None:
            self.panel.show_progress(update)
            job.handlers.progressed(update)
            return
        if job.layer not in self.viewer.layers:  # input removed (or viewer closing): stop
            self.cancel()
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
                self.cancel()
                self._report_error(
                    f"{self.title} was cancelled: its output '{name}' could not be shown "
                    f"({plain_error_message(exc)}). Nothing was changed.",
                    preview=job.kind == PREVIEW,
                )
                return

    def _on_succeeded(self: Any, result: object, elapsed: float) -> None:
        job = self.jobs.take()
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
        result = cast("MethodResult | PreviewResult", result)
        self.panel.stop_clock(elapsed)
        preview = job.kind == PREVIEW
        try:
            layers = self._show_result(job, result, elapsed)
            self.on_result(result, preview=preview, layer=job.layer)
        except Exception as exc:  # never raise into the Qt loop
            job.outputs.rollback()
            self._report_error(
                f"{self.title} finished but its result could not be shown: "
                f"{plain_error_message(exc)}",
                preview=preview,
            )
            return
        if preview:
            planes = cast(PreviewResult, result).planes
            self._preview_layers = dict(zip(list(planes), layers, strict=False))
            # The status now describes the preview; the plot still shows the run's curve.
            if self.panel.plot.title == RUN_PLOT_TITLE:
                self.panel.plot.retitle(LAST_RUN_PLOT_TITLE)
        else:
            self.last_results = layers
            # napari selects the layer added last (phase's hidden absorption): select what shows.
            shown = [layer for layer in layers if layer.visible and layer in self.viewer.layers]
            if shown:
                self.viewer.layers.selection.active = shown[0]
        self.panel.show_done()
        self.set_status(f"{sentence(result.describe())} Took {elapsed:.2f} s.")

    def _show_result(
        self: Any, job: DockJob, result: MethodResult | PreviewResult, elapsed: float
    ) -> list[napari.layers.Layer]:
        record = build_provenance(
            self.method_id,
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
        return outputs.finish(tuples, list(self.streamed_outputs or outputs.order))

    def _on_failed(self: Any, exc: BaseException) -> None:
        job = self.jobs.take()
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
            self.set_status(
                f"Could not prepare the GPU kernels ({plain_error_message(exc)}); jobs use the "
                "slower torch path."
            )
            return
        where = f" on '{job.layer.name}'" if job is not None else ""
        self._report_error(
            f"{self.title} failed{where}: {plain_error_message(exc)}",
            preview=job is not None and job.kind == PREVIEW,
        )

    def _on_stopped(self: Any) -> None:
        queued = self.jobs.next_queued()
        if queued is not None:
            self._start(queued)
        self._update_buttons()
        refresh_viewer_status(self.viewer)  # napari redraws it only when the mouse moves

    # ---------------------------------------------------------------- kernel warm-up
    def kernel_packages(self: Any) -> tuple[str, ...] | None:
        """Where the kernels this dock's method launches are defined: its compute package and
        the platform's (a dock warms up only those; kernels another package lends it, e.g.
        TV's to phase's TV regulariser, compile at their first use). None: every kernel."""
        job = getattr(self.spec, "job", None)
        if not isinstance(job, str) or not job.startswith("napari_gpuscope.compute."):
            return None
        package = ".".join(job.split(":")[0].split(".")[:3])
        return (package, "napari_gpuscope.compute.kernels")

    def _warm_up(self: Any, device: str | None) -> None:
        """Compile and self-test the kernels not yet prepared on ``device``, as a visible
        step."""
        if device is None:
            return
        self.spec.job_function()  # imports the method, which registers its kernels
        packages = self.kernel_packages()
        if not unprepared_kernels(device, packages):
            return
        job = self.jobs.job
        if job is not None and job.kind != PREVIEW:
            return  # never disturb a run or side job (it pays the compile itself)
        if job is not None:  # a preview: prepare first, then preview again
            self.cancel()
            self.jobs.queue(PREVIEW)
        from napari_gpuscope.compute import kernels

        self.jobs.launch(
            DockJob(WARMUP, device=device),
            kernels.warm_up(device, packages),
            description=f"{self.title}: GPU kernels",
        )
        self.set_status(
            f"Preparing GPU kernels on {device} (once per session, so the first preview is "
            "quick)..."
        )
        self.panel.start_clock(self.runner)
        self._update_buttons()

    def _warmed_up(self: Any, job: DockJob | None, ready: Any) -> None:
        device = job.device if job is not None else ""
        slow = sorted(name for name, ok in dict(ready or {}).items() if not ok)
        if device.startswith("cuda") and slow:
            self.set_status(
                f"GPU kernels ready on {device}, except {', '.join(slow)}: those use the "
                "slower torch path (results are the same)."
            )
        else:
            self._show_idle_status(f"GPU kernels ready on {device}." if device else "")
