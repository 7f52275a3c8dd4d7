"""`MethodDock`: the shared base of every method dock (TV denoise, eSRRF, BaSiC, phase...).

A method dock says what is special about its method; the base does the rest. It reads the
method from the registry (:data:`napari_gpuscope.methods.METHODS`), generates the parameter rows
from the method's params model, and provides the device row (with kernel warm-up), the input
picker, Run / Stop & keep / Cancel, live preview of the displayed plane, progress in words
(percentage or "no estimate"), a live metrics plot, streaming of any number of named outputs
into layers, results that keep their input's display (linked), a new layer per run (or
"replace last result"), provenance, settings that persist between sessions, keyboard use and
the export buttons.

Adding a method
---------------
Subclass :class:`MethodDock`, set :attr:`~MethodDock.method_id` (a registry key), and override
what the defaults do not cover:

``custom_fields() -> dict[str, QWidget]``
    Controls for fields the form cannot generate (per-axis ``floats``, e.g. a
    :class:`~napari_gpuscope.widgets._controls.SpacingRow`). One that follows a layer has a
    ``stop_following()`` method, which :meth:`~MethodDock.release` calls.
``build_controls()``
    Extra rows and wiring, after the form exists (``self.form``).
``params() -> Params``
    The params model from the controls (default: the generated fields).
``make_job(layer, params, device)``
    The full run (default: the registry's job function on ``layer.data``).
``make_preview_job(layer, params, device, view)``
    A quick job on the displayed plane (:class:`~napari_gpuscope.compute.preview.PlaneView`)
    returning a :class:`PreviewResult`; without it, the dock offers no live preview.
``on_input_changed(layer)``, ``on_result(result, preview=, layer=)``, ``metric_targets(params)``
    Optional reactions and the dashed target lines of the metrics plot.
``output_geometry(geometry, ndim, preview=)``
    The geometry of streamed and preview layers, from the input's (default: unchanged; a
    super-resolution method returns a finer scale).

Class attributes say the rest: :attr:`~MethodDock.short_title` (the tag of the preview layer,
``"<input> [<short_title> preview]"``, and of a run's layers while they stream; the result then
names its layers), :attr:`~MethodDock.streamed_outputs`,
:attr:`~MethodDock.hidden_fields`,
:attr:`~MethodDock.field_styles`, :attr:`~MethodDock.input_dims` and
:attr:`~MethodDock.step_label`. A preview job's outputs and ``PreviewResult.planes`` are planes
over the view's two displayed axes; the base places them at the displayed position.

The result follows the result protocol (:mod:`napari_gpuscope.compute.results`): its
``layers(name, geometry, metadata)`` give the result layers, ``describe()`` the status line,
``summary()`` the provenance. Output ``k`` of :attr:`~MethodDock.streamed_outputs` streams into
the layer that result layer ``k`` then takes over.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from qtpy.QtCore import QEvent, QSize, Qt, QTimer
from qtpy.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget

from napari_gpuscope.compute.devices import device_label, no_gpu_message
from napari_gpuscope.compute.jobs import Job, Progress
from napari_gpuscope.compute.params import Params
from napari_gpuscope.compute.preview import PlaneView, PreviewResult
from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.methods import MethodSpec, method
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance, provenance_of
from napari_gpuscope.widgets._controls import FieldStyle, MetricsPlot, ParamForm
from napari_gpuscope.widgets._controls._layer_picker import LayerPicker
from napari_gpuscope.widgets._devices import DeviceRow
from napari_gpuscope.widgets._dock_parts import (
    DockPanel,
    plain_error_message,
    sentence,
)
from napari_gpuscope.widgets._events import Connections
from napari_gpuscope.widgets._layers import check_image_layer
from napari_gpuscope.widgets._outputs import OutputLayers, relink_display
from napari_gpuscope.widgets._runner import JobRunner
from napari_gpuscope.widgets._settings import DockSettings

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.compute.results import MethodResult

__all__ = ["MethodDock", "PreviewResult", "plain_error_message"]

RUN, PREVIEW, WARMUP = "run", "preview", "warmup"


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


@dataclass
class _Job:
    """What the dock remembers about the running job."""

    kind: str
    layer: napari.layers.Image | None = None  # None only for a warm-up
    params: Any = None
    device: str = ""
    outputs: OutputLayers | None = None
    view: PlaneView | None = None


class MethodDock(QWidget):
    """Base class of the method docks; see the module docstring for what a subclass adds.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari when the dock is opened from the plugin menu.
    """

    method_id: ClassVar[str] = ""
    """Registry key of the method (:data:`napari_gpuscope.methods.METHODS`)."""
    short_title: ClassVar[str] = ""
    """Tag of preview and streaming layer names, e.g. ``"TV"`` (default: the method's title)."""
    streamed_outputs: ClassVar[tuple[str, ...] | None] = None
    """Outputs streamed into layers, in the order of the result's layers (None: all)."""
    hidden_fields: ClassVar[tuple[str, ...]] = ()
    """Parameters the dock does not show (they keep their defaults)."""
    field_styles: ClassVar[Mapping[str, FieldStyle]] = {}
    """How some generated fields are shown."""
    input_dims: ClassVar[tuple[int, int]] = (2, 4)
    """Accepted input dimensionality."""
    step_label: ClassVar[str] = "iteration"
    """What ``Progress.step`` counts (x axis of the metrics plot)."""
    output_display: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """Layer keywords of streamed outputs by name; one with a colormap is not linked to the
    input's display (e.g. a flatfield, a ratio near 1, next to tiles in ADU)."""
    preview_debounce_ms: ClassVar[int] = 200
    """Quiet time after the last parameter change before a live preview starts."""
    dock_width: ClassVar[int] = 340
    """Width the dock opens with (px): enough for every control of the method's form, which is
    clipped, not wrapped, below its minimum (check the whole-window screenshots)."""

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        super().__init__()
        self.viewer = viewer
        self.spec = self.method_spec()
        self.params_class: type[Params] = self.spec.params_class()
        self.title = self.spec.title
        self.settings = DockSettings(self.method_id)
        self.runner = JobRunner(self)
        self.runner.progressed.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_succeeded)
        self.runner.failed.connect(self._on_failed)
        self.runner.stopped.connect(self._on_stopped)
        self._job: _Job | None = None
        self._queued: str | None = None
        self._last_preview_error: str | None = None
        self._preview_layers: dict[str, napari.layers.Layer] = {}
        self.last_results: list[napari.layers.Layer] = []
        # every layer this dock made -> its input layer (weakly: the user may delete either)
        self._owned: weakref.WeakKeyDictionary[
            napari.layers.Layer, weakref.ref[napari.layers.Layer]
        ] = weakref.WeakKeyDictionary()
        self._links = Connections()
        self._preview_timer = self._timer(self.preview_debounce_ms, self._start_preview)
        self._saving = False  # settings are written once loaded, not while resetting
        self._docked = False  # napari put the dock in a panel
        self._hidden = False  # its panel is hidden (napari's hide button, another tab)
        self._released = False

        self.device_row = DeviceRow()
        self.input = LayerPicker(
            viewer,
            tooltip=(
                "Image layer to process. It follows the layer you select or add, and is never "
                "modified: results go to new layers."
            ),
            follow=self._follows,
            parent=self,
        )
        self.form = ParamForm(
            self.params_class,
            [n for n in self.params_class.names() if n not in self.hidden_fields],
            styles=self.field_styles,
            custom=self.custom_fields(),
        )
        self.form.add_row("Input", self.input.combo.native, after="")
        self.build_controls()
        self.panel = DockPanel(self, supports_stop=self.spec.supports_stop)
        panel = self.panel
        self.plot: MetricsPlot = panel.plot
        self.live_preview, self.run_button = panel.live_preview, panel.run_button
        self.stop_button, self.cancel_button = panel.stop_button, panel.cancel_button
        self.replace_last, self.link_display = panel.replace_last, panel.link_display
        self.progress_bar, self.progress_label = panel.progress_bar, panel.progress
        self.status_label = panel.status
        self.export_figure_button = panel.figure_button
        self.save_tiff_button = panel.save_tiff_button
        self._build_layout()
        self.form.changed.connect(self._on_params_changed)
        self.input.changed.connect(self._on_input_changed)
        for event in ("current_step", "order", "ndisplay"):
            self._links.connect(getattr(viewer.dims.events, event), self._on_dims_changed)
        self.device_row.availability_changed.connect(self._update_buttons)
        self.device_row.device_changed.connect(self._warm_up)
        for box in (self.replace_last, self.link_display):
            box.toggled.connect(self._save_settings)
        self.form.advanced.toggled.connect(self._save_settings)
        self._load_settings()
        self._on_input_changed()
        self.panel.set_tab_order(self.content)
        self._warm_up(self.device)

    def _timer(self, interval: int, slot: Any) -> QTimer:
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(interval)
        timer.timeout.connect(slot)
        return timer

    def _build_layout(self) -> None:
        self.content = QWidget()
        layout = QVBoxLayout(self.content)
        layout.addWidget(self.device_row)
        layout.addWidget(self.form)
        self.panel.add_to(layout)
        layout.addStretch(1)
        # On a short screen the dock scrolls instead of stretching napari's window.
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    # ---------------------------------------------------------------- subclass hooks
    @classmethod
    def method_spec(cls) -> MethodSpec:
        """The method's registry entry (title, params model, job function, stop support)."""
        return method(cls.method_id)

    def custom_fields(self) -> dict[str, QWidget]:
        """Controls standing for fields the form cannot generate (default: none)."""
        return {}

    def build_controls(self) -> None:
        """Add the method's own rows and wiring to ``self.form`` (default: nothing)."""

    def params(self) -> Params:
        """The parameters the controls describe (raises ParameterError for invalid ones)."""
        return self.params_class(**self.form.values())

    def validate_input(
        self, layer: napari.layers.Layer | None, *, check_values: bool = True
    ) -> None:
        """Raise ValueError naming the layer and what is valid (default: an image layer)."""
        low, high = self.input_dims
        check_image_layer(layer, min_ndim=low, max_ndim=high, check_values=check_values)

    def make_job(
        self, layer: napari.layers.Image, params: Params, device: str
    ) -> Job[MethodResult]:
        """The full run (default: the registry's job function on the layer's data)."""
        return self.spec.job_function()(layer.data, params=params, device=device)

    def make_preview_job(
        self, layer: napari.layers.Image, params: Params, device: str, view: PlaneView
    ) -> Job[PreviewResult]:
        """A quick job on the displayed plane; not overriding it means no live preview."""
        raise NotImplementedError

    def on_input_changed(self, layer: napari.layers.Image | None) -> None:
        """React to a new input layer (default: nothing)."""

    def on_result(
        self, result: MethodResult | PreviewResult, *, preview: bool, layer: napari.layers.Image
    ) -> None:
        """React to a finished job's result on input ``layer`` (default: nothing); a preview's
        result is its :class:`PreviewResult`."""

    def metric_targets(self, params: Params) -> dict[str, float]:
        """Values the plotted metrics aim for (dashed lines), e.g. a tolerance."""
        return {}

    def output_geometry(
        self, geometry: dict[str, Any], ndim: int, *, preview: bool
    ) -> dict[str, Any]:
        """Layer geometry kwargs of a streamed (or preview) output with ``ndim`` axes, given
        those it takes from the input (default: unchanged)."""
        return geometry

    @property
    def supports_preview(self) -> bool:
        """Whether the subclass implements :meth:`make_preview_job`."""
        return type(self).make_preview_job is not MethodDock.make_preview_job

    # ---------------------------------------------------------------- public actions
    @property
    def device(self) -> str | None:
        """The selected device string, or None."""
        return self.device_row.device

    @property
    def input_layer(self) -> napari.layers.Image | None:
        """The selected input layer (None when there is none)."""
        return self.input.layer

    @property
    def last_result_layer(self) -> napari.layers.Layer | None:
        """The main layer of the latest full run that is still in the viewer."""
        alive = [layer for layer in self.last_results if layer in self.viewer.layers]
        return alive[0] if alive else None

    def reset_choices(self, *_: Any) -> None:
        """Refresh the input combo (napari calls this when the layer list changes)."""
        self.input.reset_choices()

    def run(self) -> bool:
        """Start a full run on the whole input layer; return whether it started (or queued).

        Refused while a full run is going on: Cancel (Escape) or Stop & keep it first.
        """
        job = self._job
        if job is not None and job.kind == RUN:
            self._set_status(
                f"{self.title} is already running on '{job.layer.name}'; it was not started "
                "again (Escape cancels it)."
            )
            return False
        self._preview_timer.stop()
        return self._start(RUN)

    def preview_now(self) -> bool:
        """Start a live preview now (no debounce); return whether it started."""
        self._preview_timer.stop()
        return self.panel.live_preview.isChecked() and self._start_preview()

    def cancel(self) -> None:
        """Cancel the running job; its partial outputs are rolled back."""
        self._preview_timer.stop()
        self._queued = None
        job = self._job
        if self.runner.cancel():
            self._job = None
            if job is not None and job.outputs is not None:
                job.outputs.rollback()
            self._set_status("Cancelled; nothing was changed.")
            self.panel.stop_clock()
        self._update_buttons()

    def stop_and_keep(self) -> None:
        """Ask a full run to finish now and keep its result so far."""
        if self._job is not None and self._job.kind == RUN and self.runner.request_stop():
            self._set_status("Stopping after the current step; the result so far will be kept.")
            self.panel.stop_button.setEnabled(False)

    def request_preview(self, *_: Any) -> None:
        """(Re)start the debounce timer of the live preview, if live preview is on (and the
        dock is on screen)."""
        live = self.panel.live_preview
        if live.isChecked() and live.isEnabled() and not (self._hidden or self._released):
            self._preview_timer.start()

    def release(self) -> None:
        """Cancel any job, stop the timers and disconnect from the viewer: the dock is done.

        Runs when napari removes the dock (its close button, ``remove_dock_widget``) or the
        widget itself is closed. napari tells a removed dock nothing; the dock notices that it
        lost its panel (see :meth:`event`). Settings need no saving here: every change was
        written when it was made.
        """
        if self._released:
            return
        self._released = True
        self._saving = False
        self._stop_preview()
        self.cancel()
        self._links.disconnect_all()
        for control in (self.input, *self.form.custom.values()):
            stop_following = getattr(control, "stop_following", None)
            if stop_following is not None:
                stop_following()

    def reset_to_defaults(self) -> None:
        """Set every shown parameter to its default and forget the saved settings."""
        defaults = {info.name: info.default for info in self.params_class.param_info()}
        self._saving = False  # the changes below must not write the settings again
        try:
            self.form.set_values(defaults)
            self.on_input_changed(self.input_layer)  # layer-derived fields from the layer again
        finally:
            self._saving = True
        self.settings.clear()
        self._set_status("Parameters reset to their defaults.")

    # ---------------------------------------------------------------- job lifecycle
    def _start(self, kind: str) -> bool:
        preview = kind == PREVIEW
        device = self.device
        if device is None:
            self._report_error(no_gpu_message(), preview=preview)
            return False
        if self.runner.tag == WARMUP:  # start once the kernels are ready
            self._queued = RUN if RUN in (kind, self._queued) else kind
            self._set_status("Preparing GPU kernels first; the job starts right after.")
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

        previous = self._job  # only a preview is ever superseded (a run never is)
        if previous is not None and previous.outputs is not None:
            self._preview_layers.update(previous.outputs.layers())  # for the next preview
        self._job = _Job(kind, layer, params, device, view=view)
        self._job.outputs = self._output_layers(self._job)
        self._last_preview_error = None  # a later failure is news again
        self.runner.start(
            job,
            description=f"{self.title}{' preview' if preview else ''}: {layer.name}",
            tag=kind,
            wanted=self._wants,
        )
        what = "Previewing" if preview else "Running"
        self._set_status(f"{what} {self.title} on '{layer.name}' ({device})...")
        if not preview:  # a preview's few iterations would only blank the last run's curve
            self.plot.reset("Run: ", self.metric_targets(params), self.step_label)
        self.panel.start_clock(self.runner)
        self._update_buttons()
        return True

    def _wants(self, name: str) -> bool:
        return self.streamed_outputs is None or name in self.streamed_outputs

    def _output_layers(self, job: _Job) -> OutputLayers:
        layer, preview = job.layer, job.kind == PREVIEW
        main = self.streamed_outputs[0] if self.streamed_outputs else None
        tag = self.short_title or self.title

        def name_of(output: str) -> str:
            # Provisional for a run: its result names its layers when it finishes.
            extra = "" if output == main or main is None else f" {output}"
            return f"{layer.name} [{tag}{extra}{' preview' if preview else ', running'}]"

        if preview:
            reuse = self._preview_layers
        elif self.panel.replace_last.isChecked():
            reuse = dict(zip(self.streamed_outputs or (), self.last_results, strict=False))
        else:
            reuse = {}
        return OutputLayers(
            self.viewer,
            layer,
            name_of,
            reuse=reuse,
            view=job.view,
            link=self.panel.link_display.isChecked(),
            owned=self._owned,
            geometry=lambda geometry, ndim: self.output_geometry(geometry, ndim, preview=preview),
            display=self.output_display,
        )

    def _start_preview(self) -> bool:
        if not self.panel.live_preview.isChecked():
            return False
        if self._job is not None and self._job.kind == RUN:
            return False  # never disturb a full run; the next change after it previews again
        return self._start(PREVIEW)

    def _on_progress(self, update: Progress) -> None:
        job = self._job
        if job is None or job.kind == WARMUP:
            self.panel.show_progress(update)
            return
        if job.layer not in self.viewer.layers:  # input removed (or viewer closing): stop
            self.cancel()
            return
        self.panel.show_progress(update)
        if update.metrics and job.kind == RUN:
            self.plot.add(update.step, update.metrics)
            self.plot.setVisible(True)
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

    def _on_succeeded(self, result: object, elapsed: float) -> None:
        job, self._job = self._job, None
        if job is None or job.kind == WARMUP:
            self.panel.stop_clock()  # a preparation step: no time or full bar to report
            self._warmed_up(job, result)
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
        else:
            self.last_results = layers
        self.panel.show_done()
        self._set_status(f"{sentence(result.describe())} Took {elapsed:.2f} s.")

    def _show_result(
        self, job: _Job, result: MethodResult | PreviewResult, elapsed: float
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

    def _on_failed(self, exc: BaseException) -> None:
        job, self._job = self._job, None
        self.panel.stop_clock()
        if job is not None and job.outputs is not None:
            job.outputs.rollback()
        if job is not None and job.kind == WARMUP:
            self._set_status(
                f"Could not prepare the GPU kernels ({plain_error_message(exc)}); jobs use the "
                "slower torch path."
            )
            return
        where = f" on '{job.layer.name}'" if job is not None else ""
        self._report_error(
            f"{self.title} failed{where}: {plain_error_message(exc)}",
            preview=job is not None and job.kind == PREVIEW,
        )

    def _on_stopped(self) -> None:
        queued, self._queued = self._queued, None
        if queued is not None and not self.runner.running:
            self._start(queued)
        self._update_buttons()

    # ---------------------------------------------------------------- kernel warm-up
    def kernel_packages(self) -> tuple[str, ...] | None:
        """Where the kernels this dock's method launches are defined: its compute package and
        the platform's (a dock warms up only those; kernels another package lends it, e.g.
        TV's to phase's TV regulariser, compile at their first use). None: every kernel."""
        job = getattr(self.spec, "job", None)
        if not isinstance(job, str) or not job.startswith("napari_gpuscope.compute."):
            return None
        package = ".".join(job.split(":")[0].split(".")[:3])
        return (package, "napari_gpuscope.compute.kernels")

    def _warm_up(self, device: str | None) -> None:
        """Compile and self-test the kernels not yet prepared on ``device``, as a visible
        step."""
        if device is None:
            return
        self.spec.job_function()  # imports the method, which registers its kernels
        packages = self.kernel_packages()
        if not unprepared_kernels(device, packages):
            return
        job = self._job
        if job is not None and job.kind in (RUN, WARMUP):
            return  # never disturb a full run (it pays the compile itself)
        if job is not None:  # a preview: prepare first, then preview again
            self.cancel()
            self._queued = PREVIEW
        from napari_gpuscope.compute import kernels

        self._job = _Job(WARMUP, device=device)
        self.runner.start(
            kernels.warm_up(device, packages),
            description=f"{self.title}: GPU kernels",
            tag=WARMUP,
        )
        self._set_status(
            f"Preparing GPU kernels on {device} (once per session, so the first preview is "
            "quick)..."
        )
        self.panel.start_clock(self.runner)
        self._update_buttons()

    def _warmed_up(self, job: _Job | None, ready: Any) -> None:
        device = job.device if job is not None else ""
        slow = sorted(name for name, ok in dict(ready or {}).items() if not ok)
        if device.startswith("cuda") and slow:
            self._set_status(
                f"GPU kernels ready on {device}, except {', '.join(slow)}: those use the "
                "slower torch path (results are the same)."
            )
        else:
            self._show_idle_status(f"GPU kernels ready on {device}." if device else "")

    # ---------------------------------------------------------------- reactions
    def _follows(self, layer: napari.layers.Layer) -> bool:
        """Whether selecting ``layer`` makes it the input: not our own results or preview."""
        if layer in self._owned:
            return False
        record = provenance_of(layer)
        return not (isinstance(record, dict) and record.get("method") == self.method_id)

    def _on_input_changed(self, *_: Any) -> None:
        self._stop_preview()  # a preview of the previous input is of no use any more
        self.on_input_changed(self.input_layer)
        self._update_buttons()
        self.request_preview()

    def _on_params_changed(self, *_: Any) -> None:
        self._save_settings()
        self.request_preview()

    def _on_dims_changed(self, *_: Any) -> None:
        layer = self.input_layer
        if layer is not None and layer in self.viewer.layers and layer.ndim > 2:
            self.request_preview()

    def _on_live_preview_toggled(self, checked: bool) -> None:
        if checked:
            self.request_preview()
            return
        self._stop_preview()
        self._update_buttons()

    def _stop_preview(self) -> None:
        """Cancel a pending or running preview (rolled back) and remove the preview layers."""
        self._preview_timer.stop()
        if self._queued == PREVIEW:
            self._queued = None
        job = self._job
        if job is not None and job.kind == PREVIEW:
            self.runner.cancel()
            self._job = None
            job.outputs.rollback()
            self.panel.stop_clock()
        self._remove_preview_layers()

    def _remove_preview_layers(self) -> None:
        layers, self._preview_layers = self._preview_layers, {}
        for layer in layers.values():
            if layer in self.viewer.layers:
                self.viewer.layers.remove(layer)

    def _on_link_toggled(self, checked: bool) -> None:
        """Link (or unlink) the display of every result and preview of this dock."""
        relink_display(self.viewer, self._owned, link=checked)

    # ---------------------------------------------------------------- settings
    def _load_settings(self) -> None:
        """Show the saved parameters (the fields the form has; the others come from the
        layer or keep their defaults) and options; then save every later change."""
        saved, options = self.settings.load(self.params_class)
        if saved is not None:
            self.form.set_values({name: getattr(saved, name) for name in self.form.widgets})
        self.panel.apply_options(options)
        if options.get("advanced_open") is True:
            self.form.advanced.expand(animate=False)
        self._saving = True

    def _save_settings(self, *_: Any) -> None:
        """Write the settings now (a few hundred bytes), so closing napari loses nothing."""
        if not self._saving:
            return
        try:
            params = self.params()
        except ValueError:
            return  # keep the last valid settings
        options = {**self.panel.options(), "advanced_open": self.form.advanced.isExpanded()}
        self.settings.save(params, options)

    # ---------------------------------------------------------------- state and messages
    def input_problem(self) -> str | None:
        """Why Run cannot start now, in words (None when it can)."""
        if self.device is None:
            return "Run is disabled: no usable CUDA GPU (see the message above)."
        layer = self.input_layer
        if layer is None:
            return (
                "Run is disabled: no input image. Open an image (File > Open) or select an "
                "image layer."
            )
        try:
            self.validate_input(layer, check_values=False)
        except ValueError as exc:
            return f"Run is disabled: {exc}"
        return None

    def _update_buttons(self, *_: Any) -> None:
        problem = self.input_problem()
        job = self._job
        running_full = job is not None and job.kind == RUN
        self.panel.update_buttons(
            can_run=problem is None and not running_full,
            running=self.runner.running,
            full_run=running_full,
            preview_supported=self.supports_preview,
            preview_possible=self.device is not None,
            reason=problem,
        )
        if self.runner.running:
            return
        if problem is not None:
            self._set_status(problem)
        elif self.panel.status.text().startswith("Run is disabled"):
            self._set_status(f"Ready: Run processes '{self.input_layer.name}'.")

    def _show_idle_status(self, text: str) -> None:
        problem = self.input_problem()
        self._set_status(problem or text or "Ready.")

    def _set_status(self, text: str) -> None:
        self.panel.status.setText(text)

    def _report_error(self, message: str, *, preview: bool = False) -> None:
        """Show an error in the status line and as a napari notification (never raise)."""
        self._set_status(message)
        if preview:
            # A live preview re-fires on every slider move: notify once per distinct problem.
            if message == self._last_preview_error:
                return
            self._last_preview_error = message
        from napari.utils import notifications

        notifications.show_error(message)

    # ---------------------------------------------------------------- Qt
    def keyPressEvent(self, event: Any) -> None:
        """Enter refreshes the live preview when it is on and runs otherwise (never while a
        run is going on); Escape cancels."""
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            live = self.panel.live_preview
            if live.isChecked() and live.isEnabled():
                self.preview_now()
            else:
                self.run()
            event.accept()
        elif key == Qt.Key.Key_Escape:
            self.cancel()
            event.accept()
        else:
            super().keyPressEvent(event)

    def sizeHint(self) -> QSize:
        """A sensible dock width; long texts wrap instead of widening the dock."""
        return QSize(self.dock_width, self.content.sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        """The dock may be narrowed down to this, and be short (it scrolls)."""
        return QSize(260, 200)

    def event(self, event: QEvent) -> bool:
        """Notice napari removing the dock: it takes the widget out of its panel and tells it
        nothing else (neither ``remove_dock_widget`` nor the panel's close reaches
        :meth:`closeEvent`)."""
        if event.type() == QEvent.Type.ParentChange:
            if self.parent() is not None:
                self._docked = True
            elif self._docked:
                self.release()
        return super().event(event)

    def hideEvent(self, event: Any) -> None:
        """A hidden panel (napari's hide button, another tab in front) shows no live preview;
        a full run goes on (its result is wanted; the activity dock shows its progress)."""
        if not event.spontaneous():  # not a minimised window
            self._hidden = True
            self._stop_preview()
            self._update_buttons()
        super().hideEvent(event)

    def showEvent(self, event: Any) -> None:
        """Shown again: the live preview (if on) catches up with the displayed plane."""
        if self._hidden and not event.spontaneous():
            self._hidden = False
            self.request_preview()
        super().showEvent(event)

    def closeEvent(self, event: Any) -> None:
        """The widget itself was closed (outside a napari panel): release it."""
        self.release()
        super().closeEvent(event)

    # The export commands report their own failures as notifications (they are File-menu
    # commands too), so the buttons just call them.
    def _export_figure(self) -> None:
        from napari_gpuscope.export.commands import export_screenshot_dialog

        export_screenshot_dialog(self.viewer)

    def _save_tiff(self) -> None:
        from napari_gpuscope.export.commands import save_tiff_dialog

        save_tiff_dialog(self.viewer, layer=self.last_result_layer)
