"""Screenshots of the whole napari window at each step of a method's dock, for looking at.

Steps: empty viewer, dock open, sample loaded, running (a few updates in), result. Run it under
Xvfb with real OpenGL (``QT_QPA_PLATFORM`` unset)::

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python scripts/screenshots.py tv shots/tv

Without a CUDA GPU, ``--cpu`` offers the test-only ``cpu`` entry in the dock's device combo (as
the widget tests do), so that the running and result steps can be seen; the combo then says
"cpu (test only)", which is what a user never sees. ``--sample KEY`` picks the sample (default:
the method's first), ``--running-after S`` how long the run goes before the "running" picture,
``--timeout S`` how long to wait for the result.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def _pump(app, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("out", type=Path)
    parser.add_argument("--sample", default=None)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--running-after", type=float, default=1.5)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    import napari
    from qtpy.QtWidgets import QApplication

    from napari_gpuscope.methods import PLUGIN, method

    spec = method(args.method)
    sample = args.sample or spec.samples[0].key
    if args.cpu:
        from napari_gpuscope.widgets import _devices

        _devices._TEST_ONLY_DEVICES.append(("cpu (test only)", "cpu"))

    args.out.mkdir(parents=True, exist_ok=True)
    viewer = napari.Viewer(show=True)
    viewer.window._qt_window.resize(1600, 1000)
    app = QApplication.instance()

    def shot(step: str) -> None:
        _pump(app, 0.5)
        path = args.out / f"{step}.png"
        viewer.screenshot(str(path), canvas_only=False)
        print(f"screenshots: {path}")

    shot("1-empty")
    _, dock = viewer.window.add_plugin_dock_widget(PLUGIN, spec.title)
    shot("2-dock")
    viewer.open_sample(PLUGIN, sample)
    shot("3-loaded")
    if not dock.run():
        shot("4-refused")
        print(f"screenshots: the run was refused: {dock.panel.status.text()!r}")
        return
    _pump(app, args.running_after)
    shot("4-running")
    end = time.monotonic() + args.timeout
    while dock.is_running() and time.monotonic() < end:
        _pump(app, 0.2)
    shot("5-result")
    print(f"screenshots: status {dock.panel.status.text()!r}")
    viewer.close()


if __name__ == "__main__":
    main()
