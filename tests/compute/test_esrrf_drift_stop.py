"""Stop & keep during a drift estimate (issue 19): the estimate finishes the block it measures
(and a second: a trace needs two), returns the trace of the frames those blocks cover, and an
eSRRF run stopped during its estimate reconstructs the covered frames only. Oracles: the
simulator's true drift and scikit-image's phase_cross_correlation of the blocks' means."""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack, true_drift
from job_helpers import stop_after

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf import DriftParams, EsrrfParams

FRAMES, BLOCK = 200, 25


@pytest.fixture(scope="module")
def drifting():
    truth = true_drift(FRAMES, seed=2)
    stack, _ = blinking_drifting_stack(truth, shape=(96, 96), n_emitters=250, seed=3)
    return stack, truth


@pytest.mark.parametrize("reference", ["first", "previous", "mean"])
def test_a_stopped_estimate_returns_the_trace_of_the_blocks_it_measured(
    drifting, reference, cpu_device
):
    stack, truth = drifting
    params = DriftParams(reference=reference, time_averaging=BLOCK)
    job = esrrf.iter_estimate_drift(stack, params=params, frames_per_chunk=5, device=cpu_device)
    result, after = stop_after(job, 2)
    assert result.stopped_early and len(result.block_frames) == 2
    covered = result.block_frames[-1][1]
    assert covered == 2 * BLOCK and result.shifts.shape == (covered, 2)
    assert after <= 2 * BLOCK // 5 + 2  # a block and a half of chunks, not the whole stack
    error = result.shifts - (truth[:covered] - truth[0])
    assert np.sqrt(np.mean(error**2)) < 0.15
    assert "stopped early: frames 0-49 only" in result.describe()
    assert result.summary()["stopped_early"] is True
    # The GPU kit runs this folder where scikit-image may be missing: skip there, not fail.
    registration = pytest.importorskip("skimage.registration")
    blocks = [stack[a:b].astype(np.float64).mean(0) for a, b in result.block_frames]
    step, _, _ = registration.phase_cross_correlation(
        blocks[0], blocks[1], upsample_factor=100, normalization=None
    )
    if reference != "mean":  # against the mean of the frames read, each block on its own
        np.testing.assert_allclose(
            result.block_shifts[1] - result.block_shifts[0], -step, atol=0.05
        )


def test_an_esrrf_run_stopped_during_its_drift_estimate_keeps_the_covered_frames(
    drifting, cpu_device
):
    stack, _ = drifting
    params = EsrrfParams(magnification=2, drift_correction=True, drift_time_averaging=BLOCK)
    job = esrrf.iter_esrrf(stack, params=params, frames_per_chunk=5, device=cpu_device)
    result, after = stop_after(job, 3)
    assert result.stopped_early and result.drift.stopped_early
    covered = result.drift.shifts.shape[0]
    assert covered == 2 * BLOCK and after <= 2 * BLOCK // 5 + 3
    first, stop = result.time_points[0]
    assert first == 0 and 0 < stop <= covered and result.frames_analysed == stop
    again = esrrf.esrrf(
        stack[:stop], params=params, drift_shifts=result.drift.shifts[:stop], device=cpu_device
    )
    np.testing.assert_allclose(result.image, again, rtol=1e-5, atol=1e-6)


def test_channels_stopped_during_a_drift_estimate_keep_channel_0(drifting, cpu_device):
    stack, _ = drifting
    channels = np.stack([stack, stack[::-1].copy()])
    params = EsrrfParams(
        magnification=2,
        drift_correction=True,
        drift_time_averaging=BLOCK,
        channel_registration="translation",
    )
    job = esrrf.iter_esrrf(channels, params=params, frames_per_chunk=5, device=cpu_device)
    result, _ = stop_after(job, 2)
    assert result.stopped_early and len(result.channels) == 1
    assert result.registration is None and result.drift.stopped_early
    assert result.channels[0].frames_analysed <= result.drift.shifts.shape[0]
    assert np.isfinite(result.image).all()
