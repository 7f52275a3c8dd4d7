"""When a dock's live preview runs: after a quiet time following the last change of a
parameter, the input or the displayed plane; never while a run or side job holds the device,
nor while the dock is hidden or released."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from qtpy.QtCore import QObject, QTimer

if TYPE_CHECKING:
    from qtpy.QtWidgets import QCheckBox

    from napari_gpuscope.dock.model import DockModel

__all__ = ["PreviewScheduler"]


class PreviewScheduler(QObject):
    """The live preview's debounce.

    Parameters
    ----------
    parent : QObject
        The dock (owner of the timer).
    model : DockModel
        The dock's model: a preview never disturbs a run or side job.
    live : QCheckBox
        The "Live preview" box.
    start : callable
        Starts a preview now; returns whether it started.
    debounce_ms : int
        Quiet time after the last change before a preview starts.
    """

    def __init__(
        self,
        parent: QObject,
        model: DockModel,
        *,
        live: QCheckBox,
        start: Callable[[], bool],
        debounce_ms: int,
    ) -> None:
        super().__init__(parent)
        self.model, self.live, self._start = model, live, start
        self.hidden = False
        """The dock's panel is hidden (napari's hide button, another tab in front)."""
        self.released = False
        """The dock is done (removed or closed)."""
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(debounce_ms)
        self.timer.timeout.connect(self.start_now)

    def request(self, *_: object) -> None:
        """(Re)start the debounce timer, if live preview is on and the dock is on screen."""
        if self.live.isChecked() and self.live.isEnabled() and not (self.hidden or self.released):
            self.timer.start()

    def stop(self) -> None:
        """Forget a pending preview."""
        self.timer.stop()

    def start_now(self) -> bool:
        """Start a preview now, if live preview is on and nothing holds the device."""
        self.timer.stop()
        if not self.live.isChecked() or self.model.holds_device():
            return False  # never disturb a run; the next change after it previews again
        return self._start()
