"""A live eSRRF session beside napari-micromanager, as a microscopist would run one.

napari-micromanager (its own environment: ``pip install napari-micromanager`` beside this
project) drives a pymmcore-plus core whose pure-Python camera serves simulated blinking
filaments (no Micro-Manager installation: a ``UniMMCore``, the first core made, so it is
pymmcore-plus's global core, the one napari-micromanager drives). The eSRRF dock follows
"pymmcore-plus instance: MDA"; the MDA is run through the core napari-micromanager holds, which
writes the frames into its own layer. The whole window is grabbed while it acquires and after,
and the script checks what a user relies on: napari-micromanager's layer holds every frame, the
session processed every frame it received, and the kept result equals the offline job over
the frames processed. Run under Xvfb with real OpenGL (``QT_QPA_PLATFORM`` unset)::

    xvfb-run -a -s "-screen 0 1600x1000x24" python scripts/micromanager_session.py \\
        shots/micromanager --cpu
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import numpy as np
from _napari_window import ScreenshotWindow
from live_screenshots import _acquisition, _core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--exposure-ms", type=float, default=50.0)
    parser.add_argument("--running-after", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()

    os.environ.setdefault("PYMM_SIGNALS_BACKEND", "qt")  # as in napari: events via Qt
    import useq
    from napari_micromanager.main_window import MainWindow

    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.methods import PLUGIN, method

    stack, _ = _acquisition("esrrf", args.frames)
    core = _core(stack, args.exposure_ms)  # the first core: pymmcore-plus's global one
    window = ScreenshotWindow(args.out, cpu=args.cpu)
    viewer, pump = window.viewer, window.pump
    micromanager = MainWindow(viewer, mmcore=core)
    viewer.window.add_dock_widget(micromanager, name="Micro-Manager", area="top")
    spec = method("esrrf")
    _, dock = viewer.window.add_plugin_dock_widget(PLUGIN, spec.title)
    dock.set_param("magnification", 2)
    part = dock.live_acquisition
    part.expand()
    part.choose("pymmcore-plus instance: MDA")
    labels = [part.source_box.itemText(i) for i in range(part.source_box.count())]
    print(f"micromanager: the Live list offers {labels}")
    if not part.start():
        raise SystemExit(f"the live session did not start: {part.status.text()!r}")
    follow = part.follow
    window.shot("1-started")

    sequence = useq.MDASequence(time_plan={"interval": 0, "loops": args.frames})
    acquisition = threading.Thread(target=core.mda.run, args=(sequence,), daemon=True)
    acquisition.start()
    pump(args.running_after)
    window.shot("2-running")
    end = time.monotonic() + args.timeout
    while part.running and time.monotonic() < end:
        pump(0.2)
    acquisition.join(timeout=60)
    pump(1.0)
    window.shot("3-after")
    status, counters = part.status.text(), part.counters.text()
    print(f"micromanager: live status {status!r}; counters {counters!r}")

    # What napari-micromanager kept: its layer (a zarr array it fills) holds every frame.
    theirs = [
        layer for layer in viewer.layers if "napari_gpuscope" not in (layer.metadata or {})
    ]
    theirs = [layer for layer in theirs if np.ndim(layer.data) >= 3]
    frames_kept = {layer.name: np.asarray(layer.data).reshape(-1, *stack.shape[1:]).shape[0]
                   for layer in theirs}
    print(f"micromanager: napari-micromanager's layers {frames_kept}")
    session = follow.session if follow is not None else None
    if session is not None:
        processed = session.frames_processed
        result = session.result()
        offline = run_job(
            spec.job_spec("run").job_function()(
                stack[:processed], params=follow.request.params, device=follow.device
            )
        )
        same = np.array_equal(np.asarray(result.image), np.asarray(offline.image))
        print(
            f"micromanager: received {session.frames_received}, processed {processed}, "
            f"dropped {session.frames_dropped}; kept result equals the offline job over the "
            f"{processed} frames processed: {same}"
        )
    part.cancel()
    viewer.close()


if __name__ == "__main__":
    main()
