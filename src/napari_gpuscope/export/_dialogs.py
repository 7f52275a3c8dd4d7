"""Small Qt dialogs for the export commands: file pickers and option forms.

Every function returns ``None`` when the user cancels, so callers never see Qt exceptions.
Tests replace :func:`QFileDialog.getSaveFileName` or drive the option dialogs directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from qtpy.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.export._panels import figure_panels, theme_name
from napari_gpuscope.export.figure import (
    DEFAULT_DPI,
    DPI_RANGE,
    MAX_ZOOM,
    FigureOptions,
    plan_figure,
)
from napari_gpuscope.export.tiff_samples import DTYPES, UINT16_SCALINGS, TiffOptions

if TYPE_CHECKING:
    from napari.viewer import Viewer

    from napari_gpuscope.compute.params import Params

__all__ = [
    "FigureOptionsDialog",
    "TiffOptionsDialog",
    "ask_save_path",
    "napari_stylesheet",
]

_SCALING_TIPS = {
    "clip": "Round to integers and clip to 0..65535; intensity units are kept.",
    "minmax": (
        "Map the data range linearly onto 0..65535; the slope/offset calibration is stored "
        "so intensities can be recovered."
    ),
}


def _parent() -> QWidget | None:
    return QApplication.activeWindow()


def napari_stylesheet(viewer: Viewer | None = None) -> str:
    """The stylesheet napari gives its own window for the viewer's theme and font size.

    ``viewer.theme`` wins over the settings (a viewer can have its own theme); ``"system"``
    resolves to the light or dark theme the system uses.
    """
    from napari.qt import get_stylesheet
    from napari.settings import get_settings

    font_size = f"{get_settings().appearance.font_size}pt"
    return get_stylesheet(theme_name(viewer), extra_variables={"font_size": font_size})


def ask_save_path(caption: str, suggested: Path, file_filter: str, suffix: str) -> Path | None:
    """Ask for an output file; ``None`` when cancelled. ``suffix`` is added when missing."""
    name, _ = QFileDialog.getSaveFileName(_parent(), caption, str(suggested), file_filter)
    if not name:
        return None
    path = Path(name)
    return path if path.suffix else path.with_suffix(suffix)


class _OptionsDialog(QDialog):
    """A small modal form with OK/Cancel, themed like napari, returning ``options()``."""

    def __init__(self, parent: QWidget | None = None, viewer: Viewer | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet(napari_stylesheet(viewer))

    def _add_buttons(self, form: QFormLayout) -> None:
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.buttons)

    def options(self) -> Params:
        """The values currently shown."""
        raise NotImplementedError

    @classmethod
    def ask(cls, defaults: Params, viewer: Viewer | None = None) -> Params | None:
        """Show the dialog modally; ``None`` when cancelled."""
        dialog = cls(defaults, _parent(), viewer=viewer)
        try:
            accepted = dialog.exec() == QDialog.DialogCode.Accepted
            return dialog.options() if accepted else None
        finally:
            dialog.deleteLater()


class FigureOptionsDialog(_OptionsDialog):
    """Zoom, DPI or print width, titles, scale bar and colorbar for a figure export.

    The pixel size follows from the data and the zoom; DPI and print width are two views of one
    choice, so editing one updates the other. The last edited one is what :meth:`options`
    returns. A line below shows the resulting pixel and print size (from :func:`plan_figure`).
    """

    def __init__(
        self,
        defaults: FigureOptions,
        parent: QWidget | None = None,
        *,
        viewer: Viewer | None = None,
    ) -> None:
        super().__init__(parent, viewer)
        self.setWindowTitle("Export figure")
        self.setMinimumWidth(440)
        self._viewer = viewer
        self._by_width = defaults.width_mm is not None
        self._updating = False
        self.zoom_spin = QSpinBox()
        # 0 shows "auto": the smallest zoom that makes the figure publication-size.
        self.zoom_spin.setRange(0, MAX_ZOOM)
        self.zoom_spin.setSpecialValueText("auto")
        self.zoom_spin.setSuffix(" ×")
        self.zoom_spin.setValue(0 if defaults.zoom is None else int(defaults.zoom))
        self.zoom_spin.setToolTip(
            "Each data pixel becomes zoom × zoom pixels of the figure (square blocks, never "
            "interpolated); auto: the smallest zoom that makes the figure publication-size, "
            "whatever the viewer's zoom and however small the data."
        )
        self.dpi_spin = QDoubleSpinBox()
        self.dpi_spin.setRange(*DPI_RANGE)
        self.dpi_spin.setDecimals(0)
        self.dpi_spin.setSuffix(" dpi")
        self.dpi_spin.setValue(DEFAULT_DPI if defaults.dpi is None else defaults.dpi)
        self.dpi_spin.setToolTip("Resolution written to the PNG; the print size follows.")
        self.width_spin = QDoubleSpinBox()
        self.width_spin.setRange(1.0, 10_000.0)
        self.width_spin.setDecimals(1)
        self.width_spin.setSuffix(" mm")
        self.width_spin.setToolTip("Print width; the DPI follows from the figure's pixels.")
        if defaults.width_mm is not None:
            self.width_spin.setValue(defaults.width_mm)
        self.titles_check = QCheckBox("Panel titles (layer names)")
        self.titles_check.setChecked(
            defaults.titles if defaults.titles is not None else self._several_panels()
        )
        self.scale_bar_check = QCheckBox("Scale bar")
        self.scale_bar_check.setChecked(defaults.scale_bar)
        self.colorbar_check = QCheckBox("Colorbar with intensity unit")
        self.colorbar_check.setChecked(defaults.colorbar)
        self.size_label = QLabel()
        self.size_label.setWordWrap(True)

        form = QFormLayout()
        form.addRow("Zoom", self.zoom_spin)
        form.addRow("Resolution", self.dpi_spin)
        form.addRow("Print width", self.width_spin)
        form.addRow(self.titles_check)
        form.addRow(self.scale_bar_check)
        form.addRow(self.colorbar_check)
        form.addRow(self.size_label)
        self._add_buttons(form)

        self.dpi_spin.valueChanged.connect(lambda _: self._set_driver(by_width=False))
        self.width_spin.valueChanged.connect(lambda _: self._set_driver(by_width=True))
        for check in (self.titles_check, self.scale_bar_check, self.colorbar_check):
            check.toggled.connect(self._update)
        self.zoom_spin.valueChanged.connect(self._update)
        self._update()

    def _several_panels(self) -> bool:
        if self._viewer is None:
            return False
        try:
            return len(figure_panels(self._viewer)) > 1
        except ValueError:
            return False

    def _set_driver(self, *, by_width: bool) -> None:
        if self._updating:
            return
        self._by_width = by_width
        self._update()

    def _update(self, *_: object) -> None:
        """Refresh the linked field and the size line from the plan."""
        if self._viewer is None:
            self.size_label.setText("")
            return
        try:
            plan = plan_figure(self._viewer, self.options())
        except ValueError as exc:
            self.size_label.setText(str(exc))
            self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
            return
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)
        self._updating = True
        try:
            if self._by_width:
                self.dpi_spin.setValue(plan.dpi)
            else:
                self.width_spin.setValue(plan.width_mm)
        finally:
            self._updating = False
        text = (
            f"{plan.width} × {plan.height} px, {plan.width_mm:.1f} × "
            f"{plan.height_mm:.1f} mm at {plan.dpi:.0f} dpi"
        )
        if plan.data_shape is not None:
            panels = "1 panel" if plan.panels == 1 else f"{plan.panels} panels"
            text += (
                f"\n{panels} of {plan.data_shape[1]} × {plan.data_shape[0]} data pixels, "
                f"each shown as {plan.zoom} × {plan.zoom} pixels"
            )
        for note in plan.notes:
            text += f"\n{note}"
        self.size_label.setText(text)

    def options(self) -> FigureOptions:
        """The values currently shown."""
        return FigureOptions(
            zoom=self.zoom_spin.value() or None,
            dpi=None if self._by_width else self.dpi_spin.value(),
            width_mm=self.width_spin.value() if self._by_width else None,
            colorbar=self.colorbar_check.isChecked(),
            scale_bar=self.scale_bar_check.isChecked(),
            titles=self.titles_check.isChecked(),
        )


class TiffOptionsDialog(_OptionsDialog):
    """Sample type and uint16 scaling for :func:`save_layer_tiff`."""

    def __init__(
        self, defaults: TiffOptions, parent: QWidget | None = None, *, viewer: Viewer | None = None
    ) -> None:
        super().__init__(parent, viewer)
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
