"""Screenshots of a dock's Live part following a simulated acquisition, for looking at.

A napari window (shown), a pymmcore-plus ``UniMMCore`` whose pure-Python camera serves a
simulated stack (no Micro-Manager installation), the method's dock following the core's MDA
from its "Live acquisition" part; the whole window is grabbed while the acquisition runs and
after it ended (the live result kept as result layers). Run it under Xvfb with real OpenGL
(``QT_QPA_PLATFORM`` unset)::

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python scripts/live_screenshots.py \\
        esrrf shots/live-esrrf --cpu

Methods: ``esrrf`` (blinking filaments, a cumulative reconstruction) and ``flatfield`` (shaded
tiles, the true profile applied to each). ``--cpu`` offers the test-only ``cpu`` device (as
the widget tests do); ``--frames`` and ``--exposure-ms`` shape the acquisition,
``--running-after S`` when the "running" picture is taken, ``--good-enough`` checks eSRRF's
"Say when more frames stop helping" (its resolution plot is shown either way).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from _napari_window import ScreenshotWindow


def _core(stack: np.ndarray, exposure_ms: float) -> Any:
    """A UniMMCore whose camera serves ``stack`` in order (cycling)."""
    from pymmcore_plus.experimental.unicore import SimpleCameraDevice, UniMMCore

    class StackCamera(SimpleCameraDevice):
        def __init__(self) -> None:
            super().__init__()
            self.index, self._exposure = 0, exposure_ms

        def sensor_shape(self) -> tuple[int, int]:
            return stack.shape[1], stack.shape[2]

        def dtype(self) -> Any:
            return stack.dtype

        def get_exposure(self) -> float:
            return self._exposure

        def set_exposure(self, exposure: float) -> None:
            self._exposure = float(exposure)

        def snap(self, buffer: np.ndarray) -> Mapping[str, Any]:
            time.sleep(self._exposure / 1000)  # the camera integrating light
            buffer[:] = stack[self.index % len(stack)]
            self.index += 1
            return {}

    core = UniMMCore()
    core.loadPyDevice("Camera", StackCamera())
    core.initializeDevice("Camera")
    core.setCameraDevice("Camera")
    core.setExposure(exposure_ms)
    return core


def _acquisition(method: str, frames: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The stack the camera serves, and what the dock needs besides its defaults."""
    if method == "esrrf":
        from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

        stack, _ = blinking_filaments_stack(frames, (64, 64))
        return stack, {}
    if method == "flatfield":
        from napari_gpuscope.compute.flatfield import ShadingProfile
        from napari_gpuscope.sample_data._shading import shaded_tiles

        truth = shaded_tiles(frames, (192, 192), seed=0, dark_offset=100.0)
        profile = ShadingProfile.from_arrays(truth.flatfield, truth.darkfield)
        return truth.images, {"profile": profile}
    raise SystemExit(f"live screenshots are made for esrrf and flatfield, not {method!r}")


def _scroll_to_live_part(part: Any) -> None:
    """Scroll the dock so that its Live part (eSRRF's plots, the counters, the status) shows."""
    from qtpy.QtWidgets import QScrollArea

    area = part.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if area is not None:
        area.ensureWidgetVisible(part.status, 0, 0)  # the bottom, then the header if it left
        area.ensureWidgetVisible(part.header, 0, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", choices=["esrrf", "flatfield"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--frames", type=int, default=None)
    parser.add_argument("--exposure-ms", type=float, default=50.0)
    parser.add_argument("--running-after", type=float, default=None)
    parser.add_argument("--magnification", type=int, default=2, help="eSRRF's (CPU: small)")
    parser.add_argument(
        "--drift-block", type=int, default=None, help="eSRRF: frames per drift block (live track)"
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--good-enough", action="store_true", help="eSRRF: 'Say when more frames stop helping'"
    )
    args = parser.parse_args()
    # eSRRF on the CPU takes seconds a frame (the kernels' host emulation): a short acquisition.
    frames = args.frames or (40 if args.method == "esrrf" else 30)
    running_after = args.running_after or (25.0 if args.method == "esrrf" else 1.0)

    from napari_gpuscope import live
    from napari_gpuscope.methods import PLUGIN, method

    os.environ.setdefault("PYMM_SIGNALS_BACKEND", "qt")  # as in napari: events via Qt
    stack, extras = _acquisition(args.method, frames)
    core = _core(stack, args.exposure_ms)
    name = live.register_core(core, "simulated microscope")

    window = ScreenshotWindow(args.out, cpu=args.cpu)
    viewer, pump = window.viewer, window.pump

    def shot(step: str) -> None:
        _scroll_to_live_part(dock.live_acquisition)
        window.shot(step, settle=0.3)

    spec = method(args.method)
    _, dock = viewer.window.add_plugin_dock_widget(PLUGIN, spec.title)
    if "profile" in extras:
        dock.apply_panel.set_profile(extras["profile"], "saved (the sample's true shading)")
    if args.method == "esrrf":
        dock.set_param("magnification", args.magnification)
        if args.drift_block is not None:
            dock.set_param("drift_time_averaging", args.drift_block)
    # What a dock's kernel warm-up does for a run: one frame through the live job first, so
    # that the pictures show processing, not the loading of its code.
    from napari_gpuscope.dock.live_follow import live_request

    panel = getattr(dock, "apply_panel", None)
    params = panel.params() if panel is not None else dock.params()
    request = live_request(args.method, params, profile=extras.get("profile"))
    feed = live.FrameFeed()
    warm = live.attach(
        feed, args.method, request.params, job=request.job_id, device=dock.device, **request.inputs
    )
    feed.push(stack[0])
    feed.end()
    warm.wait(300)
    part = dock.live_acquisition
    part.expand()
    part.choose(f"{name}: MDA")
    if args.good_enough and part.quality is not None:
        part.quality.good_enough_box.setChecked(True)
    if not part.start():
        raise SystemExit(f"the live session did not start: {part.status.text()!r}")
    import useq

    # The camera's frames, as napari-micromanager shows them beside the live result.
    camera = viewer.add_image(stack[0], name="camera (simulated)", colormap="gray")

    def show_frame(image: np.ndarray, *_: object) -> None:
        camera.data = image

    core.mda.events.frameReady.connect(show_frame)
    getattr(viewer, "canvas", viewer).grid.enabled = True  # napari >= 0.9: viewer.canvas

    sequence = useq.MDASequence(time_plan={"interval": 0, "loops": frames})
    acquisition = threading.Thread(target=core.mda.run, args=(sequence,), daemon=True)
    acquisition.start()
    pump(running_after)
    viewer.reset_view()
    if part.layer is not None:
        viewer.layers.selection.active = part.layer
    shot("1-running")
    end = time.monotonic() + args.timeout
    while part.running and time.monotonic() < end:
        pump(0.2)
    acquisition.join(timeout=60)
    viewer.reset_view()
    if viewer.dims.ndim > 2:  # the last frame's result beside the camera's last frame
        viewer.dims.set_current_step(0, frames - 1)
    shot("2-after")
    print(f"screenshots: live status {part.status.text()!r}; counters {part.counters.text()!r}")
    part.cancel()  # after a timeout: no worker left in a computation at exit
    viewer.close()


if __name__ == "__main__":
    main()
