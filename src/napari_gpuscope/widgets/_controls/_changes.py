"""Which parameters differ from their defaults, shown in the form, with a one-click reset.

Settings are restored from the last session (a sensitivity of 4 from yesterday's preview test
becomes today's Run value); the row says so, the changed fields' labels are marked, and its
button restores the defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from qtpy.QtWidgets import QHBoxLayout, QPushButton, QSizePolicy, QWidget

from napari_gpuscope.widgets._controls._wrapped_label import WrappedLabel

__all__ = ["CHANGED_COLOUR", "ChangesRow", "differs"]

CHANGED_COLOUR = "#e0a030"
"""Labels of fields that differ from their defaults (napari's dark and light themes)."""
_SHOWN = 3


def differs(value: object, default: object) -> bool:
    """Whether a control's value is not the default (floats to the precision a box shows).

    Examples
    --------
    >>> differs(0.0010000000001, 1e-3), differs(4.0, 1.0), differs(None, None)
    (False, True, False)
    """
    if isinstance(value, float) and isinstance(default, float):
        return not math.isclose(value, default, rel_tol=1e-6, abs_tol=1e-12)
    return value != default


def _short(value: object, none_text: str | None = None) -> str:
    if value is None and none_text:
        return none_text  # what the control shows for None, e.g. "auto"
    return f"{value:g}" if isinstance(value, float) else str(value)


class ChangesRow(QWidget):
    """ "Changed from the defaults: Sensitivity 4 (default 1), ... [Reset]"; hidden when none.

    Parameters
    ----------
    reset : callable
        What the button does (the dock's reset to defaults).
    words : callable, optional
        ``words(name, value)``: a value as its control says it (``ParamForm.value_text``: "on",
        a choice's label, "auto", a unit), so the row uses the controls' words, not Python's
        ("Drift correction True (default False)" was shown beside a choice saying "Off").
    """

    def __init__(
        self, reset: Callable[[], None], words: Callable[[str, object], str] | None = None
    ) -> None:
        super().__init__()
        self.words = words
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.text = WrappedLabel("")
        self.text.setStyleSheet(f"color: {CHANGED_COLOUR};")
        self.text.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.button = QPushButton("Reset")
        self.button.setToolTip("Set every parameter to its default and forget the saved settings")
        self.button.clicked.connect(lambda *_: reset())
        layout.addWidget(self.text, stretch=1)
        layout.addWidget(self.button)
        self.changed: list[str] = []
        self.setVisible(False)

    def show_changes(
        self,
        labels: Mapping[str, str],
        values: Mapping[str, object],
        defaults: Mapping[str, object],
        none_texts: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Show the fields whose value differs from the default; returns their names.
        ``none_texts`` says how a field's control shows None (``"auto"``), so the row uses the
        control's word, not Python's."""
        autos = none_texts or {}
        said = self.words or (lambda name, value: _short(value, autos.get(name)))
        changed = [n for n in values if n in defaults and differs(values[n], defaults[n])]
        parts = [
            f"{labels[n]} {said(n, values[n])} (default {said(n, defaults[n])})"
            for n in changed[:_SHOWN]
        ]
        if len(changed) > _SHOWN:
            parts.append(f"{len(changed) - _SHOWN} more")
        self.text.setText("Changed from the defaults: " + ", ".join(parts) if changed else "")
        self.changed = changed
        self.setVisible(bool(changed))
        return changed


def mark_labels(labels: Iterable[QWidget], changed: bool) -> None:
    """Colour field labels (or a checkbox's text) as changed, or back to the theme's colour."""
    for label in labels:
        label.setStyleSheet(f"color: {CHANGED_COLOUR};" if changed else "")
