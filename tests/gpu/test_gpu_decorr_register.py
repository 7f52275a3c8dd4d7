"""Decorrelation resolution and channel registration on a real GPU: the same values as NanoPyx
(decorrelation, committed fixtures) and as the CPU run, and their time at 512 x 512."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import ndimage

from napari_gpuscope.compute.esrrf._decorr import decorrelation_resolution
from napari_gpuscope.compute.esrrf._register import apply_registration, register_channels

pytestmark = pytest.mark.gpu

FIXTURES = Path(__file__).parents[1] / "fixtures" / "esrrf"


def test_decorrelation_on_the_gpu_matches_nanopyx(gpu, kit_record):
    with np.load(FIXTURES / "nanopyx_decorr.npz") as data:
        names = sorted({key.split("/")[0] for key in data.files if key != "meta"})
        worst = 0.0
        for name in names:
            image = data[f"{name}/image"].astype(np.float32)
            expected = float(data[f"{name}/resolution"])
            ours = decorrelation_resolution(image, device=gpu).resolution
            worst = max(worst, abs(ours / expected - 1))
            assert ours == pytest.approx(expected, rel=0.10), name
    kit_record("decorr_worst_relative_difference_to_nanopyx", worst)


def test_decorrelation_time_at_512(gpu, kit_record):
    rng = np.random.default_rng(0)
    image = ndimage.gaussian_filter(rng.normal(size=(512, 512)), 2.0).astype(np.float32)
    decorrelation_resolution(image, device=gpu)  # warm-up (cuFFT plans)
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = decorrelation_resolution(image, device=gpu)
    torch.cuda.synchronize()
    kit_record("decorr_512_seconds", time.perf_counter() - start)
    cpu = decorrelation_resolution(image, device="cpu")
    assert result.resolution == pytest.approx(cpu.resolution, rel=1e-3)


def test_registration_on_the_gpu_equals_the_cpu(gpu, kit_record):
    with np.load(FIXTURES / "nanopyx_register.npz") as data:
        channels, truth = data["shift_1/channels"], data["shift_1/truth"]
        distorted = data["magnification/channels"]
    on_gpu = register_channels(channels, device=gpu)
    on_cpu = register_channels(channels, device="cpu")
    np.testing.assert_allclose(on_gpu.shifts, on_cpu.shifts, atol=1e-3)
    assert np.abs(on_gpu.shifts[1] - truth).max() < 0.1
    np.testing.assert_allclose(
        apply_registration(channels, on_gpu, device=gpu),
        apply_registration(channels, on_cpu, device="cpu"),
        rtol=1e-4,
        atol=1e-2,
    )
    elastic_gpu = register_channels(distorted, elastic=True, block_size=32, device=gpu)
    elastic_cpu = register_channels(distorted, elastic=True, block_size=32, device="cpu")
    np.testing.assert_allclose(elastic_gpu.fields, elastic_cpu.fields, atol=1e-3)
    stack = np.repeat(distorted[:, None], 200, axis=1)  # (2, 200, 128, 144)
    torch.cuda.synchronize()
    start = time.perf_counter()
    apply_registration(stack, elastic_gpu, device=gpu)
    kit_record("register_apply_elastic_200x128x144_seconds", time.perf_counter() - start)


def test_multi_channel_esrrf_on_the_gpu_equals_the_cpu(gpu, kit_record):
    """The whole (C, T, Y, X) job: drift of each channel, translation registration, eSRRF."""
    from napari_gpuscope.compute.esrrf import EsrrfParams, iter_esrrf
    from napari_gpuscope.compute.jobs import run_job

    rng = np.random.default_rng(3)
    points = (rng.random((64, 64)) > 0.99).astype(np.float32)  # a bool blur is all False
    scene = ndimage.gaussian_filter(points, 1.5)
    assert scene.max() > 0.05
    frames = []
    for offset in ((0.0, 0.0), (1.3, -0.8)):
        moved = ndimage.shift(scene, offset, order=3)
        blink = rng.random((60, 1, 1)) < 0.5
        frames.append(rng.poisson(2000 * moved[None] * blink + 20).astype(np.uint16))
    channels = np.stack(frames)
    params = EsrrfParams(
        magnification=2,
        drift_correction=True,
        drift_time_averaging=20,
        channel_registration="translation",
    )
    start = time.perf_counter()
    on_gpu = run_job(iter_esrrf(channels, params=params, device=gpu))
    torch.cuda.synchronize()
    kit_record("esrrf_two_channels_60x64x64_seconds", time.perf_counter() - start)
    on_cpu = run_job(iter_esrrf(channels, params=params, device="cpu"))
    np.testing.assert_allclose(on_gpu.registration.shifts, on_cpu.registration.shifts, atol=1e-3)
    np.testing.assert_allclose(on_gpu.image, on_cpu.image, rtol=1e-3, atol=1e-3)
