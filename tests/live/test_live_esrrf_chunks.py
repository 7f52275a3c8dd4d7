"""A live eSRRF takes the frames in hand in larger chunks when it falls behind (the job's own
chunk size, cut at each measurement and drift block): the same reconstruction, the same
measurements at the same frames, fewer steps."""

from __future__ import annotations

import math
import time

import numpy as np

from napari_gpuscope import live
from napari_gpuscope.compute import esrrf
from napari_gpuscope.live._live_esrrf import LiveEsrrf

from .test_live import blinking

FRAMES = 60
WAIT = 120  # seconds: a bound on a hung session, never a pacing


def _session(stack: np.ndarray, one_at_a_time: bool):
    feed = live.FrameFeed("chunks", expected=len(stack))
    params = esrrf.EsrrfParams(magnification=2, drift_time_averaging=20)
    session = live.attach(
        feed, "esrrf", params, device="cpu", capacity=len(stack), measure_every=10
    )
    session.quality.max_share = None  # every measurement due, whatever this CPU's load
    for index, frame in enumerate(stack):
        feed.push(frame)
        if one_at_a_time:  # the worker keeps up: each frame alone in its chunk
            deadline = time.monotonic() + WAIT
            while session.frames_processed < index + 1 and time.monotonic() < deadline:
                time.sleep(0.001)
    feed.end()
    assert session.wait(WAIT), session.describe()
    return session, session.result()


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_frames_waiting_go_in_larger_chunks_with_the_same_results(monkeypatch):
    stack = blinking(FRAMES, size=32, seed=3)
    single, single_result = _session(stack, one_at_a_time=True)
    assert single_result.summary()["chunks"] == FRAMES
    start = LiveEsrrf.run

    def with_every_frame_in_hand(self, buffer, control):  # as when the worker fell behind
        buffer.wait_for(FRAMES, timeout=WAIT)
        return start(self, buffer, control)

    monkeypatch.setattr(LiveEsrrf, "run", with_every_frame_in_hand)
    batched, batched_result = _session(stack, one_at_a_time=False)
    # 4 frames a chunk on the CPU (the job's own size), cut at every measurement (10 frames)
    # and drift block (20): 4 + 4 + 2 a measurement
    assert batched_result.summary()["chunks"] == 3 * FRAMES // 10
    offline = esrrf.esrrf(stack, device="cpu", magnification=2)
    for result in (batched_result, single_result):
        assert result.image.tobytes() == offline.tobytes()
    points = [batched.track(), single.track()]
    assert [p.frames for p in points[0]] == [p.frames for p in points[1]] == list(range(10, 61, 10))
    for a, b in zip(*points, strict=True):
        for field in ("resolution_px", "rsp_error", "noise"):
            assert _same(getattr(a, field), getattr(b, field)), (a, b)
        assert a.finding == b.finding
    drift = [batched.drift_track(), single.drift_track()]
    assert drift[0].measured == drift[1].measured == FRAMES // 20
    np.testing.assert_array_equal(drift[0].shifts, drift[1].shifts)
