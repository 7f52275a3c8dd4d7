"""A word-wrapped label that is never cut: it asks for the height its lines need."""

from __future__ import annotations

from qtpy.QtGui import QResizeEvent
from qtpy.QtWidgets import QLabel, QWidget

__all__ = ["WrappedLabel", "fit_wrapped_height"]


class WrappedLabel(QLabel):
    """A word-wrapped label whose minimum height is what its text needs at its width.

    Qt's form layout sizes a wrapped label's row for the width the label would like (its size
    hint), then gives the label the narrower width of the field column: after Autotune, the
    flat-field dock's five-line status and its "Changed from the defaults" row were cut at top
    and bottom. Holding the minimum height at ``heightForWidth(width)`` (again at every text
    and width change) makes the layout give the rows their lines.

    Examples
    --------
    >>> from qtpy.QtWidgets import QApplication
    >>> app = QApplication.instance() or QApplication([])
    >>> label = WrappedLabel()
    >>> label.resize(120, 10)
    >>> label.setText("a status " * 20)
    >>> label.minimumHeight() == label.heightForWidth(120) > 10
    True
    """

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)
        self._fit()

    def setText(self, text: str) -> None:
        super().setText(text)
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        fit_wrapped_height(self)


def fit_wrapped_height(label: QLabel) -> None:
    """Set ``label``'s minimum height to what its wrapped text needs at its current width (0
    without text or width); nothing when that is already so (no layout request is made)."""
    need = label.heightForWidth(label.width()) if label.text() and label.width() > 0 else 0
    if need != label.minimumHeight():
        label.setMinimumHeight(max(need, 0))
