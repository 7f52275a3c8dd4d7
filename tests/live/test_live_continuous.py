"""A core's continuous sequence acquisition (its live mode) as a source, with ``UniMMCore`` and
the pure-Python camera: every frame popped once and in order, the session ending when the
acquisition stops, and no polling thread left behind."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live

from .camera import make_core
from .test_live import WAIT, blinking, offline, shading_profile


def _pollers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "napari-gpuscope-live-continuous"]


def test_continuous_acquisition_feeds_a_session_that_equals_the_offline_job():
    from napari_gpuscope.compute.flatfield import BasicParams

    stack = blinking(8)
    # A 2 ms exposure: a camera with a frame rate, well within what the apply job sustains.
    core, camera = make_core(stack, exposure_ms=2.0)
    profile = shading_profile(stack.shape[1:])
    source = live.ContinuousSource(core)
    session = live.attach(
        source, "flatfield", BasicParams(), job="apply", profile=profile, device="cpu"
    )
    core.startContinuousSequenceAcquisition(0)
    assert session.wait_for_frames(20, WAIT)
    core.stopSequenceAcquisition()
    assert session.wait(WAIT), "the session ends when the acquisition stops"
    received = session.frames_received
    assert source.frames_lost == 0 and session.frames_dropped == 0
    assert session.frames_processed == received >= 20
    # The camera served stack[0], stack[1], ... (cycling): the session got them all, in order.
    assert camera.index >= received  # a snap cut short by the stop never reaches the buffer
    frames = stack[np.arange(received) % len(stack)]
    expected = offline(
        "flatfield", "apply", frames, BasicParams(), profile=profile, measure_shading=False
    )
    assert session.result().image.tobytes() == expected.image.tobytes()
    session.detach()
    # The poller ended the session from its own thread and is returning: a gate, not a wait.
    for thread in _pollers():
        thread.join(WAIT)
    assert _pollers() == []


def test_a_session_attached_before_the_acquisition_waits_for_it_and_detaches_cleanly():
    stack = blinking(4)
    core, _ = make_core(stack, exposure_ms=1.0)
    session = live.attach(live.ContinuousSource(core), "tv", {"weight": 5.0}, device="cpu")
    assert not session.wait(0.05), "no acquisition yet: the session waits for one"
    core.startContinuousSequenceAcquisition(0)
    assert session.wait_for_frames(3, WAIT)
    session.detach()  # mid-acquisition: the acquisition goes on, the session is gone
    assert _pollers() == []
    assert core.isSequenceRunning()
    core.stopSequenceAcquisition()
    assert session.result().image.shape[1:] == stack.shape[1:]


class _FailingCore:
    """What a continuous source uses of a core: ``good`` numbered frames, then a core that
    raises (a camera adapter's error while its buffer is read)."""

    def __init__(self, good: int) -> None:
        self.images = [
            (np.full((8, 8), i, np.uint16), {"ImageNumber": str(i)}) for i in range(good)
        ]

    def getRemainingImageCount(self) -> int:
        return 1  # always one more: the failure comes from popping it

    def popNextImageAndMD(self):
        if not self.images:
            raise RuntimeError("camera adapter: buffer read failed")
        return self.images.pop(0)

    def isSequenceRunning(self) -> bool:
        return True


def test_a_core_that_raises_ends_the_session_with_its_error_and_keeps_the_frames_before():
    from napari_gpuscope.compute.tv import TVParams
    from napari_gpuscope.dock.live_follow import LiveFollow, LiveRequest

    source = live.ContinuousSource(_FailingCore(good=3))
    follow = LiveFollow(
        source, LiveRequest("tv", "denoise", TVParams(weight=5.0), {}), device="cpu"
    )
    session = follow.session
    assert session.wait(WAIT), "the session ends when its source fails (not left waiting)"
    assert isinstance(source.error, RuntimeError) and session.source_error is source.error
    assert session.frames_received == session.frames_processed == 3
    assert session.result().image[:, 0, 0].tolist() == [0, 1, 2]  # TV of a constant frame
    status = follow.poll()
    head, detail = status.ending()
    assert head == "The source failed" and "buffer read failed" in detail
    session.detach()
    assert follow.ended and _pollers() == []


def test_disconnect_never_waits_for_the_polling_thread():
    core = _FailingCore(good=0)
    entered, release = threading.Event(), threading.Event()

    def blocked_count() -> int:  # a core call that hangs (a camera adapter that blocks)
        entered.set()
        release.wait(WAIT)
        return 0

    core.getRemainingImageCount = blocked_count
    source = live.ContinuousSource(core)
    source.connect(lambda frame: None, lambda error=None: None)
    assert entered.wait(WAIT)
    source.disconnect()  # returns although the poller is inside the core
    assert not source.join(0), "the poller is still in the core's call"
    release.set()
    assert source.join(WAIT) and _pollers() == []


def test_a_registered_core_is_offered_and_a_dropped_one_leaves():
    core, _ = make_core(blinking(2))
    name = live.register_core(core, "bench scope")
    assert name == "bench scope" and live.session_cores()[name] is core
    other, _ = make_core(blinking(2))
    assert live.register_core(other, "bench scope") == "bench scope 2"
    live.unregister_core(other)
    del other
    assert "bench scope 2" not in live.session_cores()
    live.unregister_core(core)
    with pytest.raises(TypeError, match="pymmcore-plus core"):
        live.register_core(object())
