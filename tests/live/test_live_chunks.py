"""A worker that fell behind takes the frames in hand together: a live eSRRF in larger chunks
(the job's own chunk size, cut at each measurement and drift block: the same reconstruction,
the same measurements at the same frames), a live flat-field apply in one job (up to 16
frames: the same images and facts as the offline job)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from napari_gpuscope import live
from napari_gpuscope.compute import esrrf
from napari_gpuscope.live import _pacing
from napari_gpuscope.live._live_esrrf import LiveEsrrf
from napari_gpuscope.live._per_frame import LiveApply

from .test_live import blinking, offline, shading_profile

FRAMES = 60
WAIT = 120  # seconds: a bound on a hung session, never a pacing


@pytest.fixture(autouse=True)
def _no_step_limit(monkeypatch):
    """Steps not bounded by time (the chunk counts below do not depend on this CPU's speed);
    the bound itself: test_a_step_is_kept_short_for_a_stop_to_act_soon."""
    monkeypatch.setattr(_pacing, "STEP_SECONDS", None)


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


def test_flatfield_apply_takes_the_frames_waiting_in_one_job(monkeypatch):
    from napari_gpuscope.compute.flatfield import BasicParams

    frames = 40
    stack = blinking(frames, size=24, seed=4) + np.uint16(10)
    profile = shading_profile((24, 24))
    params = BasicParams(output_dtype="uint16", clip_negative=True)
    jobs = []
    start, process = LiveApply.run, LiveApply.process

    def with_every_frame_in_hand(self, buffer, control):  # as when the worker fell behind
        buffer.wait_for(frames, timeout=WAIT)
        return start(self, buffer, control)

    def counted(self, data):
        jobs.append(len(data) if data.ndim == 3 else 1)
        return process(self, data)

    monkeypatch.setattr(LiveApply, "run", with_every_frame_in_hand)
    monkeypatch.setattr(LiveApply, "process", counted)
    feed = live.FrameFeed("tiles", expected=frames)
    session = live.attach(
        feed, "flatfield", params, device="cpu", job="apply", profile=profile, capacity=frames
    )
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT), session.describe()
    assert jobs == [16, 16, 8]
    result = session.result()
    expected = offline("flatfield", "apply", stack, params, profile=profile, measure_shading=False)
    assert result.image.tobytes() == expected.image.tobytes()
    assert result.summary() == expected.summary()
    np.testing.assert_array_equal(session.latest(), expected.image[-1])


def test_a_live_apply_refuses_the_timelapse_baseline_and_the_dock_turns_it_off():
    """Each frame's baseline is fitted over the stack's frames together: a live session, which
    gets them one by one, would not equal the offline job (3 counts apart on a test stack)."""
    from napari_gpuscope.compute.flatfield import BasicParams
    from napari_gpuscope.dock.live_request import live_request

    params = BasicParams(timelapse_baseline=True)
    profile = shading_profile((24, 24))
    with pytest.raises(ValueError, match="timelapse_baseline"):
        live.attach(
            live.FrameFeed(), "flatfield", params, device="cpu", job="apply", profile=profile
        )
    request = live_request("flatfield", params, profile=profile)
    assert request.params.timelapse_baseline is False
    assert any("baseline is not removed live" in note for note in request.notes)


def test_without_measurements_or_drift_track_the_chunks_are_the_frames_in_hand(monkeypatch):
    """Nothing to cut the chunks at: the job's own size (4 on the CPU), the same image."""
    stack = blinking(FRAMES, size=32, seed=3)
    start = LiveEsrrf.run

    def with_every_frame_in_hand(self, buffer, control):
        buffer.wait_for(FRAMES, timeout=WAIT)
        return start(self, buffer, control)

    monkeypatch.setattr(LiveEsrrf, "run", with_every_frame_in_hand)
    feed = live.FrameFeed("bare", expected=FRAMES)
    params = esrrf.EsrrfParams(magnification=2)
    session = live.attach(
        feed, "esrrf", params, device="cpu", capacity=FRAMES, measure_every=0, track_drift=False
    )
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT), session.describe()
    result = session.result()
    assert session.frames_processed == FRAMES
    assert result.summary()["chunks"] == FRAMES // 4
    assert result.image.tobytes() == esrrf.esrrf(stack, device="cpu", magnification=2).tobytes()


def test_a_failed_job_says_why_in_the_session_description(monkeypatch):
    def broken(self, start):
        raise RuntimeError("no next update")

    monkeypatch.setattr(LiveEsrrf, "_next_update", broken)
    feed = live.FrameFeed("broken")
    session = live.attach(feed, "esrrf", esrrf.EsrrfParams(magnification=2), device="cpu")
    feed.push(blinking(1, size=16)[0])
    feed.end()
    assert session.wait(WAIT)
    assert session.describe().endswith("; the job failed: RuntimeError: no next update")


def test_a_step_is_kept_short_for_a_stop_to_act_soon(monkeypatch):
    """With a step allowed no time at all, every frame goes alone (Stop & keep acts between
    steps), whatever is in hand; the first step of a session takes one frame in any case."""
    monkeypatch.setattr(_pacing, "STEP_SECONDS", 1e-9)
    stack = blinking(20, size=32, seed=3)
    start = LiveEsrrf.run

    def with_every_frame_in_hand(self, buffer, control):
        buffer.wait_for(20, timeout=WAIT)
        return start(self, buffer, control)

    monkeypatch.setattr(LiveEsrrf, "run", with_every_frame_in_hand)
    feed = live.FrameFeed("paced", expected=20)
    params = esrrf.EsrrfParams(magnification=2)
    session = live.attach(
        feed, "esrrf", params, device="cpu", capacity=20, measure_every=0, track_drift=False
    )
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT), session.describe()
    assert session.result().summary()["chunks"] == 20
