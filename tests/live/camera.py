"""A pure-Python camera serving a simulated stack through a real pymmcore-plus MDA.

``UniMMCore`` (pymmcore-plus 0.18) loads Python devices beside Micro-Manager's: no
Micro-Manager installation and no device adapters are needed. The camera serves the frames of
a stack in order (cycling), so an MDA's ``frameReady`` delivers exactly those frames.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")  # the test collection imports this module too
pytest.importorskip("useq")

import useq
from pymmcore_plus.experimental.unicore import (
    ShutterDevice,
    SimpleCameraDevice,
    UniMMCore,
)


class StackCamera(SimpleCameraDevice):
    """Serves ``stack[0], stack[1], ...``; ``exposure_ms`` > 0 makes each snap take that long
    (a camera integrating light), so an acquisition has a frame rate to protect."""

    def __init__(self, stack: np.ndarray, exposure_ms: float = 0.0) -> None:
        super().__init__()
        self.stack = np.asarray(stack)
        self.index = 0
        self._exposure = float(exposure_ms)

    def sensor_shape(self) -> tuple[int, int]:
        return self.stack.shape[1], self.stack.shape[2]

    def dtype(self) -> Any:
        return self.stack.dtype

    def get_exposure(self) -> float:
        return self._exposure

    def set_exposure(self, exposure: float) -> None:
        self._exposure = float(exposure)

    def snap(self, buffer: np.ndarray) -> Mapping[str, Any]:
        if self._exposure > 0:
            time.sleep(self._exposure / 1000)  # the camera integrating light
        buffer[:] = self.stack[self.index % len(self.stack)]
        self.index += 1
        return {}


class Shutter(ShutterDevice):
    """A shutter that only remembers its state: an MDA with a z-plan closes the shutter after
    each slice, which fails on a core without one (``setAutoShutter(False)`` does not stop it
    in pymmcore-plus 0.18's single-event path)."""

    def __init__(self) -> None:
        super().__init__()
        self._open = False

    def get_open(self) -> bool:
        return self._open

    def set_open(self, open: bool) -> None:
        self._open = open


def make_core(stack: np.ndarray, exposure_ms: float = 0.0) -> tuple[UniMMCore, StackCamera]:
    """A core whose camera serves ``stack`` (and a shutter, for z-plans)."""
    core = UniMMCore()
    camera = StackCamera(stack, exposure_ms)
    core.loadPyDevice("Camera", camera)
    core.initializeDevice("Camera")
    core.setCameraDevice("Camera")
    core.loadPyDevice("Shutter", Shutter())
    core.initializeDevice("Shutter")
    core.setShutterDevice("Shutter")
    core.setExposure(exposure_ms)
    return core, camera


def z_stacks(time_points: int, slices: int) -> useq.MDASequence:
    """An MDA of ``time_points`` z-stacks of ``slices`` slices each (z innermost)."""
    return useq.MDASequence(
        time_plan={"interval": 0, "loops": time_points},
        z_plan={"range": float(slices - 1), "step": 1.0},
    )


def time_series(frames: int) -> useq.MDASequence:
    """An MDA of ``frames`` time points as fast as the camera goes."""
    return useq.MDASequence(time_plan={"interval": 0, "loops": frames})


def connections(core: UniMMCore) -> dict[str, int]:
    """How many callbacks each MDA signal a live session uses has."""
    events = core.mda.events
    return {
        name: len(getattr(events, name))
        for name in ("frameReady", "sequenceStarted", "sequenceFinished")
    }
