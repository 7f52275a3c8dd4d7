"""Screenshots of the whole napari window at each step of a method's dock, for looking at.

Steps: empty viewer, dock open, sample loaded, running (a few updates in), result, and the
exported figure of the result (``6-export.png`` with its sidecar, colorbars on). Run it under
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

from _napari_window import ScreenshotWindow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("out", type=Path)
    parser.add_argument("--sample", default=None)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--running-after", type=float, default=1.5)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    from napari_gpuscope.methods import PLUGIN, method

    spec = method(args.method)
    sample = args.sample or spec.samples[0].key
    window = ScreenshotWindow(args.out, cpu=args.cpu)
    viewer, shot, pump = window.viewer, window.shot, window.pump

    shot("1-empty")
    _, dock = viewer.window.add_plugin_dock_widget(PLUGIN, spec.title)
    shot("2-dock")
    viewer.open_sample(PLUGIN, sample)
    shot("3-loaded")
    if not dock.run():
        shot("4-refused")
        print(f"screenshots: the run was refused: {dock.panel.status.text()!r}")
        return
    pump(args.running_after)
    shot("4-running")
    end = time.monotonic() + args.timeout
    while dock.is_running() and time.monotonic() < end:
        pump(0.2)
    shot("5-result")
    print(f"screenshots: status {dock.panel.status.text()!r}")
    # The figure a user exports from the result (menu File > Export figure with provenance).
    from napari_gpuscope.export import export_screenshot

    files = export_screenshot(viewer, args.out / "6-export.png", colorbar=True)
    print(f"screenshots: {files.png} ({files.size[0]} x {files.size[1]} px, {files.dpi:g} dpi)")
    viewer.close()


if __name__ == "__main__":
    main()
