"""The eSRRF dock's "Drift correction" section: off, estimated in the run, or a given trace.

A view of drift estimation (the registry's ``drift`` job of eSRRF,
:func:`~napari_gpuscope.compute.esrrf.iter_estimate_drift`), seen through
:class:`~napari_gpuscope.dock.context.DockContext` as the sweep panel is:

- a choice that drives the params model's ``drift_correction`` (so settings, recipes and
  provenance carry it): *Off*, *Estimate in the run* (the run estimates over the whole
  stack first) or *Use the trace below* (the run is corrected with the estimated or loaded
  trace, passed as ``drift_shifts``); the estimate's options are the model's advanced
  ``drift_*`` fields, in the dock's Advanced section;
- "Estimate drift": the job on the dock's one runner (refused while a run holds the device),
  its block shifts plotted live (:class:`~.drift_plot.DriftPlot`), then the trace as a
  Tracks layer over the input and the drift-corrected mean (hidden), with provenance;
- "Load trace..." / "Save trace...": CSV files with units
  (:meth:`~napari_gpuscope.compute.esrrf.DriftResult.to_csv` / ``from_csv``), a loaded trace
  checked against the input's number of frames.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.compute.devices import device_label
from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.dock.jobs import JobHandlers, JobRefused
from napari_gpuscope.dock.messages import plain_error_message, sentence
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets._controls._plot import theme_colors
from napari_gpuscope.widgets.esrrf.drift_plot import DriftPlot

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.esrrf import DriftResult, EsrrfParams
    from napari_gpuscope.compute.jobs import Progress
    from napari_gpuscope.dock.context import DockContext

__all__ = ["MODES", "DriftSection", "channel_axis", "layer_unit"]

MODES = {
    "off": "Off",
    "estimate": "Estimate in the run",
    "trace": "Use the trace below",
}
"""The section's choices: value -> what the combo says."""
_NO_TRACE = "No trace yet: Estimate drift, or load a saved trace (CSV)."


def layer_unit(layer: napari.layers.Layer | None) -> str:
    """The unit of a layer's last axis as a short symbol (``"µm"``), ``"px"`` without one.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> layer_unit(SimpleNamespace(units=("second", "micrometer", "micrometer")))
    'µm'
    >>> layer_unit(None)
    'px'
    """
    units = getattr(layer, "units", None)
    if units is None or not len(units):
        return "px"
    unit = str(units[-1])
    return {"micrometer": "µm", "um": "µm", "nanometer": "nm", "pixel": "px"}.get(unit, unit)


def _pixel_of(layer: napari.layers.Layer | None) -> tuple[float, str] | None:
    """(pixel size, unit) of a layer with a physical scale; None in pixels."""
    unit = layer_unit(layer)
    if layer is None or unit == "px":
        return None
    size = abs(float(layer.scale[-1]))
    return (size, unit) if math.isfinite(size) and size > 0 else None


def channel_axis(layer: napari.layers.Layer) -> int:
    """The channel axis of a 4D layer: 0 (C, T, Y, X) or 1 (T, C, Y, X), from its shape and
    axis labels (:func:`~napari_gpuscope.compute.esrrf.guess_channel_axis`)."""
    from napari_gpuscope.compute.esrrf import guess_channel_axis

    return guess_channel_axis(np.shape(layer.data), getattr(layer, "axis_labels", None))


def _same_layer(a: Any, b: Any) -> bool:
    """Whether two layer handles are one layer (napari's proxies compare by the layer)."""
    return a is b or bool(a == b)


def _frames(layer: napari.layers.Layer | None) -> int | None:
    """Frames of a (T, Y, X) stack or of each channel of a 4D one."""
    shape = np.shape(getattr(layer, "data", None)) if layer is not None else ()
    if len(shape) == 4:
        return int(shape[1 - channel_axis(layer)])
    return int(shape[-3]) if len(shape) == 3 else None


class DriftSection(QWidget):
    """Drift correction rows of the eSRRF dock: :attr:`mode` (a form row of its own, so that
    it lines up with the other fields: :meth:`add_to` places both) and the buttons, trace and
    plot (a row spanning both columns).

    Parameters
    ----------
    dock : DockContext
        The dock as its parts see it (input, device, parameters, its one runner).
    switch : magicgui.widgets.CheckBox
        The form's (hidden) ``drift_correction`` control, which this section drives and
        follows (settings restored, Reset, a recipe's parameters).

    Attributes
    ----------
    trace : DriftResult or None
        The estimated or loaded trace a run in *Use the trace below* mode is corrected with.
    """

    spans_form = True

    def __init__(self, dock: DockContext, switch: Any) -> None:
        super().__init__()
        self.dock, self.viewer, self.switch = dock, dock.viewer, switch
        self.trace: DriftResult | None = None
        self.trace_source = ""
        self.trace_layer: napari.layers.Layer | None = None  # the stack the trace is of
        self.running = False
        self._syncing = False
        # The layers of the latest trace shown (held, not weakly: napari's public-only proxy
        # hands out a new wrapper per call, which a weak reference would lose at once).
        self._made: list[tuple[str, Any]] = []  # (layer type, layer)
        self.title = QLabel("Drift correction")
        self.title.setToolTip(
            "Move every frame back by the sample's drift before eSRRF (a drifting stack smears "
            "every structure). Off; estimated over the whole stack at the start of the run; "
            "or the trace below (estimated with 'Estimate drift', or loaded from a CSV file)."
        )
        self.mode = QComboBox()
        for value, text in MODES.items():
            self.mode.addItem(text, value)
        self.mode.setToolTip(self.title.toolTip())
        self.mode.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.mode.setMinimumWidth(80)
        self.estimate_button = QPushButton("Estimate drift")
        self.estimate_button.setToolTip(
            "Estimate the drift of the input stack only (blocks of frames cross-correlated, the "
            "options in Advanced): the trace is plotted, drawn over the image as a track, and "
            "used by runs in 'Use the trace below' mode"
        )
        self.load_button = QPushButton("Load trace...")
        self.load_button.setToolTip(
            "A drift trace saved as CSV (columns frame, dy_px, dx_px); it must have one row "
            "per frame of the input"
        )
        self.save_button = QPushButton("Save trace...")
        self.save_button.setToolTip(
            "The trace as CSV: dy, dx per frame in pixels (and in the layer's unit when it "
            "has a physical scale)"
        )
        self.info = QLabel(_NO_TRACE)
        self.info.setWordWrap(True)
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.plot = DriftPlot(theme_colors(self.viewer))
        self.plot.setVisible(False)
        buttons = QHBoxLayout()
        for button in (self.estimate_button, self.load_button, self.save_button):
            button.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.info)
        layout.addWidget(self.plot)
        self.mode.currentIndexChanged.connect(self._on_mode)
        self.switch.changed.connect(self._on_switch)
        self.estimate_button.clicked.connect(self.estimate)
        self.load_button.clicked.connect(self._ask_load)
        self.save_button.clicked.connect(self._ask_save)
        self._on_switch()
        self._update_buttons()

    def add_to(self, form: Any, after: str) -> None:
        """Put the choice and the section under field ``after`` of a
        :class:`~napari_gpuscope.widgets._controls.ParamForm`; :attr:`title` becomes the
        choice's label there (the dock marks it when drift correction is changed)."""
        form.add_row("", self, after=after)  # inserted under ``after``: the choice goes above
        form.add_row(self.title.text(), self.mode, self.title.toolTip(), after=after)
        self.title = form.main.labels[id(self.mode)]

    # ---------------------------------------------------------------- the mode
    @property
    def current_mode(self) -> str:
        """``"off"``, ``"estimate"`` or ``"trace"``."""
        return str(self.mode.currentData())

    def set_mode(self, mode: str) -> None:
        """Choose a mode (``"trace"`` without a trace is allowed: a run then says so)."""
        if mode not in MODES:
            raise ValueError(f"drift mode must be one of {list(MODES)}, got {mode!r}")
        self.mode.setCurrentIndex(list(MODES).index(mode))

    def _on_mode(self, *_: Any) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            self.switch.value = self.current_mode != "off"
        finally:
            self._syncing = False

    def _on_switch(self, *_: Any) -> None:
        """The parameter changed elsewhere (restored, Reset, a recipe): follow it."""
        if self._syncing:
            return
        on = bool(self.switch.value)
        if on == (self.current_mode != "off"):
            return
        self._syncing = True
        try:
            self.set_mode(("trace" if self.trace is not None else "estimate") if on else "off")
        finally:
            self._syncing = False

    # ---------------------------------------------------------------- the input changes
    def follow_input(self, layer: napari.layers.Layer | None) -> None:
        """A trace belongs to the stack it was estimated on or loaded for: when the input
        becomes another layer the trace is dropped (a run on the new layer estimates its own,
        unless a trace is loaded for it), and the section says so."""
        old = self.trace_layer
        if self.trace is None or old is None or layer is None or _same_layer(old, layer):
            return
        dropped = self.trace_source
        self.trace, self.trace_source, self.trace_layer = None, "", None
        if self.current_mode == "trace":
            self.set_mode("estimate")  # drift correction stays on: the run estimates it
        self.plot.setVisible(False)
        self.info.setText(
            f"The trace {dropped} was dropped: the input is now '{layer.name}'. Runs estimate "
            "its drift; Estimate drift or Load trace... to use a trace of it."
        )
        self._update_buttons()

    def run_source(self) -> str | None:
        """Where a run's drift correction comes from, for its provenance (None: off)."""
        mode = self.current_mode
        if mode == "off":
            return None
        if mode == "estimate" or self.trace is None:
            return "estimated in the run"
        return self.trace_source or "a trace"

    # ---------------------------------------------------------------- a run's trace
    def shifts_for(self, layer: napari.layers.Layer) -> DriftResult | None:
        """The ``drift_shifts`` a run on ``layer`` passes: the trace in *Use the trace below*
        mode, else None (off, or estimated in the run). The trace is passed as the
        :class:`DriftResult` it is, so an estimate keeps its blocks and parameters in the
        run's result: the same facts (and ``drift.csv``) as a recipe run that estimates it
        with those parameters.

        Raises
        ------
        ValueError
            In that mode without a trace, or with a trace of another number of frames.
        """
        if self.current_mode != "trace":
            return None
        if self.trace is None:
            raise ValueError(
                "Drift correction is set to use a trace, but there is none: click 'Estimate "
                "drift', load a saved trace, or choose 'Estimate in the run'."
            )
        self._check_frames(self.trace, layer)
        return self.trace

    @staticmethod
    def _check_frames(trace: DriftResult, layer: napari.layers.Layer | None) -> None:
        frames = _frames(layer)
        if frames is not None and trace.shifts.shape[0] != frames and trace.stopped_early:
            raise ValueError(
                f"The drift trace covers frames 0-{trace.shifts.shape[0] - 1} only (its "
                f"estimate was stopped early) but '{layer.name}' has {frames}: estimate again, "
                "or load a saved trace, to correct every frame."
            )
        if frames is not None and trace.shifts.shape[0] != frames:
            raise ValueError(
                f"The drift trace has {trace.shifts.shape[0]} frames but '{layer.name}' has "
                f"{frames}: a trace needs one (dy, dx) row per frame of the stack it corrects."
            )

    # ---------------------------------------------------------------- estimate
    def estimate(self) -> bool:
        """Run the ``drift`` job on the dock's input, on its runner; return whether it
        started (False: the dock's status says why)."""
        dock = self.dock
        layer, device = dock.input_layer, dock.device
        try:
            if device is None:
                raise ValueError("no usable CUDA GPU (see the device row)")
            if layer is None:
                raise ValueError("no input stack")
            dock.validate_input(layer, check_values=False)
            params: EsrrfParams = dock.params()  # type: ignore[assignment]
            drift = params.drift_params()
            # Channels drift together: channel 0 (the registration's reference) stands for all.
            stack = layer.data
            if layer.ndim == 4:  # channel 0 along the channel axis
                stack = stack[0] if channel_axis(layer) == 0 else stack[:, 0]
            job = dock.spec.job_spec("drift").job_function()(
                stack, params=drift, device=device, name=f"layer '{layer.name}'"
            )
            self.plot.start(f"Estimating: {layer.name}")
            self.plot.setVisible(True)
            dock.start_job(
                "drift",
                job,
                title="The drift estimate",
                description=f"Drift estimate: {layer.name}",
                handlers=JobHandlers(
                    succeeded=lambda result, elapsed: self._on_estimated(
                        result, elapsed, layer, drift, device
                    ),
                    failed=self._on_failed,
                    progressed=self._on_progress,
                    ended=self._on_ended,
                ),
                layer=layer,
                params=drift,
            )
        except JobRefused:
            self._restore_plot()
            return False  # the status says why
        except ValueError as exc:  # ParameterError and InvalidInputError included
            self._restore_plot()
            dock.set_status(f"The drift cannot be estimated: {exc}")
            return False
        self.running = True
        self._update_buttons()
        dock.set_status(f"Estimating the drift of '{layer.name}'...")
        return True

    def _on_progress(self, update: Progress) -> None:
        metrics = update.metrics
        if update.step is not None and "dy" in metrics and "dx" in metrics:
            self.plot.add_block(update.step, metrics["dy"], metrics["dx"])

    def _on_estimated(
        self,
        result: DriftResult,
        elapsed: float,
        layer: napari.layers.Image,
        drift: Any,
        device: str,
    ) -> None:
        record = build_provenance(
            "esrrf",
            drift.to_dict(),
            device=device_label(device),
            input_name=layer.name,
            elapsed_seconds=elapsed,
            result=result.summary(),
        )
        self.set_trace(result, f"estimated from '{layer.name}'", layer, {PROVENANCE_KEY: record})
        if result.stopped_early:  # part of the frames: shown, never used by a run
            self.dock.set_status(
                f"{sentence(result.describe())} Took {elapsed:.2f} s. Runs cannot use a trace "
                "of part of the frames: estimate again (or in the run) to correct them all."
            )
            return
        if self.current_mode == "estimate":
            self.set_mode("trace")  # the run need not estimate it again
        self.dock.set_status(
            f"{sentence(result.describe())} Took {elapsed:.2f} s. Runs with drift correction "
            "on use this trace."
        )

    def _on_failed(self, exc: BaseException) -> None:
        self._restore_plot()
        self.dock.set_status(f"The drift estimate failed: {plain_error_message(exc)}")

    def _on_ended(self) -> None:
        self.running = False
        self._restore_plot()
        self._update_buttons()

    def _restore_plot(self) -> None:
        """Back to the trace kept (a cancelled or refused estimate leaves it unchanged)."""
        if self.running:
            return
        if self.trace is None:
            self.plot.setVisible(False)
        elif self.plot.title.startswith("Estimating"):
            self.plot.show_trace(self.trace, self._plot_title(), self._pixel())

    # ---------------------------------------------------------------- the trace
    def set_trace(
        self,
        trace: DriftResult,
        source: str,
        layer: napari.layers.Image | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Keep ``trace`` (from ``source``, words) as ``layer``'s, plot it, and draw it over
        ``layer``."""
        self.trace, self.trace_source, self.trace_layer = trace, source, layer
        self.info.setText(f"Trace {source}: {trace.describe()}.")
        self.plot.show_trace(trace, self._plot_title(), _pixel_of(layer) or self._pixel())
        self.plot.setVisible(True)
        if layer is not None and layer in self.viewer.layers:
            self._show_layers(trace, layer, metadata or {})
        self._update_buttons()

    def _plot_title(self) -> str:
        source = self.trace_source.replace("estimated from ", "").replace("loaded from ", "")
        return f"Drift trace: {source}" if source else "Drift trace"

    def _pixel(self) -> tuple[float, str] | None:
        return _pixel_of(self.dock.input_layer)

    def _show_layers(
        self, trace: DriftResult, layer: napari.layers.Image, metadata: dict[str, Any]
    ) -> None:
        """The track over the input (and the drift-corrected mean, hidden: it would cover the
        stack), replacing the previous trace's; the input stays selected."""
        for _, old in self._made:
            if old in self.viewer.layers:
                self.viewer.layers.remove(old)
        self._made = []
        for data, kwargs, layer_type in trace.layers(
            layer.name, Geometry.of_layer(layer), metadata
        ):
            if layer_type == "image":
                kwargs["visible"] = False
                kwargs.setdefault("colormap", getattr(layer.colormap, "name", "gray"))
            added = getattr(self.viewer, f"add_{layer_type}")(data, **kwargs)
            self._made.append((layer_type, added))
        self.viewer.layers.selection.active = layer

    def load(self, path: str | Path) -> bool:
        """Load a CSV trace for the input; return whether it was taken (else the dock's status
        says why: an unreadable file, or another number of frames than the input's)."""
        from napari_gpuscope.compute.esrrf import DriftResult

        layer = self.dock.input_layer
        try:
            trace = DriftResult.from_csv(path)
            self._check_frames(trace, layer)
        except Exception as exc:  # a bad file must not take napari down
            self.dock.set_status(
                f"Could not load the drift trace {path}: {plain_error_message(exc)}"
            )
            return False
        name = Path(path).name
        if layer is not None:  # the track starts at the middle of the input's frames
            trace = dataclasses.replace(trace, frame_shape=tuple(np.shape(layer.data)[-2:]))
        record = build_provenance(
            "esrrf",
            {"drift_trace": str(path)},
            device="none (loaded from a file)",
            input_name=getattr(layer, "name", None),
            elapsed_seconds=0.0,
            result=trace.summary(),
        )
        self.set_trace(trace, f"loaded from {name}", layer, {PROVENANCE_KEY: record})
        self.set_mode("trace")
        self.dock.set_status(
            f"Loaded the drift trace {name}: {trace.describe()}. Runs use it (drift correction "
            "set to 'Use the trace below')."
        )
        return True

    def save(self, path: str | Path) -> Path:
        """Write the trace as CSV (px, and the input's unit when it has a physical scale)."""
        if self.trace is None:
            raise ValueError("there is no drift trace to save: estimate or load one first")
        pixel = self._pixel()
        if pixel is None:
            written = self.trace.to_csv(path)
        else:
            written = self.trace.to_csv(path, pixel_size=pixel[0], unit=pixel[1])
        self.dock.set_status(f"Saved the drift trace to {written}.")
        return written

    def _ask_load(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Load drift trace", "", "Drift trace (*.csv);;All files (*)"
        )
        if path:
            self.load(path)

    def _ask_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save drift trace", "drift.csv", "CSV (*.csv)")
        if path:
            try:
                self.save(path)
            except Exception as exc:  # an unwritable folder must not take napari down
                self.dock.set_status(f"Could not save the drift trace: {plain_error_message(exc)}")

    # ---------------------------------------------------------------- a run's reports
    def on_run_progress(self, update: Progress) -> None:
        """A run that estimates its drift: plot its blocks live."""
        if "dy" in update.metrics:
            if not self.plot.isVisible() or not self.plot.title.startswith("Estimating"):
                self.plot.start("Estimating in the run")
                self.plot.setVisible(True)
            self._on_progress(update)

    def on_run_result(self, trace: DriftResult | None, layer: napari.layers.Image) -> None:
        """A run's trace (estimated in it, or the one given): keep and plot it. The run's
        result layers draw its track, so the section's drawn track goes (one path, not
        two over each other)."""
        if trace is None:
            return
        for kind, old in self._made:
            if kind == "tracks" and old in self.viewer.layers:
                self.viewer.layers.remove(old)
        same = self.trace is not None and np.array_equal(trace.shifts, self.trace.shifts)
        if not same:  # estimated in the run: the trace to save or reuse now
            self.trace, self.trace_source = trace, f"estimated in the run on '{layer.name}'"
            self.trace_layer = layer
            self.info.setText(f"Trace {self.trace_source}: {trace.describe()}.")
        self.plot.show_trace(trace, self._plot_title(), _pixel_of(layer))
        self.plot.setVisible(True)
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.save_button.setEnabled(self.trace is not None)
        self.estimate_button.setEnabled(not self.running)
        self.load_button.setEnabled(not self.running)
