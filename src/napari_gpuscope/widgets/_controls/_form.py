"""Form rows generated from a parameter model (:meth:`Params.param_info`).

Labels, units, bounds, steps, choices and tooltips come from the model, so a dock never writes
its parameter list again. A :class:`FieldStyle` only changes how a field is *shown* (a slider, a
narrower range for the slider, "auto" for None).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from magicgui.widgets import CheckBox, ComboBox, FloatSlider, FloatSpinBox, SpinBox
from magicgui.widgets.bases import ValueWidget
from qtpy.QtCore import QEvent, Signal
from qtpy.QtWidgets import QComboBox, QFormLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget
from superqt import QCollapsible

from napari_gpuscope.compute.params import ParamInfo, Params
from napari_gpuscope.widgets._controls._wrapped_label import fit_wrapped_height

__all__ = ["FieldStyle", "ParamForm", "field_tooltip"]

_UI_LIMIT = 1e9
"""Spin boxes show at most this magnitude (the box would be as wide as its widest value)."""


@dataclass(frozen=True)
class FieldStyle:
    """How one parameter is shown (the model still decides what is valid).

    Attributes
    ----------
    slider : bool
        A slider with an editable readout instead of a spin box (floats).
    minimum, maximum : float, optional
        A narrower range for the control than the model allows (e.g. a slider's useful range).
    auto_text : str, optional
        For an optional number: the text shown at the control's minimum, which means None
        (e.g. ``"auto"``: estimate from the image).
    """

    slider: bool = False
    minimum: float | None = None
    maximum: float | None = None
    auto_text: str | None = None


def field_tooltip(info: ParamInfo) -> str:
    """The tooltip of a parameter: its help, unit and valid range, in sentences."""
    text = info.help.strip()
    text = text[:1].upper() + text[1:]
    if not text.endswith("."):
        text += "."
    facts = [f"unit: {info.unit}"] if info.unit else []
    if info.kind in ("float", "int", "floats") and info.range_text():
        facts.append(f"valid: {info.range_text()}")
    return text + (f" ({'; '.join(facts)})" if facts else "")


def _decimals(step: float | None) -> int:
    """Two significant digits below the step (4 decimals without one: e.g. a fitted gain)."""
    return 4 if not step else max(2, min(8, 2 - math.floor(math.log10(step))))


def _make_widget(info: ParamInfo, style: FieldStyle) -> ValueWidget:
    """The magicgui widget of one parameter."""
    tooltip = field_tooltip(info)
    if info.kind == "bool":
        return CheckBox(text=info.label, value=bool(info.default), tooltip=tooltip)
    if info.kind == "str":
        choices = [(label, value) for value, label in (info.choices or {}).items()]
        combo = ComboBox(choices=choices, value=info.default, tooltip=tooltip)
        native: QComboBox = combo.native
        native.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        native.setMinimumContentsLength(10)
        return combo
    low = style.minimum if style.minimum is not None else info.minimum
    high = style.maximum if style.maximum is not None else info.maximum
    low = -_UI_LIMIT if low is None else max(low, -_UI_LIMIT)
    high = _UI_LIMIT if high is None else min(high, _UI_LIMIT)
    default = info.default if info.default is not None else low
    if info.kind == "int" and style.auto_text:
        # magicgui's SpinBox (superqt's QLargeIntSpinBox) shows no special value text: its
        # minimum read "0" where it means "auto". A float box without decimals shows it;
        # ParamForm.value gives the int back.
        widget = FloatSpinBox(value=float(default), min=low, max=high, step=1, tooltip=tooltip)
        widget.native.setDecimals(0)
    elif info.kind == "int":
        widget = SpinBox(value=int(default), min=int(low), max=int(high), tooltip=tooltip)
    elif style.slider:
        step = info.step or (high - low) / 100
        widget = FloatSlider(value=default, min=low, max=high, step=step, tooltip=tooltip)
    else:
        step = info.step or 0.1
        widget = FloatSpinBox(value=default, min=low, max=high, step=step, tooltip=tooltip)
        widget.native.setDecimals(_decimals(info.step))
        if info.unit:
            widget.native.setSuffix(f" {info.unit}")
    if style.auto_text and hasattr(widget.native, "setSpecialValueText"):
        widget.native.setSpecialValueText(style.auto_text)
    # A field takes the width the dock gives it; its widest value must not widen the dock.
    widget.native.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
    widget.native.setMinimumWidth(80)
    return widget


class _Rows(QWidget):
    """A two-column form whose rows (label and field) can be hidden together."""

    def __init__(self) -> None:
        super().__init__()
        self.layout_ = QFormLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.labels: dict[int, QLabel] = {}
        self.order: list[QWidget] = []

    def add(self, label: str, field: QWidget, tooltip: str = "", *, row: int | None = None) -> None:
        row = len(self.order) if row is None else row
        if getattr(field, "spans_form", False):  # a wide control with its own title label
            self.layout_.insertRow(row, field)
            label_widget = field.title
        else:
            label_widget = QLabel(label)
            label_widget.setToolTip(tooltip or field.toolTip())
            self.layout_.insertRow(row, label_widget, field)
        self.order.insert(row, field)
        self.labels[id(field)] = label_widget

    def event(self, event: QEvent) -> bool:
        """Lay out, then hold every word-wrapped label field at the height its text needs at
        its width (see :class:`._wrapped_label.WrappedLabel`: the form sizes such a row for the
        label's preferred width and then gives it the narrower field column, cutting lines)."""
        handled = super().event(event)
        if event.type() in (QEvent.Type.LayoutRequest, QEvent.Type.Resize):
            for field in self.order:
                if isinstance(field, QLabel) and field.wordWrap():
                    fit_wrapped_height(field)
        return handled


class ParamForm(QWidget):
    """Rows for the fields of a :class:`~napari_gpuscope.compute.params.Params` model.

    Fields marked ``advanced`` go to a collapsed "Advanced" section. Fields of kind
    ``"floats"`` (per-axis values) have no generic control: pass a widget in ``custom`` (one
    with ``spans_form = True`` and a ``title`` label takes the whole width of the form).

    Parameters
    ----------
    params_class : type of Params
        The model.
    fields : iterable of str, optional
        The fields to show (default: every field); the others keep their defaults.
    styles : mapping of str to FieldStyle, optional
        Presentation of single fields.
    custom : mapping of str to QWidget, optional
        Widgets that stand for fields at their place in the form (labelled from the model);
        their values are read by the dock, not by :meth:`values`.
    advanced_title : str
        Title of the collapsible section.

    Signals
    -------
    changed(str)
        The name of a generated field whose value changed.

    Examples
    --------
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> form = ParamForm(TVParams, fields=["strength", "tolerance"])  # doctest: +SKIP
    >>> TVParams(**form.values())  # doctest: +SKIP
    TVParams(weight=None, strength=1.0, ...)
    """

    changed = Signal(str)

    def __init__(
        self,
        params_class: type[Params],
        fields: Iterable[str] | None = None,
        *,
        styles: Mapping[str, FieldStyle] | None = None,
        custom: Mapping[str, QWidget] | None = None,
        advanced_title: str = "Advanced",
    ) -> None:
        super().__init__()
        self.params_class = params_class
        self.styles = dict(styles or {})
        custom = dict(custom or {})
        wanted = set(fields) if fields is not None else set(params_class.names()) | set(custom)
        self.widgets: dict[str, ValueWidget] = {}
        self.main = _Rows()
        self.advanced_rows = _Rows()
        self.advanced = QCollapsible(advanced_title, expandedIcon="▾", collapsedIcon="▸")
        self.advanced.addWidget(self.advanced_rows)
        # A collapsed section keeps its widgets "visible" at zero height: disabled, Tab skips them.
        self.advanced_rows.setEnabled(False)
        self.advanced.toggled.connect(self.advanced_rows.setEnabled)
        self._rows_of: dict[str, _Rows] = {}
        self.custom: dict[str, QWidget] = {}
        self.words: dict[str, Callable[[object], str]] = {}
        """How a field's value is said where its own control is not the generated one (e.g.
        a checkbox driven by a choice of the dock's): ``{name: value -> words}``."""
        self._units = {info.name: info.unit for info in params_class.param_info() if info.unit}
        self._ints = {info.name for info in params_class.param_info() if info.kind == "int"}
        for info in params_class.param_info():
            if info.name not in wanted and info.name not in custom:
                continue
            rows = self.advanced_rows if info.advanced else self.main
            self._rows_of[info.name] = rows
            if info.name in custom:
                self.custom[info.name] = custom[info.name]
                rows.add(info.label, custom[info.name], field_tooltip(info))
                continue
            widget = _make_widget(info, self.styles.get(info.name, FieldStyle()))
            widget.changed.connect(lambda *_, name=info.name: self.changed.emit(name))
            self.widgets[info.name] = widget
            rows.add("" if info.kind == "bool" else info.label, widget.native)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.main)
        layout.addWidget(self.advanced)
        self.advanced.setVisible(bool(self.advanced_rows.order))

    # -- rows ---------------------------------------------------------------------------------
    def add_row(
        self, label: str, widget: QWidget, tooltip: str = "", *, after: str | None = None
    ) -> None:
        """Add a row of the dock's own: after field ``after``, first when ``after`` is ``""``,
        last when it is None, last in the advanced section when it is ``"advanced"``."""
        if after == "advanced":
            self.advanced_rows.add(label, widget, tooltip)
            self.advanced.setVisible(True)
        elif after is None:
            self.main.add(label, widget, tooltip)
        elif after == "":
            self.main.add(label, widget, tooltip, row=0)
        else:
            rows = self._rows_of[after]
            rows.add(label, widget, tooltip, row=rows.order.index(self._field_widget(after)) + 1)

    def set_row_visible(self, name: str, visible: bool) -> None:
        """Show or hide the row of field ``name`` (label included)."""
        field = self._field_widget(name)
        field.setVisible(visible)
        self._rows_of[name].labels[id(field)].setVisible(visible)

    def set_auto_text(self, name: str, text: str | None) -> None:
        """Let field ``name`` mean None at its minimum, shown as ``text`` (None: no longer),
        e.g. camera fields that are estimated together with an "auto" gain."""
        style = dataclasses.replace(self.styles.get(name, FieldStyle()), auto_text=text)
        self.styles[name] = style
        self.widgets[name].native.setSpecialValueText(text or "")

    def label_of(self, name: str) -> QWidget:
        """The label of field ``name`` (for a checkbox, the checkbox, which carries its text)."""
        field = self._field_widget(name)
        label = self._rows_of[name].labels[id(field)]
        return field if isinstance(label, QLabel) and not label.text() else label

    def _field_widget(self, name: str) -> QWidget:
        return self.widgets[name].native if name in self.widgets else self.custom[name]

    # -- values -------------------------------------------------------------------------------
    def value(self, name: str) -> object:
        """The value of a generated field (None where the control shows its "auto" text)."""
        widget = self.widgets[name]
        value = widget.value
        style = self.styles.get(name, FieldStyle())
        if style.auto_text and value <= widget.min:
            return None
        return round(value) if name in self._ints else value

    def value_text(self, name: str, value: object) -> str:
        """``value`` of field ``name`` in the words its control shows: a choice's label, "on"
        or "off" for a checkbox, the "auto" text for None, a number with its unit (the
        "changed from the defaults" row says values as the controls do, not as Python does).

        Examples
        --------
        >>> from napari_gpuscope.compute.tv import TVParams
        >>> form = ParamForm(TVParams, fields=["nonnegative", "strength"])  # doctest: +SKIP
        >>> form.value_text("nonnegative", True), form.value_text("strength", 1.5)  # doctest: +SKIP
        ('on', '1.5')
        """
        words = self.words.get(name)
        if words is not None:
            return words(value)
        style = self.styles.get(name, FieldStyle())
        if value is None:
            return style.auto_text or "none"
        if isinstance(value, bool):
            return "on" if value else "off"
        widget = self.widgets.get(name)
        if isinstance(widget, ComboBox):
            native: QComboBox = widget.native
            for index in range(native.count()):
                if native.itemData(index) == value:
                    return native.itemText(index)
        text = f"{value:g}" if isinstance(value, float) else str(value)
        unit = self._units.get(name, "")
        return f"{text} {unit}" if unit and isinstance(value, int | float) else text

    def values(self) -> dict[str, object]:
        """Every generated field's value, by name."""
        return {name: self.value(name) for name in self.widgets}

    def set_values(self, values: Mapping[str, object]) -> None:
        """Set generated fields from a mapping (None shows "auto"); other keys are ignored."""
        for name, value in values.items():
            widget = self.widgets.get(name)
            if widget is None:
                continue
            widget.value = widget.min if value is None else value
