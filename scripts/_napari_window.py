"""The shown napari window the screenshot scripts grab (``screenshots.py``,
``live_screenshots.py``): 1600 x 1000, the Qt event loop pumped by hand, the whole window
saved at each step."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


class ScreenshotWindow:
    """A shown napari viewer and the folder its screenshots go to.

    ``cpu`` offers the test-only ``cpu`` entry in the docks' device combo (as the widget tests
    do), so that runs can be seen on a machine without a CUDA GPU; the combo then says "cpu
    (test only)", which a user never sees.
    """

    def __init__(self, out: Path, *, cpu: bool) -> None:
        import napari
        from qtpy.QtWidgets import QApplication

        if cpu:
            from napari_gpuscope.widgets import _devices

            _devices._TEST_ONLY_DEVICES.append(("cpu (test only)", "cpu"))
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.viewer = napari.Viewer(show=True)
        self.viewer.window._qt_window.resize(1600, 1000)
        self._app: Any = QApplication.instance()

    def pump(self, seconds: float) -> None:
        """Run Qt's event loop for ``seconds`` (workers' results reach the layers)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._app.processEvents()
            time.sleep(0.02)

    def shot(self, step: str, settle: float = 0.5) -> None:
        """Save the whole window as ``<out>/<step>.png`` after ``settle`` seconds of events."""
        self.pump(settle)
        path = self.out / f"{step}.png"
        self.viewer.screenshot(str(path), canvas_only=False)
        print(f"screenshots: {path}")
