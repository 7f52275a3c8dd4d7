"""The eSRRF dock's "Load trace..." / "Save trace...": drift traces as CSV files with units
(:meth:`~napari_gpuscope.compute.esrrf.DriftResult.to_csv` / ``from_csv``), a loaded trace
checked against the input's number of frames and told to the drift section (:mod:`.drift`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from qtpy.QtCore import QObject, Signal
from qtpy.QtWidgets import QFileDialog, QWidget

from napari_gpuscope.dock.messages import plain_error_message
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets.esrrf.drift_trace import check_frames, pixel_of

if TYPE_CHECKING:
    from napari_gpuscope.compute.esrrf import DriftResult
    from napari_gpuscope.dock.context import DockContext

__all__ = ["TraceFiles"]


class TraceFiles(QObject):
    """Loads and saves drift traces for the dock's input.

    Parameters
    ----------
    parent : QWidget
        The drift section (the file dialogs' parent).
    dock : DockContext
        The dock as its parts see it (its input, its status line).

    Signals
    -------
    loaded(DriftResult, str, Layer or None, dict)
        A trace was loaded: the trace, where it came from (words), the layer it is for and
        its layers' metadata (the provenance).
    """

    loaded = Signal(object, str, object, object)

    def __init__(self, parent: QWidget, dock: DockContext) -> None:
        super().__init__(parent)
        self.dock = dock
        self.widget = parent

    def load(self, path: str | Path) -> bool:
        """Load a CSV trace for the input; return whether it was taken (else the dock's status
        says why: an unreadable file, or another number of frames than the input's)."""
        from napari_gpuscope.compute.esrrf import DriftResult

        layer = self.dock.input_layer
        try:
            trace = DriftResult.from_csv(path)
            check_frames(trace, layer)
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
        self.loaded.emit(trace, f"loaded from {name}", layer, {PROVENANCE_KEY: record})
        self.dock.set_status(
            f"Loaded the drift trace {name}: {trace.describe()}. Runs use it (drift correction "
            "set to 'Use the trace below')."
        )
        return True

    def save(self, trace: DriftResult | None, path: str | Path) -> Path:
        """Write ``trace`` as CSV (px, and the input's unit when it has a physical scale)."""
        if trace is None:
            raise ValueError("there is no drift trace to save: estimate or load one first")
        pixel = pixel_of(self.dock.input_layer)
        if pixel is None:
            written = trace.to_csv(path)
        else:
            written = trace.to_csv(path, pixel_size=pixel[0], unit=pixel[1])
        self.dock.set_status(f"Saved the drift trace to {written}.")
        return written

    def ask_load(self) -> None:
        """Ask for a CSV file and load it."""
        path, _ = QFileDialog.getOpenFileName(
            self.widget, "Load drift trace", "", "Drift trace (*.csv);;All files (*)"
        )
        if path:
            self.load(path)

    def ask_save(self, trace: DriftResult | None) -> None:
        """Ask where, and save ``trace`` there."""
        path, _ = QFileDialog.getSaveFileName(
            self.widget, "Save drift trace", "drift.csv", "CSV (*.csv)"
        )
        if path:
            try:
                self.save(trace, path)
            except Exception as exc:  # an unwritable folder must not take napari down
                self.dock.set_status(f"Could not save the drift trace: {plain_error_message(exc)}")
