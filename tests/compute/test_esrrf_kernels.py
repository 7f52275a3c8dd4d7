"""The fused eSRRF kernels (compute/esrrf/esrrf.cu) against their torch twins, without a GPU.

The unchanged .cu source is compiled with g++ (HostBackend) and run on random frames for
several magnifications, radii, both geometries, sensitivities below and above 1 and with and
without intensity weighting; then whole runs go through the emulated kernels and must match
NanoPyx's fixtures. nvcc compiles the file to PTX when available.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf import _kernels
from napari_gpuscope.compute.esrrf._ops import FrameGeometry, half_gradients_twin
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")
FIXTURES = np.load(Path(__file__).parents[1] / "fixtures" / "esrrf" / "nanopyx_esrrf.npz")


@pytest.fixture(scope="module")
def backend():
    return HostBackend()


SETTINGS = [
    (5, 1.5, False, 1.0, True),
    (2, 1.0, False, 2.0, False),
    (3, 2.0, True, 0.5, True),
    (4, 1.5, True, 1.5, True),
    (1, 1.0, False, 1.0, True),
]


@pytest.mark.parametrize(("m", "radius", "centred", "sensitivity", "weighting"), SETTINGS)
def test_kernels_match_twins(backend, m, radius, centred, sensitivity, weighting):
    gen = torch.Generator().manual_seed(m)
    frames = 100 + 80 * torch.rand((2, 13, 10), generator=gen)
    g = FrameGeometry.build(13, 10, m, radius, centred, torch.device("cpu"))
    chain = _kernels.FusedChain(g, torch.device("cpu"))

    want = [torch.empty((2, 27, 21)) for _ in range(2)]
    got = [torch.full((2, 27, 21), np.nan) for _ in range(2)]
    _kernels._half_twin(frames, *want, chain.row_half, chain.col_half)
    _kernels.half_gradients.run_on(backend, frames, *got, chain.row_half, chain.col_half)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
    twin_g = half_gradients_twin(frames, g)
    torch.testing.assert_close(want[0], twin_g[0], rtol=1e-5, atol=1e-4)

    kwargs = {"geometry": g, "sensitivity": sensitivity, "weighting": weighting}
    args = (*want, frames, chain.row_m, chain.col_m, chain.lut, chain.counts)
    out_twin = torch.empty((2, 13 * m, 10 * m))
    out_kernel = torch.full_like(out_twin, np.nan)
    _kernels._rgc_twin(*args, out_twin, **kwargs)
    _kernels.rgc.run_on(backend, *args, out_kernel, **kwargs)
    scale = float(out_twin.abs().max())
    assert scale > 0
    torch.testing.assert_close(out_kernel, out_twin, rtol=1e-4, atol=1e-5 * scale)


def test_whole_runs_through_the_emulated_kernels_match_nanopyx(monkeypatch):
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    meta = json.loads(str(FIXTURES["meta"]))
    names = {"temporal_correlation": "temporal", "doIntensityWeighting": "intensity_weighting"}
    for case in ("var_m2_r1_s2_noiw", "tac2_m3_r2_s05_fpt4_nompc"):
        kwargs = {names.get(k, k): v for k, v in meta["cases"][case]["kwargs"].items()}
        job = esrrf.iter_esrrf(FIXTURES[f"{case}/input"], device="cpu", **kwargs)
        from napari_gpuscope.compute.jobs import run_job

        result = run_job(job)
        reference = FIXTURES[f"{case}/output"]
        assert np.abs(result.image - reference).max() <= 1e-5 * np.abs(reference).max()
        assert all("host-emulated kernel" in path for path in result.kernel_paths.values())


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
def test_esrrf_kernels_compile_with_nvcc():
    nvcc_compile_check(_kernels.SOURCE)
