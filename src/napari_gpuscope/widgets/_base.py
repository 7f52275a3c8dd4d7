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
``output_geometry(geometry, ndim, preview=, params=, layer=)``
    The geometry of streamed and preview layers, from the input's and the job's parameters
    and input (default: unchanged; a super-resolution method returns a finer scale).

Class attributes say the rest: :attr:`~MethodDock.short_title` (the tag of the preview layer,
``"<short_title> preview · <input>"``, and of a run's layers while they stream; the result then
names its layers), :attr:`~MethodDock.streamed_outputs`,
:attr:`~MethodDock.hidden_fields`,
:attr:`~MethodDock.field_styles`, :attr:`~MethodDock.input_dims` and
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
The dock is a view over a Qt-free controller,
:class:`~napari_gpuscope.widgets._controller.DockController` (``self.jobs``): its one runner,
through which every job of the dock goes (run, preview, warm-up and the method's other jobs,
:meth:`~MethodDock.start_job`), the job state and the settings. The view's parts live in their
own modules: the lower panel (:mod:`._dock_parts`, a view the dock connects to through Qt
signals), the job reactions (:mod:`._dock_jobs`), the live preview's scheduling
(:mod:`._preview_schedule`) and the Qt events (:mod:`._dock_events`). The parts of a dock
(recipe row, eSRRF sweep, flat-field apply) see it through
:class:`~napari_gpuscope.widgets._context.DockContext`.

The result follows the result protocol (:mod:`napari_gpuscope.compute.results`): its
``layers(name, geometry, metadata)`` give the result layers, ``describe()`` the status line,
``summary()`` the provenance. Output ``k`` of :attr:`~MethodDock.streamed_outputs` streams into
the layer that result layer ``k`` then takes over.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qtpy.QtCore import Qt
from qtpy.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget

from napari_gpuscope.compute.params import ParameterError, Params
from napari_gpuscope.compute.preview import PreviewResult
from napari_gpuscope.provenance import provenance_of
from napari_gpuscope.widgets._controller import (
    RUN,
    DockController,
    DockJob,
    JobHandlers,
    JobRefused,
)
from napari_gpuscope.widgets._controls import ParamForm
from napari_gpuscope.widgets._controls._changes import ChangesRow
from napari_gpuscope.widgets._controls._layer_picker import LayerPicker
from napari_gpuscope.widgets._devices import DeviceRow
from napari_gpuscope.widgets._dock_events import DockQtEvents
from napari_gpuscope.widgets._dock_jobs import DockJobs
from napari_gpuscope.widgets._dock_parts import DockPanel
from napari_gpuscope.widgets._dock_state import DockStatus
from napari_gpuscope.widgets._events import Connections
from napari_gpuscope.widgets._method_hooks import MethodHooks
from napari_gpuscope.widgets._outputs import relink_display
from napari_gpuscope.widgets._preview_schedule import PreviewScheduling
from napari_gpuscope.widgets._recipes import RecipeRow
from napari_gpuscope.widgets._runner import JobRunner

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.compute.jobs import Job

__all__ = ["MethodDock", "PreviewResult"]


class MethodDock(MethodHooks, DockJobs, PreviewScheduling, DockStatus, DockQtEvents, QWidget):
    """Base class of the method docks; see the module docstring for what a subclass adds
    (:class:`~napari_gpuscope.widgets._method_hooks.MethodHooks` lists the hooks).

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari when the dock is opened from the plugin menu.
    """

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        super().__init__()
        self.viewer = viewer
        self.spec = self.method_spec()
        self.params_class: type[Params] = self.spec.params_class()
        self.title = self.spec.title
        self.runner = JobRunner(self)
        self.jobs = DockController(self.runner, title=self.title, method_id=self.method_id)
        self.runner.progressed.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_succeeded)
        self.runner.failed.connect(self._on_failed)
        self.runner.stopped.connect(self._on_stopped)
        self._last_preview_error: str | None = None
        self._preview_layers: dict[str, napari.layers.Layer] = {}
        self.last_results: list[napari.layers.Layer] = []
        # every layer this dock made -> its input layer (weakly: the user may delete either)
        self._owned: weakref.WeakKeyDictionary[
            napari.layers.Layer, weakref.ref[napari.layers.Layer]
        ] = weakref.WeakKeyDictionary()
        self._links = Connections()
        self._preview_timer = self._make_preview_timer()
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
            follow=self.follows,
            parent=self,
        )
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
        self.changes = ChangesRow(self.reset_to_defaults)
        self.form.add_row("", self.changes, after=None)
        # Batch recipes: the parameters tuned here, applied to a whole experiment.
        self.recipe_row = RecipeRow(self)
        self.form.add_row(
            "Recipe", self.recipe_row, "Parameters for 'napari-gpuscope run'", after=None
        )
        self._build_layout()
        self._connect()
        self._load_settings()
        self._on_input_changed()
        self.panel.set_tab_order(self.content)
        self._warm_up(self.device)

    def _connect(self) -> None:
        """The dock's reactions to its panel, form, input and device row (Qt signals), and to
        the viewer's dims (napari events, undone on release)."""
        panel = self.panel
        panel.live_preview.toggled.connect(self._on_live_preview_toggled)
        panel.run_button.clicked.connect(self.run)
        panel.stop_button.clicked.connect(self.stop)
        panel.cancel_button.clicked.connect(self.cancel)
        panel.link_display.toggled.connect(self._on_link_toggled)
        panel.figure_button.clicked.connect(self._export_figure)
        panel.save_tiff_button.clicked.connect(self._save_tiff)
        panel.reset_button.clicked.connect(self.reset_to_defaults)
        self.form.changed.connect(self._on_params_changed)
        self.input.changed.connect(self._on_input_changed)
        for event in ("current_step", "order", "ndisplay"):
            self._links.connect(getattr(self.viewer.dims.events, event), self._on_dims_changed)
        self.device_row.availability_changed.connect(self._update_buttons)
        self.device_row.device_changed.connect(self._warm_up)
        for box in (panel.replace_last, panel.link_display):
            box.toggled.connect(self._save_settings)
        self.form.advanced.toggled.connect(self._save_settings)

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

    # ---------------------------------------------------------------- public surface
    @property
    def device(self) -> str | None:
        """The selected device string, or None."""
        return self.device_row.device

    @property
    def input_layer(self) -> napari.layers.Image | None:
        """The selected input layer (None when there is none); settable."""
        # The picker's combo can lose its layer without a signal (its choices emptied): hand
        # the controller what it shows now.
        self.jobs.set_input(self.input.layer)
        return self.jobs.input_layer

    @input_layer.setter
    def input_layer(self, layer: napari.layers.Image | None) -> None:
        self.input.layer = layer
        self.jobs.set_input(self.input.layer)  # also when the picker emits nothing

    @property
    def last_result_layer(self) -> napari.layers.Layer | None:
        """The main layer of the latest full run that is still in the viewer."""
        alive = [layer for layer in self.last_results if layer in self.viewer.layers]
        return alive[0] if alive else None

    def is_running(self) -> bool:
        """Whether a job of this dock (run, preview, kernel warm-up or another job of the
        method) is running or waiting to start."""
        return self.jobs.is_running()

    def run(self) -> bool:
        """Start a full run on the whole input layer; return whether it started (or queued).

        Refused (False, the reason in the status line) while a run or another job of the
        method is going on: Cancel (Escape) or Stop & keep it first.
        """
        reason = self.jobs.refusal(RUN)
        if self.device is None:
            # Said once, in the dock (the device row explains): no notification on top.
            reason = self.input_problem()
        if reason is not None:
            self.set_status(reason)
            return False
        self._preview_timer.stop()
        return self._start(RUN)

    def stop(self) -> bool:
        """Stop & keep: ask the running run (or other job of the method) to finish now and
        keep its result so far; a preview, a warm-up or a run that cannot stop early is
        cancelled instead. Returns whether a job was running."""
        kind = self.jobs.kind
        if kind is None:
            return False
        if (kind == RUN and not self.spec.supports_stop) or not self.jobs.holds_device():
            self.cancel()
            return True
        if self.jobs.request_stop():
            self.set_status("Stopping after the current step; the result so far will be kept.")
            self.panel.stop_button.setEnabled(False)
        return True

    def cancel(self) -> None:
        """Cancel the running job; its partial outputs are rolled back."""
        self._preview_timer.stop()
        job = self.jobs.cancel()
        if job is not None:
            if job.outputs is not None:
                job.outputs.rollback()
            self.set_status("Cancelled; nothing was changed.")
            self.panel.stop_clock()
            if job.handlers is not None:
                job.handlers.ended()
        self._update_buttons()

    def params(self) -> Params:
        """The parameters the controls describe, as the dock's controller now holds them
        (raises ``ParameterError``, naming the field, while they are invalid)."""
        return self.jobs.update_params(self.build_params)

    def set_param(self, name: str, value: Any) -> None:
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
        control = self.form.custom.get(name)
        if control is None and name not in self.form.widgets:
            raise KeyError(f"{self.title} has no control for the parameter {name!r}")
        value = checked_value(self.params_class, name, value)
        if control is not None:
            set_value = getattr(control, "set_value", None)
            if set_value is None:
                raise KeyError(f"{name!r} is taken from the input layer; it cannot be set")
            set_value(value)
            return
        widget = self.form.widgets[name]
        low, high = getattr(widget, "min", None), getattr(widget, "max", None)
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if is_number and low is not None and high is not None and not low <= value <= high:
            raise ParameterError(
                f"{self.title}: {name} = {value!r} is outside what its control offers, "
                f"[{low:g}, {high:g}]"
            )
        self.form.set_values({name: value})

    def set_params(self, params: Params) -> None:
        """Show ``params`` in every control that can show them (the others, e.g. a spacing
        taken from the layer, keep theirs)."""
        self.form.set_values({name: getattr(params, name) for name in self.form.widgets})
        for name, control in self.form.custom.items():
            set_value = getattr(control, "set_value", None)
            if set_value is not None:
                set_value(getattr(params, name))

    def set_status(self, text: str) -> None:
        """Write the status line."""
        self.panel.status.setText(text)

    def follows(self, layer: napari.layers.Layer) -> bool:
        """Whether selecting ``layer`` makes it the input: not our own results or preview."""
        if layer in self._owned:
            return False
        record = provenance_of(layer)
        return not (isinstance(record, dict) and record.get("method") == self.method_id)

    def start_job(
        self,
        kind: str,
        job: Job[Any],
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
        reason = "no usable CUDA GPU (see the device row)" if self.device is None else None
        reason = reason or self.jobs.refusal(kind)
        if reason is not None:
            job.close()
            self.set_status(reason)
            raise JobRefused(reason)
        self._stop_preview()
        name = getattr(layer, "name", "")
        record = DockJob(kind, layer, params, self.device or "", name, title, handlers=handlers)
        self.jobs.launch(record, job, description=description, wanted=wanted)
        self.panel.start_clock(self.runner)
        self._update_buttons()

    def reset_choices(self, *_: Any) -> None:
        """Refresh the input combo (napari calls this when the layer list changes)."""
        self.input.reset_choices()

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
        self.jobs.saving = False
        self._stop_preview()
        self.cancel()
        self._links.disconnect_all()
        for control in (self.input, *self.form.custom.values()):
            stop_following = getattr(control, "stop_following", None)
            if stop_following is not None:
                stop_following()

    def reset_to_defaults(self) -> None:
        """Set every shown parameter to its default and forget the saved settings."""
        defaults = self.defaults()
        self.jobs.saving = False  # the changes below must not write the settings again
        try:
            self.form.set_values(defaults)
            self.on_input_changed(self.input_layer)  # layer-derived fields from the layer again
        finally:
            self.jobs.saving = True
        self.jobs.forget_settings()
        self.show_changes()
        self.set_status("Parameters reset to their defaults.")

    # ---------------------------------------------------------------- reactions
    def _on_input_changed(self, *_: Any) -> None:
        self.jobs.set_input(self.input.layer)
        self._stop_preview()  # a preview of the previous input is of no use any more
        self.on_input_changed(self.input_layer)
        self._update_buttons()
        self.request_preview()

    def _on_params_changed(self, *_: Any) -> None:
        with contextlib.suppress(ValueError):  # the controller keeps why they are invalid
            self.params()
        self.show_changes()
        self._save_settings()
        self.request_preview()

    def _on_link_toggled(self, checked: bool) -> None:
        """Link (or unlink) the display of every result and preview of this dock."""
        relink_display(self.viewer, self._owned, link=checked)

    # The export commands report their own failures as notifications (they are File-menu
    # commands too), so the buttons just call them.
    def _export_figure(self) -> None:
        from napari_gpuscope.export.commands import export_screenshot_dialog

        export_screenshot_dialog(self.viewer)

    def _save_tiff(self) -> None:
        from napari_gpuscope.export.commands import save_tiff_dialog

        save_tiff_dialog(self.viewer, layer=self.last_result_layer)


def checked_value(params_class: type[Params], name: str, value: Any) -> Any:
    """``value`` as the model ``params_class`` validates the field ``name`` (its type and
    range, with the other fields at their defaults), so a dock takes exactly what the API and
    recipes take.

    Raises
    ------
    ParameterError
        Naming the field, the value and what is valid (the model's own message).

    Examples
    --------
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> checked_value(TVParams, "max_iterations", 200)
    200
    >>> try:
    ...     checked_value(TVParams, "max_iterations", 2.5)
    ... except ValueError as error:
    ...     print(error)
    TVParams.max_iterations must be an integer in [1, 1e+06], got 2.5
    """
    if name not in params_class.model_fields:
        return value
    return getattr(params_class().replace(**{name: value}), name)
