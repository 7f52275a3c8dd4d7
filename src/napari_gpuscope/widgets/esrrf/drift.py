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

The section is the panel: the choice, the buttons, the trace kept and its plot. The estimate
runs in :class:`~.drift_estimate.DriftEstimate`, the files are
:class:`~.drift_files.TraceFiles`'s, the stack's facts and the trace's drawn layers
:mod:`.drift_trace`'s; they tell the section what happened by signals.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.dock.messages import sentence
from napari_gpuscope.widgets._controls._plot import theme_colors
from napari_gpuscope.widgets.esrrf.drift_estimate import DriftEstimate
from napari_gpuscope.widgets.esrrf.drift_files import TraceFiles
from napari_gpuscope.widgets.esrrf.drift_plot import DriftPlot
from napari_gpuscope.widgets.esrrf.drift_trace import (
    TraceLayers,
    channel_axis,
    check_frames,
    layer_unit,
    pixel_of,
    same_layer,
)

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.esrrf import DriftResult
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
        self.drawn = TraceLayers(self, self.viewer)
        self.estimator = DriftEstimate(self, dock)
        self.files = TraceFiles(self, dock)
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
        self.load_button.clicked.connect(self.files.ask_load)
        self.save_button.clicked.connect(lambda: self.files.ask_save(self.trace))
        self.estimator.starting.connect(self._on_starting)
        self.estimator.refused.connect(self._restore_plot)
        self.estimator.started.connect(self._on_started)
        self.estimator.progressed.connect(self._on_progress)
        self.estimator.estimated.connect(self._on_estimated)
        self.estimator.failed.connect(self._restore_plot)
        self.estimator.ended.connect(self._on_ended)
        self.files.loaded.connect(self._on_loaded)
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
        if self.trace is None or old is None or layer is None or same_layer(old, layer):
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
        check_frames(self.trace, layer)
        return self.trace

    # ---------------------------------------------------------------- estimate
    def estimate(self) -> bool:
        """Run the ``drift`` job on the dock's input, on its runner; return whether it
        started (False: the dock's status says why)."""
        return self.estimator.start()

    def _on_starting(self, name: str) -> None:
        self.plot.start(f"Estimating: {name}")
        self.plot.setVisible(True)

    def _on_started(self, name: str) -> None:
        self.running = True
        self._update_buttons()
        self.dock.set_status(f"Estimating the drift of '{name}'...")

    def _on_progress(self, update: Progress) -> None:
        metrics = update.metrics
        if update.step is not None and "dy" in metrics and "dx" in metrics:
            self.plot.add_block(update.step, metrics["dy"], metrics["dx"])

    def _on_estimated(
        self,
        result: DriftResult,
        elapsed: float,
        layer: napari.layers.Image,
        metadata: dict[str, Any],
    ) -> None:
        self.set_trace(result, f"estimated from '{layer.name}'", layer, metadata)
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
            self.plot.show_trace(self.trace, self._plot_title(), pixel_of(self.dock.input_layer))

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
        self.plot.show_trace(
            trace, self._plot_title(), pixel_of(layer) or pixel_of(self.dock.input_layer)
        )
        self.plot.setVisible(True)
        if layer is not None and layer in self.viewer.layers:
            self.drawn.show(trace, layer, metadata or {})
        self._update_buttons()

    def _plot_title(self) -> str:
        source = self.trace_source.replace("estimated from ", "").replace("loaded from ", "")
        return f"Drift trace: {source}" if source else "Drift trace"

    def load(self, path: str | Path) -> bool:
        """Load a CSV trace for the input; return whether it was taken (else the dock's status
        says why: an unreadable file, or another number of frames than the input's)."""
        return self.files.load(path)

    def _on_loaded(
        self,
        trace: DriftResult,
        source: str,
        layer: napari.layers.Image | None,
        metadata: dict[str, Any],
    ) -> None:
        self.set_trace(trace, source, layer, metadata)
        self.set_mode("trace")

    def save(self, path: str | Path) -> Path:
        """Write the trace as CSV (px, and the input's unit when it has a physical scale)."""
        return self.files.save(self.trace, path)

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
        self.drawn.remove_track()
        same = self.trace is not None and np.array_equal(trace.shifts, self.trace.shifts)
        if not same:  # estimated in the run: the trace to save or reuse now
            self.trace, self.trace_source = trace, f"estimated in the run on '{layer.name}'"
            self.trace_layer = layer
            self.info.setText(f"Trace {self.trace_source}: {trace.describe()}.")
        self.plot.show_trace(trace, self._plot_title(), pixel_of(layer))
        self.plot.setVisible(True)
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.save_button.setEnabled(self.trace is not None)
        self.estimate_button.setEnabled(not self.running)
        self.load_button.setEnabled(not self.running)
