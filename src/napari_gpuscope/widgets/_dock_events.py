"""A dock's Qt events: the keyboard (Enter, Escape), its size, and noticing napari hiding,
showing or removing it.

:class:`DockQtEvents` is a mixin of :class:`~napari_gpuscope.widgets.MethodDock` (before
``QWidget`` in its bases, so these handlers are the dock's).
"""

from __future__ import annotations

from typing import Any

from qtpy.QtCore import QEvent, QSize, Qt

__all__ = ["DockQtEvents"]


class DockQtEvents:
    """Keyboard, size hints, hide/show and removal (mixin of ``MethodDock``)."""

    def keyPressEvent(self: Any, event: Any) -> None:
        """Enter refreshes the live preview when it is on and runs otherwise (never while a
        run is going on); Escape cancels."""
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            live = self.panel.live_preview
            if live.isChecked() and live.isEnabled():
                self.preview_now()
            else:
                self.run()
            event.accept()
        elif key == Qt.Key.Key_Escape:
            self.cancel()
            event.accept()
        else:
            super().keyPressEvent(event)

    def sizeHint(self: Any) -> QSize:
        """A sensible dock width; long texts wrap instead of widening the dock."""
        return QSize(self.dock_width, self.content.sizeHint().height())

    def minimumSizeHint(self: Any) -> QSize:
        """The dock may be narrowed down to this, and be short (it scrolls)."""
        return QSize(260, 200)

    def event(self: Any, event: QEvent) -> bool:
        """Notice napari removing the dock: it takes the widget out of its panel and tells it
        nothing else (neither ``remove_dock_widget`` nor the panel's close reaches
        :meth:`closeEvent`)."""
        if event.type() == QEvent.Type.ParentChange:
            if self.parent() is not None:
                self._docked = True
            elif self._docked:
                self.release()
        return super().event(event)

    def hideEvent(self: Any, event: Any) -> None:
        """A hidden panel (napari's hide button, another tab in front) shows no live preview;
        a full run goes on (its result is wanted; the activity dock shows its progress)."""
        if not event.spontaneous():  # not a minimised window
            self._hidden = True
            self._stop_preview()
            self._update_buttons()
        super().hideEvent(event)

    def showEvent(self: Any, event: Any) -> None:
        """Shown again: the live preview (if on) catches up with the displayed plane."""
        if self._hidden and not event.spontaneous():
            self._hidden = False
            self.request_preview()
        super().showEvent(event)

    def closeEvent(self: Any, event: Any) -> None:
        """The widget itself was closed (outside a napari panel): release it."""
        self.release()
        super().closeEvent(event)
