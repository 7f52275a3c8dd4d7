"""Live sessions (issue 28): a real MDA with a pure-Python camera (``camera.py``), a napari
image layer that grows and frames pushed by a script, against the offline jobs of the registry
on the same frames, byte for byte on the CPU.

Every wait is on an event (the session's end, a frame count); no test sleeps to let a thread
catch up. The only sleeps are the simulated camera's exposures.
"""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.methods import METHODS

from .camera import connections, make_core, time_series, z_stacks

DEVICE = "cpu"
WAIT = 120  # seconds: a bound on a hung session, never a pacing


def blinking(frames: int, size: int = 16, seed: int = 0) -> np.ndarray:
    """Poisson frames of blinking emitters (enough structure for eSRRF and TV)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    emitters = rng.uniform(3, size - 3, (6, 2))
    stack = np.empty((frames, size, size), np.uint16)
    for t in range(frames):
        on = rng.random(len(emitters)) < 0.5
        image = np.full((size, size), 20.0)
        for (y, x), lit in zip(emitters, on, strict=True):
            if lit:
                image += 200 * np.exp(-((yy - y) ** 2 + (xx - x) ** 2) / 2.0)
        stack[t] = rng.poisson(image)
    return stack


def offline(method_id: str, job_id: str | None, data, params, **kwargs):
    job = METHODS[method_id].job_spec(job_id)
    return run_job(job.job_function()(data, params=params, device=DEVICE, **kwargs))


def acquire(core, frames: int) -> None:
    core.mda.run(time_series(frames))


def unit_profile(shape: tuple[int, int]):
    from napari_gpuscope.compute.flatfield import ShadingProfile

    return ShadingProfile.from_arrays(np.ones(shape))


def shading_profile(shape: tuple[int, int]):
    from napari_gpuscope.compute.flatfield import ShadingProfile

    yy, xx = np.mgrid[: shape[0], : shape[1]]
    flat = 1.2 - 0.4 * ((yy - shape[0] / 2) ** 2 + (xx - shape[1] / 2) ** 2) / shape[0] ** 2
    return ShadingProfile.from_arrays(flat, camera_offset=10)


# -- live equals offline ------------------------------------------------------------------------


def test_tv_live_equals_the_registry_job_on_each_frame():
    from napari_gpuscope.compute import tv

    stack = blinking(8)
    core, _ = make_core(stack)
    params = tv.TVParams(strength=1.0)
    session = live.attach(core, "tv", params, device=DEVICE)
    acquire(core, len(stack))
    assert session.wait(WAIT)
    result = session.result()
    assert isinstance(result, tv.TVResult)
    assert (session.frames_received, session.frames_processed, session.frames_dropped) == (8, 8, 0)
    # The weight is resolved on the first frame (what the job does when it starts) and held.
    resolved = tv.resolve_weight(stack[0], params)
    assert result.weight == resolved.weight and result.noise_sigma == resolved.noise_sigma
    fixed = params.replace(weight=resolved.weight)
    frames = [offline("tv", None, frame, fixed) for frame in stack]
    expected = np.stack([r.image for r in frames])
    assert result.image.tobytes() == expected.tobytes()
    assert result.iterations == max(r.iterations for r in frames)
    assert result.converged == all(r.converged for r in frames)
    # The first frame as the registry's job with the session's own parameters makes it.
    first = offline("tv", None, stack[0], params)
    assert result.image[0].tobytes() == first.image.tobytes()
    assert result.layers("cells")[0][1]["name"].startswith("TV denoised")


def test_flatfield_apply_live_equals_the_offline_apply_job():
    from napari_gpuscope.compute.flatfield import BasicParams, CorrectionResult

    stack = blinking(10, size=24) + np.uint16(10)
    profile = shading_profile((24, 24))
    params = BasicParams(output_dtype="uint16", clip_negative=True)
    core, _ = make_core(stack)
    session = live.attach(core, "flatfield", params, device=DEVICE, job="apply", profile=profile)
    acquire(core, len(stack))
    assert session.wait(WAIT)
    result = session.result()
    expected = offline("flatfield", "apply", stack, params, profile=profile, measure_shading=False)
    assert isinstance(result, CorrectionResult)
    assert result.image.dtype == expected.image.dtype
    assert result.image.tobytes() == expected.image.tobytes()
    assert result.summary() == expected.summary()


@pytest.mark.parametrize("frames_per_timepoint", [0, 4])
def test_esrrf_live_equals_the_offline_job(frames_per_timepoint):
    """Cumulative (0) and a new time point every 4 frames (the last one partial)."""
    from napari_gpuscope.compute.esrrf import EsrrfParams, EsrrfResult

    stack = blinking(10)
    params = EsrrfParams(magnification=2, frames_per_timepoint=frames_per_timepoint)
    core, _ = make_core(stack)
    session = live.attach(core, "esrrf", params, device=DEVICE)
    acquire(core, len(stack))
    assert session.wait(WAIT)
    result = session.result()
    assert isinstance(result, EsrrfResult)
    assert session.frames_processed == 10 and session.frames_dropped == 0
    expected = offline("esrrf", None, stack, params)
    assert result.image.tobytes() == expected.image.tobytes()
    assert result.widefield.tobytes() == expected.widefield.tobytes()
    # The same facts but the chunk count: the live job takes the frames in hand, up to its
    # chunk size (4 on the CPU), so its chunks depend on when the frames came.
    facts, expected_facts = result.summary(), expected.summary()
    assert 3 <= facts.pop("chunks") <= 10
    expected_facts.pop("chunks")
    assert facts == expected_facts


def phase_stacks(time_points: int, slices: int, size: int = 32):
    """Brightfield z-stacks of a square phase object (one per time point, moving), as uint16
    camera frames ``(time_points * slices, Y, X)``, and the parameters that made them."""
    from napari_gpuscope.compute import phase

    params = phase.PhaseParams(
        wavelength=0.45,
        yx_pixel_size=0.325,
        z_pixel_size=1.0,
        na_illumination=0.4,
        na_detection=0.55,
        index_of_refraction=1.0,
    )
    stacks = []
    for t in range(time_points):
        truth = np.zeros((size, size), np.float32)
        truth[10 + t : 18 + t, 12:20] = 0.5
        stack = phase.simulate_stack(truth, 0 * truth, params, slices)
        stacks.append(np.round(np.asarray(stack) * 10_000).astype(np.uint16))
    return np.concatenate(stacks), params


def test_phase_live_reconstructs_each_z_stack_as_the_offline_job():
    from napari_gpuscope.compute.phase import PhaseResult

    frames, params = phase_stacks(2, 7)
    core, _ = make_core(frames)
    session = live.attach(core, "phase", params, device=DEVICE, frames_per_stack=7)
    core.mda.run(z_stacks(2, 7))
    assert session.wait(WAIT)
    assert (session.frames_received, session.frames_processed) == (14, 14)
    results = session.results()
    assert len(results) == 2 and session.result() is results[-1]
    for t, result in enumerate(results):
        assert isinstance(result, PhaseResult)
        expected = offline("phase", None, frames[7 * t : 7 * (t + 1)], params)
        assert result.phase.tobytes() == expected.phase.tobytes()
        assert result.absorption.tobytes() == expected.absorption.tobytes()
        assert result.summary() == expected.summary()


def test_tv_of_each_z_stack_equals_the_registry_job_on_each_stack():
    from napari_gpuscope.compute import tv

    frames = blinking(12, size=16)  # 3 stacks of 4 slices
    core, _ = make_core(frames)
    params = tv.TVParams(weight=8.0)
    session = live.attach(core, "tv", params, device=DEVICE, frames_per_stack=4)
    core.mda.run(z_stacks(3, 4))
    assert session.wait(WAIT)
    result = session.result()
    assert result.image.shape == (3, 4, 16, 16)
    for t in range(3):
        expected = offline("tv", None, frames[4 * t : 4 * (t + 1)], params)
        assert result.image[t].tobytes() == expected.image.tobytes()
    assert result.spacing == (0.0, 1.0, 1.0, 1.0)


def test_a_stack_is_kept_or_dropped_whole():
    buffer = live.FrameBuffer(7, unit=3)
    kept = [buffer.put(np.full((2, 2), i)) for i in range(12)]
    # Two stacks fit (6 frames); the third's first frame finds room for 1 of its 3: all of it
    # is dropped, and the fourth's too.
    assert kept == [True] * 6 + [False] * 6
    assert (buffer.received, buffer.kept, buffer.dropped) == (12, 6, 6)
    buffer.release(3)  # the worker has taken the first stack
    assert [buffer.put(np.full((2, 2), i)) for i in range(12, 15)] == [True] * 3
    assert buffer.take(6, 9)[:, 0, 0].tolist() == [12, 13, 14]


# -- no frame lost or counted twice -------------------------------------------------------------


def test_every_frame_is_processed_once_in_order():
    """A unit profile makes the correction the identity: the result is the frames received,
    so a frame lost, repeated or reordered shows."""
    frames = 60
    stack = (np.arange(frames)[:, None, None] * 7 + np.zeros((1, 16, 16))).astype(np.uint16)
    core, _ = make_core(stack)
    session = live.attach(
        core,
        "flatfield",
        None,
        device=DEVICE,
        job="apply",
        profile=unit_profile((16, 16)),
        capacity=frames,
    )
    acquire(core, frames)
    assert session.wait(WAIT)
    assert (session.frames_received, session.frames_processed, session.frames_dropped) == (
        frames,
        frames,
        0,
    )
    assert np.array_equal(session.result().image, stack.astype(np.float32))


# -- stopping the acquisition midway ------------------------------------------------------------


def test_an_acquisition_stopped_midway_leaves_a_valid_partial_result():
    from napari_gpuscope.compute.esrrf import EsrrfParams

    stack = blinking(12)
    params = EsrrfParams(magnification=2)
    core, _ = make_core(stack)
    session = live.attach(core, "esrrf", params, device=DEVICE)
    seen = []

    def cancel_at_seven(image, *_):
        seen.append(1)
        if len(seen) == 7:
            core.mda.cancel()

    core.mda.events.frameReady.connect(cancel_at_seven)
    acquire(core, len(stack))
    core.mda.events.frameReady.disconnect(cancel_at_seven)
    assert session.wait(WAIT)
    received = session.frames_received
    assert 7 <= received < 12
    result = session.result()
    assert result.frames_analysed == received and not result.stopped_early
    expected = offline("esrrf", None, stack[:received], params)
    assert result.image.tobytes() == expected.image.tobytes()
    assert np.isfinite(result.image).all()


# -- a slow consumer drops frames, never the camera's rate --------------------------------------


def _intervals(core, frames: int) -> list[float]:
    stamps: list[float] = []

    def stamp(*_):
        stamps.append(time.perf_counter())

    core.mda.events.frameReady.connect(stamp)
    acquire(core, frames)
    core.mda.events.frameReady.disconnect(stamp)
    return list(np.diff(stamps))


def test_a_slow_consumer_drops_counted_frames_and_leaves_the_camera_rate_alone():
    from napari_gpuscope.compute import tv

    frames, capacity = 40, 4
    stack = blinking(frames, size=32)
    core, _ = make_core(stack, exposure_ms=2.0)
    baselines = [statistics.median(_intervals(core, frames)) for _ in range(2)]

    gate = threading.Event()

    class Blocked(live.LiveMethod):
        """Holds its first frame until the acquisition is over: the slowest consumer."""

        def run(self, buffer, control):
            buffer.wait_for(1)
            frame = buffer.take(0, 1)[0]
            buffer.release(1)
            gate.wait(WAIT)
            control.processed(1)
            return frame  # not a result: the test looks at the counters only

        def partial_result(self):
            return None

    spec = METHODS["tv"].job_spec()
    slow = Blocked(spec, tv.TVParams(weight=1.0), DEVICE, {})
    session = live.LiveSession(live.CoreSource(core), slow, capacity=capacity, drop_policy="skip")
    with_session = _intervals(core, frames)
    gate.set()
    assert session.wait(WAIT)
    # The worker took one frame and held it; the buffer kept `capacity` more; the rest dropped.
    assert session.frames_received == frames
    assert session.frames_dropped == frames - 1 - capacity
    assert session.frames_held <= capacity
    # The camera's frame intervals with the session are within a generous bound of the
    # baselines measured here (the callback only copies a frame).
    assert statistics.median(with_session) <= 1.5 * max(baselines)


# -- detaching leaves nothing behind ------------------------------------------------------------


def test_detaching_midway_leaves_no_thread_or_callback():
    from napari_gpuscope.compute.esrrf import EsrrfParams

    stack = blinking(16)
    core, _ = make_core(stack)
    before_connections = connections(core)
    before_threads = set(threading.enumerate())
    session = live.attach(core, "esrrf", EsrrfParams(magnification=2), device=DEVICE)
    assert connections(core)["frameReady"] == before_connections["frameReady"] + 1
    seen = []

    def detach_at_six(image, *_):
        seen.append(1)
        if len(seen) == 6:
            session.detach()

    core.mda.events.frameReady.connect(detach_at_six)
    acquire(core, len(stack))
    core.mda.events.frameReady.disconnect(detach_at_six)
    assert session.done
    assert connections(core) == before_connections
    assert set(threading.enumerate()) == before_threads
    result = session.result()
    assert result.stopped_early and 1 <= result.frames_analysed <= 6
    assert session.frames_received <= 6


# -- a napari image layer that grows ------------------------------------------------------------


def test_a_growing_layer_is_followed_and_equals_the_offline_job():
    from napari.layers import Image

    from napari_gpuscope.compute.flatfield import BasicParams

    stack = blinking(9, size=20) + np.uint16(10)
    profile = shading_profile((20, 20))
    layer = Image(stack[:2], name="acquiring")
    before = len(layer.events.data.callbacks)
    session = live.attach(
        layer, "flatfield", BasicParams(), device=DEVICE, job="apply", profile=profile
    )
    for end in (3, 6, 9):
        layer.data = stack[:end]
    # napari emits the data event in this thread: the frames are in the buffer already.
    session.finish()
    assert session.wait(WAIT)
    assert len(layer.events.data.callbacks) == before
    assert session.frames_received == 9
    expected = offline(
        "flatfield", "apply", stack, BasicParams(), profile=profile, measure_shading=False
    )
    assert session.result().image.tobytes() == expected.image.tobytes()


# -- refusals -----------------------------------------------------------------------------------


def test_what_cannot_run_live_is_refused_at_attach():
    from napari_gpuscope.compute.esrrf import EsrrfParams

    feed = live.FrameFeed()
    threads = set(threading.enumerate())
    with pytest.raises(ValueError, match="drift_correction"):
        live.attach(feed, "esrrf", EsrrfParams(drift_correction=True), device=DEVICE)
    with pytest.raises(ValueError, match="measure_resolution"):
        live.attach(feed, "esrrf", EsrrfParams(measure_resolution=True), device=DEVICE)
    with pytest.raises(ValueError, match="needs \\['profile'\\]"):
        live.attach(feed, "flatfield", None, device=DEVICE, job="apply")
    with pytest.raises(ValueError, match="does not run live"):
        live.attach(feed, "esrrf", None, device=DEVICE, job="sweep")
    with pytest.raises(TypeError, match="cannot attach"):
        live.attach(object(), "tv", None, device=DEVICE)
    assert set(threading.enumerate()) == threads


def test_frames_of_another_shape_end_the_session_in_words():
    feed = live.FrameFeed()
    session = live.attach(feed, "tv", {"weight": 1.0}, device=DEVICE)
    feed.push(np.ones((8, 8)))
    feed.push(np.ones((9, 9)))
    assert session.wait(WAIT)
    feed.push(np.ones((8, 8)))  # after the refusal: refused too (the intake is closed)
    # Refused frames are counted apart from the drop policy's: nothing fell behind.
    assert (session.frames_dropped, session.frames_refused) == (0, 2)
    assert session.frames_received == 3 and session.frames_processed == 1
    assert "frame 1 is (9, 9) float64, the first was (8, 8) float64" in session.refused
    assert "a live session takes frames of one shape" in session.refused
    assert session.result().image.shape == (1, 8, 8)


def test_a_failing_job_ends_the_session_and_result_says_why():
    feed = live.FrameFeed()
    session = live.attach(feed, "tv", {"weight": 1.0}, device=DEVICE)
    bad = np.ones((8, 8))
    bad[2, 3] = np.nan
    feed.push(bad)
    assert session.wait(WAIT)
    feed.push(np.ones((8, 8)))  # after the failure: counted, not kept
    assert (session.frames_received, session.frames_processed, session.frames_dropped) == (2, 0, 1)
    with pytest.raises(RuntimeError, match="live Denoise failed") as raised:
        session.result()
    assert "NaN" in str(raised.value.__cause__) or "finite" in str(raised.value.__cause__)
    session.detach()


def test_latest_is_the_running_esrrf_reconstruction():
    from napari_gpuscope.compute.esrrf import EsrrfParams

    stack = blinking(6)
    params = EsrrfParams(magnification=2)
    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", params, device=DEVICE, max_frames=6)
    for frame in stack[:2]:
        feed.push(frame)
    assert session.wait_for_frames(2, WAIT)
    assert session.latest() is None  # asked for now: made at the next frame
    feed.push(stack[2])
    assert session.wait_for_frames(3, WAIT)
    running = session.latest()
    assert running.tobytes() == offline("esrrf", None, stack[:3], params).image[0].tobytes()
    for frame in stack[3:]:
        feed.push(frame)
    assert session.wait(WAIT)  # max_frames reached: the job ends by itself
    assert not session.result().stopped_early
    assert session.result().image.tobytes() == offline("esrrf", None, stack, params).image.tobytes()


def test_an_mda_that_is_not_z_stacks_of_the_size_given_is_refused_in_words():
    from napari_gpuscope.compute import tv

    frames = blinking(8, size=16)
    core, _ = make_core(frames)
    session = live.attach(core, "tv", tv.TVParams(weight=8.0), device=DEVICE, frames_per_stack=4)
    core.mda.run(z_stacks(2, 3))  # stacks of 3 slices, not 4
    assert session.wait(WAIT)
    assert "not z-stacks of 4 slices" in session.refused
    # What would be valid, in words: the MDA's own number of z positions.
    assert "(its axes tz, 3 z positions)" in session.refused
    assert "must be its 3 z positions" in session.refused
    assert session.frames_processed == 0 and session.frames_dropped == 0
    assert session.frames_refused == session.frames_received == 6


def test_stop_and_keep_while_the_job_waits_for_a_frame():
    from napari_gpuscope.compute.esrrf import EsrrfParams

    stack = blinking(5)
    params = EsrrfParams(magnification=2)
    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", params, device=DEVICE)
    for frame in stack:
        feed.push(frame)
    assert session.wait_for_frames(5, WAIT)  # the job now waits for a sixth frame
    session.stop()
    assert session.wait(WAIT)
    result = session.result()
    assert result.stopped_early and result.frames_analysed == 5
    assert result.image.tobytes() == offline("esrrf", None, stack, params).image.tobytes()
    feed.push(stack[0])  # after the stop: disconnected, not even received
    assert session.frames_received == 5 and session.frames_pending == 0
    session.detach()


def test_an_mda_refused_for_z_stacks_is_told_what_would_be_valid():
    import useq

    from napari_gpuscope.live._sources import stack_order_problem

    z = {"range": 4.0, "step": 1.0}  # 5 z positions
    assert (
        stack_order_problem(useq.MDASequence(time_plan={"interval": 0, "loops": 2}, z_plan=z), 5)
        is None
    )
    wrong_count = stack_order_problem(
        useq.MDASequence(time_plan={"interval": 0, "loops": 2}, z_plan=z), 16
    )
    assert "not z-stacks of 16 slices" in wrong_count and "must be its 5 z positions" in wrong_count
    outer_z = useq.MDASequence(time_plan={"interval": 0, "loops": 2}, z_plan=z, axis_order="zt")
    assert "z must be the MDA's innermost axis" in stack_order_problem(outer_z, 5)
    flat = useq.MDASequence(time_plan={"interval": 0, "loops": 3})
    assert "follows an MDA with a z plan" in stack_order_problem(flat, 5)
