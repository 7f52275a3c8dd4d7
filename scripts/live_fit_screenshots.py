"""Screenshots of the flat-field dock fitting a profile as a simulated grid scan's tiles arrive.

``live_screenshots.py flatfield`` shows a saved profile applied live; this one chooses the
dock's Live row "fit the profile as tiles arrive" with no profile at all: the camera's latest
tile beside the flatfield of the latest complete fit while the scan runs, then the kept
profile after it ended (and its error against the simulation's true flatfield, printed). Run
it under Xvfb with real OpenGL (``QT_QPA_PLATFORM`` unset)::

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python scripts/live_fit_screenshots.py \\
        shots/live-fit --cpu
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import numpy as np
from _napari_window import ScreenshotWindow
from live_screenshots import _core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--tiles", type=int, default=60)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--exposure-ms", type=float, default=400.0)
    parser.add_argument("--fits-before-shot", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--dark-frame", action="store_true", help="fit with a dark-frame layer, not an offset"
    )
    args = parser.parse_args()

    import useq

    from napari_gpuscope import live
    from napari_gpuscope.methods import PLUGIN, method
    from napari_gpuscope.sample_data._shading import shaded_tiles

    os.environ.setdefault("PYMM_SIGNALS_BACKEND", "qt")  # as in napari: events via Qt
    truth = shaded_tiles(args.tiles, (args.size, args.size), seed=0, dark_offset=100.0)
    core = _core(truth.images, args.exposure_ms)
    name = live.register_core(core, "simulated microscope")
    window = ScreenshotWindow(args.out, cpu=args.cpu)
    viewer, pump = window.viewer, window.pump
    _, dock = viewer.window.add_plugin_dock_widget(PLUGIN, method("flatfield").title)
    if args.dark_frame:  # the simulated camera's offset, measured as a dark frame
        dark = viewer.add_image(np.full(truth.images.shape[1:], 100, np.uint16), name="dark")
        dock.reset_choices()
        dock.dark_frame.value = dark
    else:
        dock.set_param("camera_offset", 100.0)  # the simulated camera's offset
    dock.live_job.setCurrentIndex(dock.live_job.findData("fit"))
    part = dock.live_acquisition
    part.expand()
    part.choose(f"{name}: MDA")
    if not part.start():
        raise SystemExit(f"the live session did not start: {part.status.text()!r}")
    camera = viewer.add_image(truth.images[0], name="camera (simulated)", colormap="gray")

    def show_tile(image: np.ndarray, *_: object) -> None:
        camera.data = image

    core.mda.events.frameReady.connect(show_tile)
    getattr(viewer, "canvas", viewer).grid.enabled = True  # napari >= 0.9: viewer.canvas
    sequence = useq.MDASequence(time_plan={"interval": 0, "loops": args.tiles})
    acquisition = threading.Thread(target=core.mda.run, args=(sequence,), daemon=True)
    acquisition.start()
    end = time.monotonic() + args.timeout

    def fits() -> int:
        follow = part.follow
        return follow.session.method.fits if follow is not None else -1

    while part.running and (part.layer is None or fits() < args.fits_before_shot):
        if time.monotonic() > end:
            break
        pump(0.2)
    viewer.reset_view()
    if part.layer is not None:
        viewer.layers.selection.active = part.layer
    window.shot("1-running", settle=0.3)
    print(f"running: {part.counters.text()!r}")
    while part.running and time.monotonic() < end:
        pump(0.2)
    acquisition.join(timeout=60)
    viewer.reset_view()
    window.shot("2-after", settle=0.3)
    print(f"after: {part.status.text()!r}; counters {part.counters.text()!r}")
    print(f"Apply panel: {dock.apply_panel.profile_label.text()!r}")
    for layer in part.kept[:1]:
        flat, true = layer.data / layer.data.mean(), truth.flatfield / truth.flatfield.mean()
        error = float(np.sqrt(np.mean((flat - true) ** 2)))
        print(f"kept {layer.name!r}: RMS error against the true flatfield {100 * error:.1f} %")
    part.cancel()  # after a timeout: no worker left in a computation at exit
    viewer.close()


if __name__ == "__main__":
    main()
