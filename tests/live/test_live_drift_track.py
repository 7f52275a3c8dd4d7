"""The drift of a live eSRRF session, tracked as blocks complete: against the true drift of a
simulated blinking stack, and against the offline estimate's block shifts on the same frames."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from napari_gpuscope.compute.esrrf import estimate_drift
from napari_gpuscope.compute.esrrf._drift_params import DriftParams
from napari_gpuscope.live._live_drift import DriftTrack, LiveDriftTrack

BLOCK = 20


def drifting_blinking_stack(frames: int, drift: np.ndarray, size: int = 64, seed: int = 0):
    """Blinking emitters on a static sample moved by ``drift[t]`` (dy, dx) at frame ``t``,
    drawn through a Gaussian PSF with Poisson noise (shifted by scipy, not by our code)."""
    rng = np.random.default_rng(seed)
    emitters = np.round(rng.uniform(10, size - 10, (120, 2)))  # on the grid: moved exactly
    stack = np.empty((frames, size, size), np.float32)
    for t in range(frames):
        image = np.zeros((size, size))
        on = rng.random(len(emitters)) < 0.3
        whole = np.round(drift[t])
        for y, x in (emitters[on] + whole).astype(int):
            image[y, x] += 1.0
        # the sub-pixel rest of the drift: the blurred image moved by scipy's spline
        image = ndimage.gaussian_filter(image, 1.5) * 400
        image = ndimage.shift(image, drift[t] - whole, order=3, mode="nearest")
        stack[t] = rng.poisson(np.clip(image, 0, None) + 10.0)
    return stack


def test_block_shifts_follow_the_true_drift_as_blocks_complete():
    frames = 120
    t = np.arange(frames, dtype=float)
    drift = np.stack([0.02 * t, -0.015 * t], axis=1)  # 2.4 px and -1.8 px over the stack
    stack = drifting_blinking_stack(frames, drift)
    track = LiveDriftTrack(BLOCK, max_drift=None, device="cpu")
    seen = []
    for start in range(0, frames, 7):  # frames in uneven bites, as a worker reads them
        track.add(stack[start : start + 7])
        seen.append(len(track.track().centres))
    assert seen == sorted(seen) and seen[-1] == frames // BLOCK
    result = track.track()
    true_means = np.array([drift[k * BLOCK : (k + 1) * BLOCK].mean(0) for k in range(6)])
    expected = true_means - true_means[0]
    assert np.all(np.isfinite(result.shifts))
    # The block error is the offline estimator's (the next test): about 0.1 px here (0.09 to
    # 0.11 over seeds 0-3, from the window's edges and the blinking); 0.2 px bounds it and
    # is a tenth of the 2.4 px drift, so a track that lags a block (0.4 px) fails.
    assert np.abs(result.shifts - expected).max() < 0.2
    assert np.allclose(result.centres, np.arange(6) * BLOCK + (BLOCK - 1) / 2)


def test_block_shifts_equal_the_offline_estimates_blocks():
    """The same correlation as the offline estimate with reference="first": its block shifts,
    moved to the first block's origin, are the live ones (float64 sums added in another order
    differ in the last bits only)."""
    frames = 100
    t = np.arange(frames, dtype=float)
    drift = np.stack([0.5 * np.sin(t / 30), 0.01 * t], axis=1)
    stack = drifting_blinking_stack(frames, drift, seed=3)
    track = LiveDriftTrack(BLOCK, max_drift=None, device="cpu")
    track.add(stack)
    offline = estimate_drift(
        stack, DriftParams(time_averaging=BLOCK, reference="first"), device="cpu"
    )
    expected = offline.block_shifts - offline.block_shifts[0]
    np.testing.assert_allclose(track.track().shifts, expected, atol=1e-6)


def test_blocks_without_common_structure_are_not_measured_and_said_so():
    rng = np.random.default_rng(1)
    track = LiveDriftTrack(4, max_drift=None, device="cpu")
    track.add(rng.poisson(20.0, (12, 32, 32)).astype(np.float32))  # noise only
    result = track.track()
    assert len(result.centres) == 3 and result.measured == 0
    assert "not measured" in result.describe()


def test_the_status_waits_for_two_blocks():
    track = LiveDriftTrack(BLOCK, max_drift=None, device="cpu")
    assert track.track().describe() == f"drift: waiting for 2 blocks of {BLOCK} frames"
    with pytest.raises(ValueError, match="at least 2 frames"):
        LiveDriftTrack(1, max_drift=None, device="cpu")
    assert isinstance(track.track(), DriftTrack)


def test_a_live_esrrf_session_tracks_the_drift_and_keeps_it_in_its_facts():
    """Through a real session: the worker tracks the frames it processed (each once, in
    order), the session says so, and the facts a kept result records hold the track. The
    reconstruction is the offline job's (the live-equals-offline tests), untouched by it."""
    from napari_gpuscope import live
    from napari_gpuscope.live._live_esrrf import DEFAULT_DRIFT_BLOCK

    frames = 80
    t = np.arange(frames, dtype=float)
    drift = np.stack([0.025 * t, 0.0 * t], axis=1)
    stack = drifting_blinking_stack(frames, drift, size=48, seed=5)
    feed = live.FrameFeed()
    params = {"magnification": 2, "drift_time_averaging": BLOCK}
    session = live.attach(feed, "esrrf", params, device="cpu", measure_every=0, capacity=frames)
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(120)
    offline = LiveDriftTrack(BLOCK, max_drift=None, device="cpu")
    offline.add(stack)
    track = session.drift_track()
    np.testing.assert_array_equal(track.shifts, offline.track().shifts)  # same frames, order
    assert len(track.centres) == frames // BLOCK and track.measured == frames // BLOCK
    assert abs(track.shifts[-1, 0] - 0.025 * 3 * BLOCK) < 0.2  # 1.5 px down over 3 blocks
    facts = session.quality_facts()["drift"]
    assert facts["frames_per_block"] == BLOCK and len(facts["shifts"]) == frames // BLOCK
    assert DriftParams().time_averaging is None  # automatic by default: the live track's 50
    feed = live.FrameFeed()
    automatic = live.attach(feed, "esrrf", {"magnification": 2}, device="cpu", measure_every=0)
    assert automatic.method.params.drift_time_averaging is None  # a mapping: today's default
    for frame in stack[:4]:
        feed.push(frame)
    feed.end()
    assert automatic.wait(120)
    assert automatic.quality_facts()["drift"]["frames_per_block"] == DEFAULT_DRIFT_BLOCK


def test_the_drift_track_can_be_turned_off():
    from napari_gpuscope import live

    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", {"magnification": 2}, device="cpu", track_drift=False)
    for frame in np.random.default_rng(0).poisson(100, (4, 16, 16)).astype(np.uint16):
        feed.push(frame)
    feed.end()
    assert session.wait(120)
    assert session.drift_track() is None and "drift" not in session.quality_facts()
    with pytest.raises(ValueError, match="track_drift is for a live eSRRF"):
        live.attach(live.FrameFeed(), "tv", {"weight": 5.0}, device="cpu", track_drift=False)
