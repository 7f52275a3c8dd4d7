"""When a dock's live preview runs: after a quiet time following the last change of a
parameter, the input or the displayed plane; never while a run or side job holds the device,
nor while the dock is hidden or released; and its layers go when it is switched off.

:class:`PreviewScheduling` is a mixin of :class:`~napari_gpuscope.widgets.MethodDock`.
"""

from __future__ import annotations

from typing import Any

from qtpy.QtCore import QTimer

from napari_gpuscope.widgets._controller import PREVIEW

__all__ = ["PreviewScheduling"]


class PreviewScheduling:
    """The live preview's debounce and lifetime (mixin of ``MethodDock``)."""

    def _make_preview_timer(self: Any) -> QTimer:
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(self.preview_debounce_ms)
        timer.timeout.connect(self._start_preview)
        return timer

    def request_preview(self: Any, *_: Any) -> None:
        """(Re)start the debounce timer of the live preview, if live preview is on (and the
        dock is on screen)."""
        live = self.panel.live_preview
        if live.isChecked() and live.isEnabled() and not (self._hidden or self._released):
            self._preview_timer.start()

    def preview_now(self: Any) -> bool:
        """Start a live preview now (no debounce); return whether it started."""
        self._preview_timer.stop()
        return self.panel.live_preview.isChecked() and self._start_preview()

    def _start_preview(self: Any) -> bool:
        if not self.panel.live_preview.isChecked():
            return False
        if self.jobs.holds_device():
            return False  # never disturb a run; the next change after it previews again
        return self._start(PREVIEW)

    def _stop_preview(self: Any) -> None:
        """Cancel a pending or running preview (rolled back) and remove the preview layers."""
        self._preview_timer.stop()
        job = self.jobs.cancel_preview()
        if job is not None:
            job.outputs.rollback()
            self.panel.stop_clock()
        self._remove_preview_layers()

    def _remove_preview_layers(self: Any) -> None:
        layers, self._preview_layers = self._preview_layers, {}
        for layer in layers.values():
            if layer in self.viewer.layers:
                self.viewer.layers.remove(layer)

    def _on_live_preview_toggled(self: Any, checked: bool) -> None:
        if checked:
            self.request_preview()
            return
        self._stop_preview()
        self._update_buttons()
        if not self.runner.running:  # the status described the preview, which is gone
            layer = self.input_layer
            ready = f" Ready: Run processes '{layer.name}'." if layer is not None else ""
            self._show_idle_status(f"Live preview off.{ready}")

    def _on_dims_changed(self: Any, *_: Any) -> None:
        layer = self.input_layer
        if layer is not None and layer in self.viewer.layers and layer.ndim > 2:
            self.request_preview()
