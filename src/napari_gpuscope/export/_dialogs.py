"""Small Qt dialogs for the export commands: file pickers and option forms.

Every function returns ``None`` when the user cancels, so callers never see Qt exceptions.
Tests replace :func:`QFileDialog.getSaveFileName` or drive the option dialogs directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qtpy.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.export.tiff import DTYPES, UINT16_SCALINGS

__all__ = [
    "ScreenshotOptions",
    "ScreenshotOptionsDialog",
    "TiffOptions",
    "TiffOptionsDialog",
    "ask_save_path",
]

MAX_SCALE_FACTOR = 8.0

_SCALING_TIPS = {
    "clip": "Round to integers and clip to 0..65535; intensity units are kept.",
    "minmax": (
        "Map the data range linearly onto 0..65535; the slope/offset calibration is stored "
        "so intensities can be recovered."
    ),
}


def _parent() -> QWidget | None:
    return QApplication.activeWindow()


def ask_save_path(caption: str, suggested: Path, file_filter: str, suffix: str) -> Path | None:
    """Ask for an output file; ``None`` when cancelled. ``suffix`` is added when missing."""
    name, _ = QFileDialog.getSaveFileName(_parent(), caption, str(suggested), file_filter)
    if not name:
        return None
    path = Path(name)
    return path if path.suffix else path.with_suffix(suffix)


class _OptionsDialog(QDialog):
    """A small modal form with OK/Cancel whose ``options()`` are returned by :meth:`ask`."""

    def __init__(self, defaults: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)

    def _add_buttons(self, form: QFormLayout) -> None:
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def options(self) -> Any:
        """The values currently shown."""
        raise NotImplementedError

    @classmethod
    def ask(cls, defaults: Any) -> Any:
        """Show the dialog modally; ``None`` when cancelled."""
        dialog = cls(defaults, _parent())
        try:
            accepted = dialog.exec() == QDialog.DialogCode.Accepted
            return dialog.options() if accepted else None
        finally:
            dialog.deleteLater()


@dataclass(frozen=True)
class ScreenshotOptions:
    """Choices of the screenshot options dialog."""

    scale: float = 1.0
    colorbar: bool = False
    scale_bar: bool = True


class ScreenshotOptionsDialog(_OptionsDialog):
    """Scale factor, scale bar and colorbar for :func:`export_screenshot`."""

    def __init__(self, defaults: ScreenshotOptions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Screenshot options")
        self.scale_spin = QDoubleSpinBox()
        self.scale_spin.setRange(0.25, MAX_SCALE_FACTOR)
        self.scale_spin.setSingleStep(0.5)
        self.scale_spin.setDecimals(2)
        self.scale_spin.setValue(defaults.scale)
        self.scale_spin.setToolTip(
            "Resolution factor: the PNG has this many times the canvas pixels."
        )
        self.scale_bar_check = QCheckBox("Show scale bar")
        self.scale_bar_check.setChecked(defaults.scale_bar)
        self.colorbar_check = QCheckBox("Show colorbar on result layers")
        self.colorbar_check.setChecked(defaults.colorbar)

        form = QFormLayout()
        form.addRow("Scale factor", self.scale_spin)
        form.addRow(self.scale_bar_check)
        form.addRow(self.colorbar_check)
        self._add_buttons(form)

    def options(self) -> ScreenshotOptions:
        """The values currently shown."""
        return ScreenshotOptions(
            scale=self.scale_spin.value(),
            colorbar=self.colorbar_check.isChecked(),
            scale_bar=self.scale_bar_check.isChecked(),
        )


@dataclass(frozen=True)
class TiffOptions:
    """Choices of the TIFF options dialog."""

    dtype: str = "float32"
    uint16_scaling: str = "clip"


class TiffOptionsDialog(_OptionsDialog):
    """Sample type and uint16 scaling for :func:`save_layer_tiff`."""

    def __init__(self, defaults: TiffOptions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("TIFF options")
        self.dtype_combo = QComboBox()
        self.dtype_combo.addItems(DTYPES)
        self.dtype_combo.setCurrentText(defaults.dtype)
        self.scaling_combo = QComboBox()
        for index, name in enumerate(UINT16_SCALINGS):
            self.scaling_combo.addItem(name)
            self.scaling_combo.setItemData(index, _SCALING_TIPS[name], _tooltip_role())
        self.scaling_combo.setCurrentText(defaults.uint16_scaling)
        self.dtype_combo.currentTextChanged.connect(self._update_enabled)
        self._update_enabled(self.dtype_combo.currentText())

        form = QFormLayout()
        form.addRow("Sample type", self.dtype_combo)
        form.addRow("uint16 scaling", self.scaling_combo)
        self._add_buttons(form)

    def _update_enabled(self, dtype: str) -> None:
        # Scaling only matters for integer output.
        self.scaling_combo.setEnabled(dtype == "uint16")

    def options(self) -> TiffOptions:
        """The values currently shown."""
        return TiffOptions(
            dtype=self.dtype_combo.currentText(),
            uint16_scaling=self.scaling_combo.currentText(),
        )


def _tooltip_role() -> int:
    from qtpy.QtCore import Qt

    return Qt.ItemDataRole.ToolTipRole
