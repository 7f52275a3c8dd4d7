"""`MethodDock`: the shared base of every method dock (TV denoise, eSRRF, BaSiC, phase...).

One idea, one class: what every dock is (its hooks with their defaults, its public surface and
its Qt events), with a third of its lines the documentation of those; what a dock does lives in
the parts it assembles (see "How it is built"), so the module stays over 400 lines by design.

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
``output_geometry(geometry, ndim, preview=, params=, layer=)``
    The geometry of streamed and preview layers, from the input's and the job's parameters
    and input (default: unchanged; a super-resolution method returns a finer scale).

Class attributes say the rest: :attr:`~MethodDock.short_title` (the tag of the preview layer,
``"<short_title> preview · <input>"``, and of a run's layers while they stream; the result then
names its layers), :attr:`~MethodDock.streamed_outputs`,
:attr:`~MethodDock.hidden_fields`,
:attr:`~MethodDock.field_styles`, :attr:`~MethodDock.input_layouts` and
:attr:`~MethodDock.step_label`. A preview job's outputs and ``PreviewResult.planes`` are planes
over the view's two displayed axes; the base places them at the displayed position.

Public surface
--------------
Tests and scripts use these instead of the dock's internals: :meth:`~MethodDock.run` (False,
with the reason in the status line, when refused), :meth:`~MethodDock.is_running`,
:meth:`~MethodDock.stop`, :meth:`~MethodDock.cancel`, :meth:`~MethodDock.params`,
:meth:`~MethodDock.set_param` and the settable :attr:`~MethodDock.input_layer`.

How it is built
---------------
By composition, around a Qt-free model. :class:`~napari_gpuscope.dock.model.DockModel`
(``self.model``) owns the method (from the registry), the input, the evented parameters, the
one runner through which every job of the dock goes (run, preview, warm-up and the method's other
jobs, :meth:`~MethodDock.start_job`), the job state and the settings, and builds the method's
job as the CLI and batch do (:meth:`~napari_gpuscope.dock.model.DockModel.default_job`). The
view is assembled from parts, each built as ``Part(..., model)`` and holding the dock typed as
:class:`~napari_gpuscope.dock.context.MethodView` (its hooks), never its internals:
the lower panel (:class:`~napari_gpuscope.widgets._dock_parts.DockPanel`: run controls,
progress, plot), the status (:class:`~napari_gpuscope.widgets._status_view.StatusView`), the
jobs' reactions (:class:`~napari_gpuscope.widgets._job_view.JobView`), the live preview's
schedule (:class:`~napari_gpuscope.widgets._preview_schedule.PreviewScheduler`), the form
binding (:class:`~napari_gpuscope.widgets._form_binding.FormBinding`), the input
(:class:`~napari_gpuscope.widgets._input_view.InputView`), the job controls behind the public
surface (:class:`~napari_gpuscope.widgets._job_control.JobControl`), the export row
(:class:`~napari_gpuscope.widgets._dock_exports.ExportRow`), the recipe row and each method's
sections. The parts of a method (recipe row, eSRRF sweep, flat-field apply) see the
dock through :class:`~napari_gpuscope.dock.context.DockContext`.

The result follows the result protocol (:mod:`napari_gpuscope.compute.results`): its
``layers(name, geometry, metadata)`` give the result layers, ``describe()`` the status line,
``summary()`` the provenance. Output ``k`` of :attr:`~MethodDock.streamed_outputs` streams into
the layer that result layer ``k`` then takes over.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

from qtpy.QtCore import QEvent, QSize, Qt
from qtpy.QtGui import QCloseEvent, QHideEvent, QKeyEvent, QShowEvent
from qtpy.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget

from napari_gpuscope.compute.params import Params
from napari_gpuscope.compute.preview import PreviewResult
from napari_gpuscope.dock.connections import Connections
from napari_gpuscope.dock.jobs import PREVIEW, JobHandlers
from napari_gpuscope.dock.layers import check_image_layer
from napari_gpuscope.dock.model import DockModel
from napari_gpuscope.methods import MethodSpec, method
from napari_gpuscope.widgets._controls import FieldStyle, ParamForm
from napari_gpuscope.widgets._controls._changes import ChangesRow
from napari_gpuscope.widgets._devices import DeviceRow
from napari_gpuscope.widgets._dock_exports import ExportRow
from napari_gpuscope.widgets._dock_parts import DockPanel
from napari_gpuscope.widgets._form_binding import FormBinding
from napari_gpuscope.widgets._input_view import InputView
from napari_gpuscope.widgets._job_control import JobControl
from napari_gpuscope.widgets._job_view import JobView
from napari_gpuscope.widgets._live_acquisition import LiveAcquisition
from napari_gpuscope.widgets._live_preview import LivePreview
from napari_gpuscope.widgets._preview_schedule import PreviewScheduler
from napari_gpuscope.widgets._recipes import RecipeRow
from napari_gpuscope.widgets._runner import JobRunner
from napari_gpuscope.widgets._status_view import StatusView

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer
    from numpy.typing import ArrayLike

    from napari_gpuscope.compute.jobs import Job
    from napari_gpuscope.compute.preview import PlaneView
    from napari_gpuscope.compute.results import MethodResult
    from napari_gpuscope.dock.context import CsvArtifact

__all__ = ["MethodDock", "PreviewResult"]


class MethodDock(QWidget):
    """Base class of the method docks; see the module docstring for what a subclass adds.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari when the dock is opened from the plugin menu.
    """

    # ---------------------------------------------------------------- what a method says
    method_id: ClassVar[str] = ""
    """Registry key of the method (:data:`napari_gpuscope.methods.METHODS`)."""
    short_title: ClassVar[str] = ""
    """Tag of preview and streaming layer names, e.g. ``"TV"`` (default: the method's title)."""
    streamed_outputs: ClassVar[tuple[str, ...] | None] = None
    """Outputs streamed into layers, in the order of the result's layers (None: all)."""
    hidden_fields: ClassVar[tuple[str, ...]] = ()
    """Parameters the dock does not show (they keep their defaults)."""
    dock_defaults: ClassVar[Mapping[str, object]] = {}
    """Where the dock starts (and Reset returns) other than the model's defaults, which the API
    and recipes keep: e.g. phase estimates a global tilt, since the manual 0 is rarely right."""
    layer_fields: ClassVar[tuple[str, ...]] = ()
    """Parameters filled in from the input layer (pixel size, optics): not "changed from the
    defaults" when they differ."""
    field_styles: ClassVar[Mapping[str, FieldStyle]] = {}
    """How some generated fields are shown."""
    input_layouts: ClassVar[tuple[str, ...]] = ("YX", "ZYX", "TYX", "TZYX")
    """The axis layouts the method accepts, one letter an axis (``("TYX", "CTYX")``): an
    input with another number of axes is refused with these, in words."""
    step_label: ClassVar[str] = "iteration"
    """What ``Progress.step`` counts (x axis of the metrics plot)."""
    output_display: ClassVar[Mapping[str, Mapping[str, object]]] = {}
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
        self.runner = JobRunner(self)
        self.model = DockModel(self.method_spec(), self.runner, dock_defaults=self.dock_defaults)
        self.spec = self.model.spec
        self.params_class: type[Params] = self.model.params_class
        self.title = self.model.title
        self._links = Connections()
        self._docked = False  # napari put the dock in a panel

        self.device_row = DeviceRow()
        self.input_view = InputView(self, self.model, viewer=viewer, method_id=self.method_id)
        self.input = self.input_view.picker
        self.form = ParamForm(
            self.params_class,
            [n for n in self.params_class.names() if n not in self.hidden_fields],
            styles=self.field_styles,
            custom=self.custom_fields(),
        )
        self.form.add_row("Input", self.input.combo.native, after="")
        self.form.set_values(self.dock_defaults)
        self.build_controls()
        self.panel = DockPanel(
            self.title, viewer, supports_stop=self.spec.supports_stop, parent=self
        )
        self.form.add_row("", self.panel.reset_button, after="advanced")
        # Values restored from the last session, or changed since, are said and resettable.
        self.changes = ChangesRow(self.reset_to_defaults, words=self.form.value_text)
        self.form.add_row("", self.changes, after=None)
        self.binding = FormBinding(
            self.form, self.model, self.changes, layer_fields=self.layer_fields
        )
        self.status_view = StatusView(self, self.model, panel=self.panel, dock=self)
        self.job_view = JobView(
            self,
            self.model,
            runner=self.runner,
            panel=self.panel,
            status=self.status_view,
            dock=self,
        )
        self.preview = PreviewScheduler(
            self,
            self.model,
            live=self.panel.live_preview,
            start=lambda: self.job_view.start(PREVIEW),
            debounce_ms=self.preview_debounce_ms,
        )
        self.jobs = JobControl(
            self,
            self.model,
            runner=self.runner,
            panel=self.panel,
            status=self.status_view,
            jobs=self.job_view,
            preview=self.preview,
            dock=self,
        )
        self.exports = ExportRow(
            self,
            self.model,
            viewer=viewer,
            panel=self.panel,
            last_result=lambda: self.last_result_layer,
        )
        self.live = LivePreview(
            self,
            self.model,
            viewer=viewer,
            panel=self.panel,
            schedule=self.preview,
            jobs=self.jobs,
            status=self.status_view,
            input_layer=lambda: self.input_layer,
        )
        # Batch recipes: the parameters tuned here, applied to a whole experiment.
        self.recipe_row = RecipeRow(self)
        self.form.add_row(
            "Recipe", self.recipe_row, "Parameters for 'napari-gpuscope run'", after=None
        )
        self._build_layout()
        self._connect()
        self.binding.load_settings(self.panel)
        self._on_input_changed()
        self.panel.set_tab_order(self.content)
        self.job_view.warm_up(self.device)

    def _connect(self) -> None:
        """The dock's reactions to its panel, form, input and device row (Qt signals), and to
        the viewer's dims (napari events, undone on release)."""
        panel = self.panel
        panel.run_button.clicked.connect(self.run)
        panel.stop_button.clicked.connect(self.stop)
        panel.cancel_button.clicked.connect(self.cancel)
        panel.reset_button.clicked.connect(self.reset_to_defaults)
        self.form.changed.connect(self._on_params_changed)
        self.input_view.changed.connect(self._on_input_changed)
        for event in ("current_step", "order", "ndisplay"):
            self._links.connect(getattr(self.viewer.dims.events, event), self._on_dims_changed)
        self.device_row.availability_changed.connect(self.status_view.update_buttons)
        self.device_row.device_changed.connect(self.job_view.warm_up)
        for box in (panel.replace_last, panel.link_display):
            box.toggled.connect(self._save_settings)
        self.form.advanced.toggled.connect(self._save_settings)

    def _build_layout(self) -> None:
        self.content = QWidget()
        layout = QVBoxLayout(self.content)
        layout.addWidget(self.device_row)
        layout.addWidget(self.form)
        self.panel.add_to(layout)
        self.live_acquisition = LiveAcquisition(self)  # follow a microscope while it acquires
        layout.addWidget(self.live_acquisition)
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

    # ---------------------------------------------------------------- hooks (a method overrides)
    @classmethod
    def defaults(cls) -> dict[str, object]:
        """The dock's default value of every parameter (:attr:`dock_defaults` over the model's)."""
        model = {info.name: info.default for info in cls.method_spec().params_class().param_info()}
        return {**model, **cls.dock_defaults}

    @classmethod
    def method_spec(cls) -> MethodSpec:
        """The method's registry entry (title, params model, job function, stop support)."""
        return method(cls.method_id)

    def custom_fields(self) -> dict[str, QWidget]:
        """Controls standing for fields the form cannot generate (default: none)."""
        return {}

    def build_controls(self) -> None:
        """Add the method's own rows and wiring to ``self.form`` (default: nothing)."""

    def build_params(self) -> Params:
        """The parameters the controls describe (raises ParameterError for invalid ones); the
        dock's :meth:`params` hands them to its model."""
        return self.params_class(**self.form.values())

    def validate_input(
        self, layer: napari.layers.Layer | None, *, check_values: bool = True
    ) -> None:
        """Raise ValueError naming the layer and what is valid (default: an image layer
        shaped as one of :attr:`input_layouts`)."""
        check_image_layer(
            layer, layouts=self.input_layouts, method=self.title, check_values=check_values
        )

    @property
    def input_dims(self) -> tuple[int, int]:
        """The fewest and most axes of an accepted input (from :attr:`input_layouts`)."""
        lengths = [len(layout) for layout in self.input_layouts]
        return min(lengths), max(lengths)

    def make_job(
        self, layer: napari.layers.Image, params: Params, device: str
    ) -> Job[MethodResult]:
        """The full run (default: the registry's job on the layer's data, built by the model
        as the CLI and batch build it)."""
        return self.model.default_job(layer.data, params, device)

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

    def recipe_notes(self) -> list[str]:
        """What a recipe saved now cannot carry of the dock's next run, in words (default:
        nothing: the dock runs the registry's job with its parameters, as the recipe does);
        the Recipe row says it when it saves one."""
        return []

    def recipe_artifacts(self) -> dict[str, tuple[ArrayLike | CsvArtifact, str]]:
        """The job's inputs beyond the data that the dock's next run uses, by their recipe
        artifact names (``JobSpec.accepts``): ``{name: (value, source name)}``. The Recipe row
        writes each beside the recipe, an image as a TIFF and a drift trace (anything with
        ``to_csv``) as its CSV, so a recipe reproduces the run (default: none)."""
        return {}

    def metric_targets(self, params: Params) -> dict[str, float]:
        """Values the plotted metrics aim for (dashed lines), e.g. a tolerance."""
        return {}

    def output_geometry(
        self,
        geometry: dict[str, object],
        ndim: int,
        *,
        preview: bool,
        params: Params,
        layer: napari.layers.Image,
    ) -> dict[str, object]:
        """Layer geometry kwargs of a streamed (or preview) output with ``ndim`` axes, given
        those it takes from the input, for the job on ``layer`` with ``params`` (default:
        unchanged)."""
        return geometry

    def kernel_packages(self) -> tuple[str, ...] | None:
        """Where the kernels this dock's method launches are defined: its compute package and
        the platform's (a dock warms up only those; kernels another package lends it, e.g.
        TV's to phase's TV regulariser, compile at their first use). None: every kernel."""
        job = getattr(self.spec, "job", None)
        if not isinstance(job, str) or not job.startswith("napari_gpuscope.compute."):
            return None
        package = ".".join(job.split(":")[0].split(".")[:3])
        return (package, "napari_gpuscope.compute.kernels")

    @property
    def supports_preview(self) -> bool:
        """Whether the subclass implements :meth:`make_preview_job`."""
        return type(self).make_preview_job is not MethodDock.make_preview_job

    # ---------------------------------------------------------------- public surface
    @property
    def device(self) -> str | None:
        """The selected device string, or None."""
        return self.device_row.device

    @property
    def input_layer(self) -> napari.layers.Image | None:
        """The selected input layer (None when there is none); settable."""
        return self.input_view.layer

    @input_layer.setter
    def input_layer(self, layer: napari.layers.Image | None) -> None:
        self.input_view.layer = layer

    @property
    def last_results(self) -> list[napari.layers.Layer]:
        """The layers of the latest full run (some may have been deleted since)."""
        return self.job_view.last_results

    @property
    def last_result_layer(self) -> napari.layers.Layer | None:
        """The main layer of the latest full run that is still in the viewer."""
        alive = [layer for layer in self.last_results if layer in self.viewer.layers]
        return alive[0] if alive else None

    def is_running(self) -> bool:
        """Whether a job of this dock (run, preview, kernel warm-up or another job of the
        method) is running or waiting to start."""
        return self.model.is_running()

    def run(self) -> bool:
        """Start a full run on the whole input layer; return whether it started (or queued).

        Refused (False, the reason in the status line) while a run or another job of the
        method is going on: Cancel (Escape) or Stop & keep it first.
        """
        return self.jobs.run()

    def stop(self) -> bool:
        """Stop & keep: ask the running run (or other job of the method) to finish now and
        keep its result so far; a preview, a warm-up or a run that cannot stop early is
        cancelled instead. Returns whether a job was running."""
        return self.jobs.stop()

    def cancel(self) -> None:
        """Cancel the running job; its partial outputs are rolled back."""
        self.jobs.cancel()

    def params(self) -> Params:
        """The parameters the controls describe, as the dock's model now holds them
        (raises ``ParameterError``, naming the field, while they are invalid)."""
        return self.model.update_params(self.build_params)

    def set_param(self, name: str, value: object) -> None:
        """Show ``value`` in the control of parameter ``name`` (None: "auto" where the field
        has it).

        The value is validated as the API and recipes validate it (the field's type and
        range), and never clamped or rounded by the control.

        Raises
        ------
        KeyError
            For a parameter the dock has no control for.
        ParameterError
            A ``ValueError`` naming the parameter and what is valid, for a value the model
            refuses (NaN, None without "auto", 2.5 for an integer, a word for a switch) or
            one outside what the control can show.
        """
        self.binding.set_param(name, value)

    def set_params(self, params: Params) -> None:
        """Show ``params`` in every control that can show them (the others, e.g. a spacing
        taken from the layer, keep theirs)."""
        self.binding.set_params(params)

    def set_status(self, text: str) -> None:
        """Write the status line."""
        self.status_view.set_status(text)

    def show_changes(self) -> list[str]:
        """Mark the fields changed from the defaults and name them; returns their names."""
        return self.binding.show_changes()

    def request_preview(self, *_: object) -> None:
        """(Re)start the live preview's debounce, if live preview is on."""
        self.preview.request()

    def preview_now(self) -> bool:
        """Start a live preview now (no debounce); return whether it started."""
        return self.preview.start_now()

    def follows(self, layer: napari.layers.Layer) -> bool:
        """Whether selecting ``layer`` makes it the input: not our own results or preview."""
        return self.input_view.follows(layer)

    def start_job(
        self,
        kind: str,
        job: Job[object],
        *,
        title: str,
        description: str,
        handlers: JobHandlers,
        layer: napari.layers.Layer | None = None,
        params: Params | None = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> None:
        """Run another job of the method (``kind``, e.g. ``"sweep"``) on the dock's one
        runner: a live preview gives way, a run or other job does not.

        Raises
        ------
        JobRefused
            Another job holds the device, or there is no device; the status line says so.
        """
        self.jobs.start_job(
            kind,
            job,
            title=title,
            description=description,
            handlers=handlers,
            layer=layer,
            params=params,
            wanted=wanted,
        )

    def reset_choices(self, *_: object) -> None:
        """Refresh the input combo (napari calls this when the layer list changes)."""
        self.input.reset_choices()

    def release(self) -> None:
        """Cancel any job, stop the timers and disconnect from the viewer: the dock is done.

        Runs when napari removes the dock (its close button, ``remove_dock_widget``) or the
        widget itself is closed. napari tells a removed dock nothing; the dock notices that it
        lost its panel (see :meth:`event`). Settings need no saving here: every change was
        written when it was made.
        """
        if self.preview.released:
            return
        self.preview.released = True
        self.model.saving = False
        self._stop_preview()
        self.cancel()
        self.live_acquisition.release()
        self._links.disconnect_all()
        for control in (self.input, *self.form.custom.values()):
            stop_following = getattr(control, "stop_following", None)
            if stop_following is not None:
                stop_following()

    def reset_to_defaults(self) -> None:
        """Set every shown parameter to its default and forget the saved settings."""
        defaults = self.defaults()
        self.model.saving = False  # the changes below must not write the settings again
        try:
            self.form.set_values(defaults)
            self.on_input_changed(self.input_layer)  # layer-derived fields from the layer again
        finally:
            self.model.saving = True
        self.model.forget_settings()
        self.show_changes()
        self.set_status("Parameters reset to their defaults.")

    # ---------------------------------------------------------------- reactions
    def _on_input_changed(self, *_: object) -> None:
        self._stop_preview()  # a preview of the previous input is of no use any more
        self.on_input_changed(self.input_layer)
        self.status_view.update_buttons()
        self.request_preview()

    def _on_params_changed(self, *_: object) -> None:
        with contextlib.suppress(ValueError):  # the model keeps why they are invalid
            self.params()
        self.show_changes()
        self._save_settings()
        self.request_preview()

    def _save_settings(self, *_: object) -> None:
        self.binding.save_settings(self.panel, self.params)

    def _stop_preview(self) -> None:
        self.jobs.stop_preview()

    def _on_dims_changed(self, *_: object) -> None:
        self.live.dims_changed()

    # ---------------------------------------------------------------- Qt events
    def keyPressEvent(self, event: QKeyEvent) -> None:
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

    def hideEvent(self, event: QHideEvent) -> None:
        """A hidden panel (napari's hide button, another tab in front) shows no live preview;
        a full run goes on (its result is wanted; the activity dock shows its progress)."""
        if not event.spontaneous():  # not a minimised window
            self.live.hidden()
        super().hideEvent(event)

    def showEvent(self, event: QShowEvent) -> None:
        """Shown again: the live preview (if on) catches up with the displayed plane."""
        if not event.spontaneous():
            self.live.shown()
        super().showEvent(event)

    def closeEvent(self, event: QCloseEvent) -> None:
        """The widget itself was closed (outside a napari panel): release it."""
        self.release()
        super().closeEvent(event)
