"""Drift estimation and correction on a real GPU: the same trace as the CPU run (and as accurate
as NanoPyx's on its committed fixture), the same corrected frames, eSRRF with drift correction
equal to the CPU's, and the time per frame at 512 x 512."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import ndimage

from napari_gpuscope.compute.esrrf import correct_drift, esrrf, estimate_drift

pytestmark = pytest.mark.gpu

FIXTURE = Path(__file__).parents[1] / "fixtures" / "esrrf" / "nanopyx_drift.npz"


def rms(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def test_the_gpu_trace_equals_the_cpu_one_and_beats_nanopyx(gpu, kit_record):
    with np.load(FIXTURE) as data:
        stack, truth = data["stack"], data["true_shifts"]
        averaging, theirs = int(data["time_averaging"]), data["nanopyx_first"]
    on_gpu = estimate_drift(stack, time_averaging=averaging, device=gpu)
    on_cpu = estimate_drift(stack, time_averaging=averaging, device="cpu")
    np.testing.assert_allclose(on_gpu.shifts, on_cpu.shifts, atol=1e-3)
    assert rms(on_gpu.shifts, truth) <= rms(theirs, truth)
    kit_record("drift_fixture_rms_px", rms(on_gpu.shifts, truth))


def test_correction_and_esrrf_with_drift_equal_the_cpu(gpu):
    with np.load(FIXTURE) as data:
        stack, truth = data["stack"][:100], data["true_shifts"][:100]
    np.testing.assert_allclose(
        correct_drift(stack, truth, device=gpu),
        correct_drift(stack, truth, device="cpu"),
        rtol=1e-5,
        atol=1e-3,
    )
    kwargs = {"magnification": 2, "drift_correction": True, "drift_time_averaging": 20}
    np.testing.assert_allclose(
        esrrf(stack, device=gpu, **kwargs),
        esrrf(stack, device="cpu", **kwargs),
        rtol=1e-3,
        atol=1e-3,
    )


def test_drift_time_per_frame_at_512(gpu, kit_record):
    rng = np.random.default_rng(0)
    # A still, textured sample (pure noise has no drift to measure, and is refused as such).
    scene = ndimage.gaussian_filter(rng.random((512, 512)), 2.0) * 4000 + 150
    stack = rng.poisson(scene, (200, 512, 512)).astype(np.uint16)
    shifts = np.cumsum(rng.normal(0, 0.05, (200, 2)), axis=0)
    estimate_drift(stack[:100], device=gpu)  # warm-up (cuFFT plans)
    correct_drift(stack[:8], shifts[:8], device=gpu)
    for name, run in (
        # blocks of 50, the records' length since 2026-11-25 (the default until 2026-11-30)
        ("estimate", lambda: estimate_drift(stack, time_averaging=50, device=gpu)),
        ("estimate_automatic", lambda: estimate_drift(stack, device=gpu)),  # today's default
        ("correct", lambda: correct_drift(stack, shifts, device=gpu)),
    ):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        kit_record(f"drift_{name}_512_ms_per_frame", 1e3 * (time.perf_counter() - start) / 200)
    still = estimate_drift(stack, device=gpu).shifts
    kit_record("drift_still_512_max_abs_px", float(np.abs(still).max()))
    assert np.abs(still).max() < 0.05  # the sample does not move
