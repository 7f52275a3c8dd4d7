"""`MethodDock`: the shared base of every method dock (TV denoise, eSRRF, BaSiC, phase...).

A method dock only describes its method; the base does everything else: device row, Run /
Cancel, progress (dock bar, napari activity bar, elapsed time, status line), the worker thread,
streaming updates into layers, cancel/rollback, live preview, output naming and geometry,
provenance metadata, error notifications and the export buttons.

Adding a method
---------------
Subclass :class:`MethodDock`, set :attr:`~MethodDock.method_id` and
:attr:`~MethodDock.method_title`, and implement these hooks:

``build_parameters() -> QWidget | magicgui.widgets.Container``
    The method's inputs, including its input-layer combo. Called once from ``__init__`` (before
    the rest of the dock exists). When a magicgui ``Container`` is returned, its ``changed``
    signal triggers the live preview and its ``reset_choices`` follows the layer list; a plain
    QWidget should call :meth:`MethodDock.request_preview` itself.
``input_layer() -> napari.layers.Layer | None``
    The selected input layer.
``validate_input(layer) -> None`` (optional)
    Raise ``ValueError`` naming the layer and what is valid.
``collect_parameters() -> dict``
    Parameter values (JSON-friendly; they go into the provenance). Raise ``ValueError`` with a
    clear message for bad values.
``make_job(layer, params, device, *, preview) -> jobs.Job``
    Called on the GUI thread; returns a job generator that is only iterated in the worker
    thread. Pass ``device`` to the compute function: compute jobs enter it themselves, inside
    the worker. ``preview=True`` means "the current plane/slab only" with a small iteration
    budget. ``torch.no_grad`` is the method's business.
``result_layers(result, layer, params, *, preview) -> list[LayerDataTuple]``
    Output layers for the job's result. Missing ``name``/``scale``/``translate``/``units``/
    ``axis_labels`` are filled in (name ``"<input> [<method_title>]"``, geometry inherited from
    the input's trailing axes); ``metadata["napari_gpuscope"]`` always receives the provenance.
``describe_result(result) -> str`` (optional)
    Text for the status line, e.g. iterations and final gap.
``stream_shape(layer, params, *, preview) -> tuple`` (optional)
    Shape of the host buffer that ``Progress.preview_region`` updates are written into
    (default: the input's shape).

Streaming rules: the first update that carries a preview adds the result layer (or, when a
layer of that name exists from an earlier run, replaces its data after remembering it); later
updates replace the data or write into the host buffer at ``preview_region``. Cancelling or a
failure rolls back: a layer created by the run is removed, a reused layer gets its previous data
and metadata back. The input layer is never modified.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from qtpy.QtCore import Qt, QTimer
from qtpy.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.compute.devices import NoGPUError, device_label, no_gpu_message
from napari_gpuscope.compute.jobs import Job, Progress
from napari_gpuscope.compute.memory import DeviceMemoryError, is_out_of_memory
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets._devices import DeviceRow
from napari_gpuscope.widgets._layers import output_name, spatial_kwargs
from napari_gpuscope.widgets._runner import JobRunner

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer
    from magicgui.widgets import Container

__all__ = ["MethodDock", "plain_error_message"]

_RUN = "run"
_PREVIEW = "preview"


def plain_error_message(exc: BaseException) -> str:
    """Turn an exception from a job into a sentence a microscopist can act on."""
    text = str(exc).strip() or type(exc).__name__
    name = type(exc).__name__
    if isinstance(exc, DeviceMemoryError | NoGPUError | ValueError):
        return text  # these messages are written for users already
    if is_out_of_memory(exc):
        return (
            "The GPU ran out of memory. Close other GPU programs, pick another GPU, "
            f"or process a smaller region. (Details: {text})"
        )
    if isinstance(exc, MemoryError):
        return "The computer ran out of memory (RAM). Process a smaller region."
    return f"{text} ({name})"


@dataclass
class _Stream:
    """Bookkeeping of one running job's output layer, for streaming and rollback."""

    kind: str
    layer: Any
    params: dict[str, Any]
    device: str
    name: str
    target: Any = None
    created: bool = False
    previous_data: Any = None
    previous_metadata: dict[str, Any] | None = None
    buffer: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class MethodDock(QWidget):
    """Base class of the method docks; see the module docstring for the subclass hooks.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari when the dock is opened from the plugin menu.
    """

    method_id: ClassVar[str] = "method"
    """Short id stored in the provenance, e.g. ``"tv"``."""
    method_title: ClassVar[str] = "Method"
    """Human-readable name, used in output layer names, e.g. ``"TV denoise"``."""
    streamed_output: ClassVar[str] = "result"
    """Name of the job output (``Progress.outputs``) streamed into the result layer."""
    preview_debounce_ms: ClassVar[int] = 200
    """Quiet time after the last parameter change before a live preview starts."""

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        super().__init__()
        self.viewer = viewer
        self.runner = JobRunner(self)
        self.runner.progressed.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_succeeded)
        self.runner.failed.connect(self._on_failed)
        self.runner.stopped.connect(self._update_buttons)
        self._stream: _Stream | None = None
        self._last_preview_error: str | None = None
        self.last_result_layer: napari.layers.Layer | None = None

        self._preview_timer = QTimer(self)
        self._preview_timer.setSingleShot(True)
        self._preview_timer.setInterval(self.preview_debounce_ms)
        self._preview_timer.timeout.connect(self._start_preview)
        self._elapsed_timer = QTimer(self)
        self._elapsed_timer.setInterval(200)
        self._elapsed_timer.timeout.connect(self._show_elapsed)

        self.parameters = self.build_parameters()
        parameters_widget = getattr(self.parameters, "native", self.parameters)
        if hasattr(self.parameters, "changed"):
            self.parameters.changed.connect(self.request_preview)

        self.device_row = DeviceRow()
        self.device_row.availability_changed.connect(self._update_buttons)

        self.live_preview = QCheckBox("Live preview")
        self.live_preview.setToolTip(
            "Re-run a quick preview of the current plane whenever a parameter changes"
        )
        self.live_preview.toggled.connect(self._on_live_preview_toggled)
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip(f"Run {self.method_title} on the whole input layer")
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip(
            "Stop the running job; a full run's partial result is discarded and any earlier "
            "result is kept"
        )
        self.cancel_button.clicked.connect(self.cancel)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setMaximumHeight(12)
        self.progress_bar.setToolTip("Progress of the running job (preview or full run)")
        self.elapsed_label = QLabel("")
        self.elapsed_label.setToolTip("Elapsed time of the running (or last) job")
        self.status_label = QLabel("Ready.")
        self.status_label.setWordWrap(True)
        # Copyable (users paste it into notes and bug reports), and a long status line wraps
        # instead of widening the dock.
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.export_screenshot_button = QPushButton("Screenshot...")
        self.export_screenshot_button.setToolTip(
            "Save the canvas as a PNG, with the processing parameters (provenance) saved alongside"
        )
        self.export_screenshot_button.clicked.connect(self._export_screenshot)
        self.save_tiff_button = QPushButton("Save TIFF...")
        self.save_tiff_button.setToolTip(
            "Save the latest result layer as a TIFF file (float32 or uint16), with its pixel "
            "size and processing parameters"
        )
        self.save_tiff_button.clicked.connect(self._save_tiff)

        buttons = QHBoxLayout()
        buttons.addWidget(self.live_preview)
        buttons.addStretch(1)
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress_bar, stretch=1)
        progress_row.addWidget(self.elapsed_label)
        exports = QHBoxLayout()
        exports.addWidget(self.export_screenshot_button)
        exports.addWidget(self.save_tiff_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.device_row)
        layout.addWidget(parameters_widget)
        layout.addLayout(buttons)
        layout.addLayout(progress_row)
        layout.addWidget(self.status_label)
        layout.addLayout(exports)
        layout.addStretch(1)

        self.viewer.dims.events.current_step.connect(self._on_dims_changed)
        self._update_buttons()

    # ---------------------------------------------------------------- subclass hooks
    def build_parameters(self) -> QWidget | Container:
        """Build the method's input widgets (including the input-layer combo)."""
        raise NotImplementedError

    def input_layer(self) -> napari.layers.Layer | None:
        """Return the selected input layer (None when there is none)."""
        raise NotImplementedError

    def validate_input(self, layer: napari.layers.Layer | None) -> None:
        """Raise ValueError naming the layer and what is valid; the default accepts anything."""
        if layer is None:
            raise ValueError("No input layer selected.")

    def collect_parameters(self) -> dict[str, Any]:
        """Return the current parameter values; raise ValueError for invalid ones."""
        raise NotImplementedError

    def make_job(
        self, layer: napari.layers.Layer, params: dict[str, Any], device: str, *, preview: bool
    ) -> Job[Any]:
        """Return the job generator computing the result (iterated in the worker thread)."""
        raise NotImplementedError

    def result_layers(
        self, result: Any, layer: napari.layers.Layer, params: dict[str, Any], *, preview: bool
    ) -> list[tuple]:
        """Return the output ``(data, kwargs, layer_type)`` tuples for a finished job."""
        raise NotImplementedError

    def describe_result(self, result: Any) -> str:
        """One-line description of a finished job's result for the status line."""
        return "Done."

    def stream_shape(
        self, layer: napari.layers.Layer, params: dict[str, Any], *, preview: bool
    ) -> tuple[int, ...]:
        """Shape of the host buffer for ``Progress.preview_region`` updates."""
        return tuple(np.shape(layer.data))

    # ---------------------------------------------------------------- public actions
    @property
    def device(self) -> str | None:
        """The selected device string, or None."""
        return self.device_row.device

    def reset_choices(self, *_: Any) -> None:
        """Refresh layer combos (napari calls this when the layer list changes)."""
        reset = getattr(self.parameters, "reset_choices", None)
        if reset is not None:
            reset()

    def run(self) -> bool:
        """Start a full run on the whole input layer; return whether a job started."""
        self._preview_timer.stop()
        return self._start(_RUN)

    def cancel(self) -> None:
        """Cancel the running job; its partial output is rolled back."""
        self._preview_timer.stop()
        stream = self._stream
        if self.runner.cancel():
            self._stream = None
            if stream is not None:
                self._rollback(stream)
            self._set_status("Cancelled; nothing was changed.")
            self._stop_clock()
        self._update_buttons()

    def request_preview(self, *_: Any) -> None:
        """(Re)start the debounce timer of the live preview, if live preview is on."""
        live = getattr(self, "live_preview", None)  # None while build_parameters() runs
        if live is not None and live.isChecked() and live.isEnabled():
            self._preview_timer.start()

    # ---------------------------------------------------------------- job lifecycle
    def _start(self, kind: str) -> bool:
        preview = kind == _PREVIEW
        device = self.device
        if device is None:
            self._report_error(no_gpu_message(), preview=preview)
            return False
        layer = self.input_layer()
        try:
            if layer is not None and layer not in self.viewer.layers:
                raise ValueError(f"Layer '{layer.name}' is no longer in the viewer.")
            self.validate_input(layer)
            params = self.collect_parameters()
            job = self.make_job(layer, params, device, preview=preview)
        except ValueError as exc:
            self._report_error(str(exc), preview=preview)
            return False
        except Exception as exc:  # a bug must not take napari down; tell the user instead
            self._report_error(
                f"Could not start {self.method_title}: {plain_error_message(exc)}",
                preview=preview,
            )
            return False

        previous = self._stream
        if previous is not None and previous.kind == _RUN:
            # Superseding a full run (a new Run click) is a cancel of that run.
            self.runner.cancel()
            self._rollback(previous)
        name = output_name(layer.name, self.method_title, preview=preview)
        self._stream = _Stream(kind, layer, params, device, name)
        self._last_preview_error = None  # a later failure is news again
        what = "Preview" if preview else "Running"
        self.runner.start(
            job,
            description=f"{self.method_title}: {layer.name}",
            tag=kind,
            wanted=lambda name: name == self.streamed_output,
        )
        self.progress_bar.setValue(0)
        self._set_status(f"{what} {self.method_title} on '{layer.name}' ({device})...")
        self._elapsed_timer.start()
        self._show_elapsed()
        self._update_buttons()
        return True

    def _start_preview(self) -> None:
        if not self.live_preview.isChecked():
            return
        if self._stream is not None and self._stream.kind == _RUN:
            return  # never disturb a full run; the next change after it re-triggers a preview
        self._start(_PREVIEW)

    def _on_progress(self, update: Progress) -> None:
        stream = self._stream
        if stream is None:
            return
        if stream.layer not in self.viewer.layers:  # input removed (or viewer closing): stop
            self.cancel()
            return
        self._show_fraction(update.fraction)
        if update.message:
            self._set_status(update.message)
        output = update.outputs.get(self.streamed_output)
        if output is None or output.is_lazy:
            return
        data = output.array()
        if output.region is not None:
            if stream.buffer is None:
                shape = self.stream_shape(
                    stream.layer, stream.params, preview=stream.kind == _PREVIEW
                )
                stream.buffer = np.zeros(shape, dtype=data.dtype)
            stream.buffer[output.region] = data
            data = stream.buffer
        self._show_stream(stream, data)

    def _show_fraction(self, fraction: float | None) -> None:
        """A percentage, or Qt's busy indicator when the job cannot say how far it is."""
        if fraction is None:
            self.progress_bar.setRange(0, 0)
            return
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setValue(round(fraction * 1000))

    def _show_stream(self, stream: _Stream, data: np.ndarray) -> None:
        """Put streamed data on screen: first update adds/claims the layer, later ones replace."""
        layers = self.viewer.layers
        if stream.target is None:
            existing = self._find_output_layer(stream.name, stream.layer)
            if existing is not None:
                stream.target = existing
                stream.previous_data = existing.data
                stream.previous_metadata = dict(existing.metadata)
                existing.data = data
            else:
                kwargs = {"name": stream.name, **spatial_kwargs(stream.layer, data.ndim)}
                stream.target = self.viewer.add_image(data, **kwargs)
                stream.created = True
            return
        if stream.target not in layers:
            return  # the user deleted it mid-run; the final result is added afresh
        if data is stream.target.data:
            stream.target.refresh()
        else:
            stream.target.data = data

    def _on_succeeded(self, result: Any, elapsed: float) -> None:
        stream, self._stream = self._stream, None
        self._stop_clock(elapsed)
        if stream is None:
            return
        preview = stream.kind == _PREVIEW
        try:
            self._apply_result(stream, result, elapsed, preview=preview)
        except Exception as exc:  # never raise into the Qt loop
            self._rollback(stream)
            self._report_error(
                f"{self.method_title} finished but its result could not be shown: "
                f"{plain_error_message(exc)}",
                preview=preview,
            )
            return
        self._show_fraction(1.0)
        prefix = "Preview: " if preview else ""
        self._set_status(f"{prefix}{self.describe_result(result)}. Took {elapsed:.2f} s.")

    def _apply_result(self, stream: _Stream, result: Any, elapsed: float, *, preview: bool) -> None:
        summary_fn = getattr(result, "summary", None)
        summary = summary_fn() if callable(summary_fn) else None
        record = build_provenance(
            self.method_id,
            stream.params,
            device=device_label(stream.device),
            input_name=stream.layer.name,
            elapsed_seconds=elapsed,
            result=summary,
        )
        for index, (data, kwargs, layer_type) in enumerate(
            self.result_layers(result, stream.layer, stream.params, preview=preview)
        ):
            data = np.asarray(data)
            kwargs = dict(kwargs)
            kwargs.setdefault("name", stream.name if index == 0 else f"{stream.name} {index}")
            for key, value in spatial_kwargs(stream.layer, data.ndim).items():
                kwargs.setdefault(key, value)
            kwargs["metadata"] = {**dict(kwargs.get("metadata") or {}), PROVENANCE_KEY: record}
            target = stream.target if index == 0 else None
            if target is None or target not in self.viewer.layers or target.name != kwargs["name"]:
                target = self._find_output_layer(kwargs["name"], stream.layer, layer_type)
            if target is not None and target.ndim == data.ndim:
                target.data = data
                target.metadata = kwargs["metadata"]
                for key in ("scale", "translate", "units", "axis_labels"):
                    setattr(target, key, kwargs[key])
                if index == 0 and stream.created:
                    target.reset_contrast_limits()
            else:
                if target is not None:
                    self.viewer.layers.remove(target)
                from napari.layers import Layer

                target = self.viewer.add_layer(Layer.create(data, kwargs, layer_type))
            if index == 0 and not preview:
                self.last_result_layer = target

    def _on_failed(self, exc: BaseException) -> None:
        stream, self._stream = self._stream, None
        self._stop_clock()
        if stream is not None:
            self._rollback(stream)
        where = f" on '{stream.layer.name}'" if stream is not None else ""
        self._report_error(
            f"{self.method_title} failed{where}: {plain_error_message(exc)}",
            preview=stream is not None and stream.kind == _PREVIEW,
        )

    def _rollback(self, stream: _Stream) -> None:
        """Undo a stopped job's layer changes (remove what it created, restore what it reused)."""
        target = stream.target
        stream.target = None
        if target is None or target not in self.viewer.layers:
            return
        if stream.created:
            self.viewer.layers.remove(target)
        elif stream.previous_data is not None:
            target.data = stream.previous_data
            target.metadata = stream.previous_metadata or {}

    def _find_output_layer(
        self, name: str, input_layer: Any, layer_type: str = "image"
    ) -> napari.layers.Layer | None:
        for candidate in self.viewer.layers:
            if (
                candidate.name == name
                and candidate is not input_layer
                and candidate.__class__.__name__.lower() == layer_type.lower()
            ):
                return candidate
        return None

    # ---------------------------------------------------------------- live preview plumbing
    def _on_live_preview_toggled(self, checked: bool) -> None:
        if checked:
            self.request_preview()
            return
        self._preview_timer.stop()
        stream = self._stream
        if stream is not None and stream.kind == _PREVIEW:
            self.runner.cancel()
            self._stream = None
            self._rollback(stream)
            self._stop_clock()
        layer = self.input_layer()
        if layer is not None:
            name = output_name(layer.name, self.method_title, preview=True)
            stale = self._find_output_layer(name, layer)
            if stale is not None:
                self.viewer.layers.remove(stale)
        self._update_buttons()

    def _on_dims_changed(self, *_: Any) -> None:
        try:
            layer = self.input_layer()
            if layer is None or layer not in self.viewer.layers:
                return
            if layer.ndim > len(self.viewer.dims.displayed):
                self.request_preview()
        except RuntimeError:  # the Qt side of this dock is gone: stop listening
            self.viewer.dims.events.current_step.disconnect(self._on_dims_changed)

    def closeEvent(self, event: Any) -> None:
        """Stop timers and cancel any job when the dock closes."""
        self._preview_timer.stop()
        self.cancel()
        super().closeEvent(event)

    # ---------------------------------------------------------------- small UI helpers
    def _update_buttons(self, *_: Any) -> None:
        available = self.device_row.available
        running_full = self._stream is not None and self._stream.kind == _RUN
        self.run_button.setEnabled(available and not running_full)
        self.cancel_button.setEnabled(self.runner.running)
        self.live_preview.setEnabled(available)
        if not available:
            self.live_preview.setChecked(False)

    def _set_status(self, text: str) -> None:
        self.status_label.setText(text)

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

    def _show_elapsed(self) -> None:
        started = self.runner.started_at
        if started is not None:
            self.elapsed_label.setText(f"{time.perf_counter() - started:.1f} s")

    def _stop_clock(self, elapsed: float | None = None) -> None:
        self._elapsed_timer.stop()
        self.elapsed_label.setText("" if elapsed is None else f"{elapsed:.2f} s")

    def _export_screenshot(self) -> None:
        try:
            from napari_gpuscope.export.commands import export_screenshot_dialog

            export_screenshot_dialog(self.viewer)
        except Exception as exc:
            self._report_error(f"Could not export the screenshot: {plain_error_message(exc)}")

    def _save_tiff(self) -> None:
        layer = self.last_result_layer
        if layer is not None and layer not in self.viewer.layers:
            layer = None
        try:
            from napari_gpuscope.export.commands import save_tiff_dialog

            save_tiff_dialog(self.viewer, layer=layer)
        except Exception as exc:
            self._report_error(f"Could not save the TIFF file: {plain_error_message(exc)}")
