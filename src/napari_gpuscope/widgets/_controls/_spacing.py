"""Per-axis spacing weights, filled in from the input layer's scale and kept in step with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magicgui.widgets import FloatSpinBox
from qtpy.QtCore import Signal
from qtpy.QtWidgets import (
    QAbstractSpinBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from superqt.utils import signals_blocked

from napari_gpuscope.dock.connections import Connections
from napari_gpuscope.dock.layers import spacing_from_layer

if TYPE_CHECKING:
    import napari.layers

__all__ = ["SPACING_TOOLTIP", "SpacingRow", "axis_names", "spacing_caption"]

SPACING_TOOLTIP = (
    "How strongly neighbouring pixels are coupled along each axis: x pixel size ÷ step along "
    "that axis, filled in from the layer scale (e.g. 0.1 µm pixels and 0.4 µm z-steps give "
    "z = 0.25) and updated when the scale changes. 0 = planes/frames along that axis are "
    "processed independently (the default for time)."
)
_DEFAULT_AXIS_NAMES = ("x", "y", "z")
"""Names of the trailing axes when a layer has napari's default ("-1", "-2"...) axis labels."""


def axis_names(layer: napari.layers.Layer) -> list[str]:
    """Short display names of the layer's axes: its axis labels, or z/y/x for default labels."""
    labels = [str(label) for label in (getattr(layer, "axis_labels", None) or ())]
    if len(labels) != layer.ndim:
        labels = [str(axis - layer.ndim) for axis in range(layer.ndim)]
    names = []
    for axis, label in enumerate(labels):
        from_end = layer.ndim - 1 - axis
        if label.lstrip("-").isdigit():  # napari's default label: name it by position
            label = (
                _DEFAULT_AXIS_NAMES[from_end]
                if from_end < len(_DEFAULT_AXIS_NAMES)
                else f"axis {axis}"
            )
        names.append(label)
    return names


def spacing_caption(layer: napari.layers.Layer) -> str:
    """What the numbers mean, in plain words, from the layer's own steps, e.g. ``"How much
    each axis is smoothed, x = 1 (pixels 0.1 µm): z 0.2, its steps (0.5 µm) are 5 × longer;
    0 = each frame on its own."``"""
    names, weights = axis_names(layer), spacing_from_layer(layer)
    unit = _unit_of(layer, -1)
    step = abs(float(layer.scale[-1]))
    size = f"{step:g} {unit}".strip() if unit else f"{step:g}, no unit in the layer scale"
    parts = [f"How much each axis is smoothed, x = 1 (pixels {size})"]
    for axis, weight in enumerate(weights):
        if weight in (0.0, 1.0):
            continue
        length = abs(float(layer.scale[axis]))
        steps = f"{length:g} {_unit_of(layer, axis)}".strip()
        ratio = 1.0 / weight
        longer = f"{ratio:.3g} × longer" if ratio > 1 else f"{weight:.3g} × shorter"
        parts.append(f"{names[axis]} {weight:.3g}, its steps ({steps}) are {longer}")
    text = parts[0] + (": " + "; ".join(parts[1:]) if len(parts) > 1 else "")
    if all(weight == 1.0 for weight in weights):
        text += ": the same step along every axis, smoothed alike"
    if 0.0 in weights:
        text += "; 0 = each frame on its own"
    return text + "."


def _unit_of(layer: napari.layers.Layer, axis: int) -> str:
    """The short unit of one axis of the layer's scale ("" when it has none)."""
    units = getattr(layer, "units", None) or ()
    unit = str(units[axis]) if len(units) else ""
    return {"micrometer": "µm", "nanometer": "nm", "pixel": "", "second": "s"}.get(unit, unit)


def _axis_tooltip(name: str, weight: float, step: float, x_step: float) -> str:
    if weight == 0:
        origin = f"0: {name} planes/frames are processed independently (time axis)."
    else:
        origin = f"x pixel size / {name} step = {x_step:g} / {step:g} = {weight:.3g} (layer scale)."
    return (
        f"Coupling weight along {name}. Default {origin} "
        "0 = no smoothing across this axis; 1 = as strong as along x."
    )


class SpacingRow(QWidget):
    """One labelled box per axis of the input layer, holding the spacing weight.

    The boxes are filled from the layer's scale (:func:`spacing_from_layer`) when a layer is
    set, and again whenever that layer's scale, dimensionality, axis labels or units change, so
    they are never stale. The user may edit them.

    Signals
    -------
    changed()
        A box was edited or the boxes were refilled.
    """

    changed = Signal()
    spans_form = True
    """Takes a form's whole width (four axes do not fit beside a label column)."""

    def __init__(self) -> None:
        super().__init__()
        self.setToolTip(SPACING_TOOLTIP)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.title = QLabel("Spacing")
        self.title.setToolTip(SPACING_TOOLTIP)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(1)
        outer = QHBoxLayout()
        outer.addWidget(self.title)
        self._row = QHBoxLayout()
        self._row.setSpacing(3)
        outer.addLayout(self._row, stretch=1)
        column.addLayout(outer)
        # What the numbers are: beside a 0.1 µm layer, "1.000" alone reads as a length.
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        self.caption.setStyleSheet("color: #a0a0a0;")
        self.caption.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        column.addWidget(self.caption)
        self.boxes: list[FloatSpinBox] = []
        self.names: list[str] = []
        self._layer: napari.layers.Layer | None = None
        self._links = Connections()

    def set_layer(self, layer: napari.layers.Layer | None) -> None:
        """Follow ``layer`` (None: no boxes)."""
        if layer is not self._layer:
            self._links.disconnect_all()
            self._layer = layer
            if layer is not None:
                for event in ("scale", "data", "axis_labels", "units"):
                    self._links.connect(getattr(layer.events, event), self.refill)
        self.refill()

    def refill(self, *_: object) -> None:
        """Fill the boxes from the layer's scale again (rebuilt when the axes changed)."""
        layer = self._layer
        if layer is None:
            self._rebuild([])
            self.caption.setText("")
            self.changed.emit()
            return
        names = axis_names(layer)
        if names != self.names:
            self._rebuild(names)
        weights = spacing_from_layer(layer)
        scale = [float(s) for s in layer.scale]
        for axis, (box, weight) in enumerate(zip(self.boxes, weights, strict=True)):
            with signals_blocked(box.native):
                box.value = weight
            box.tooltip = _axis_tooltip(names[axis], weight, scale[axis], scale[-1])
            self._row.itemAt(2 * axis).widget().setToolTip(box.tooltip)
        self.caption.setText(spacing_caption(layer))
        self.changed.emit()

    def _rebuild(self, names: list[str]) -> None:
        while self._row.count():
            widget = self._row.takeAt(0).widget()
            if widget is not None:
                widget.hide()  # off screen now, not only when the deferred delete runs
                widget.deleteLater()
        self.boxes, self.names = [], list(names)
        for axis, name in enumerate(names):
            box = FloatSpinBox(name=f"axis_{axis}", min=0.0, max=100.0, step=0.05)
            # 3 decimals: a weight is a ratio of pixel sizes, 0.1 % is far below their accuracy
            box.native.setDecimals(3)
            box.native.setButtonSymbols(QAbstractSpinBox.ButtonSymbols.NoButtons)
            # napari's style sheet gives spin boxes 70 px plus 20 px of padding: 4 axes would
            # not fit the dock
            box.native.setStyleSheet("QAbstractSpinBox { min-width: 36px; padding: 1px 2px; }")
            box.native.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
            box.changed.connect(lambda *_: self.changed.emit())
            self._row.addWidget(QLabel(name))
            self._row.addWidget(box.native, stretch=1)
            self.boxes.append(box)

    def stop_following(self) -> None:
        """Disconnect from the layer (the dock is closing); the boxes keep their values."""
        self._links.disconnect_all()
        self._layer = None

    def value(self) -> tuple[float, ...]:
        """The weights, one per layer axis."""
        return tuple(float(box.value) for box in self.boxes)
