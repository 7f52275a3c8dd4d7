"""The fused eSRRF kernels (compute/esrrf/esrrf.cu) against their torch twins, without a GPU.

The unchanged .cu source is compiled with g++ (HostBackend) and run on random frames for
several magnifications, radii, both geometries, sensitivities below and above 1 and with and
without intensity weighting, also with threads in reverse order on a small grid; the kernel
that folds frames into the temporal sums must give exactly the sums of the per-frame maps
kernel; then whole runs go through the emulated kernels and must match NanoPyx's fixtures.
nvcc compiles the file to PTX when available.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf import _kernels
from napari_gpuscope.compute.esrrf._ops import FrameGeometry
from napari_gpuscope.compute.esrrf._temporal import TemporalAccumulator
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")
FIXTURES = np.load(Path(__file__).parents[1] / "fixtures" / "esrrf" / "nanopyx_esrrf.npz")


BACKENDS = {
    "host": HostBackend(),
    # threads last-to-first (a result that depends on the order is a race on a GPU) on a grid
    # far smaller than the work (every grid-stride loop turns several times)
    "reversed-small-grid": HostBackend(block=32, max_blocks=3, reverse=True),
}


SETTINGS = [
    (5, 1.5, False, 1.0, True),
    (2, 1.0, False, 2.0, False),
    (3, 2.0, True, 0.5, True),
    (4, 1.5, True, 1.5, True),
    (1, 1.0, False, 1.0, True),
]


def _case(m, radius, centred, batch=6):
    gen = torch.Generator().manual_seed(m)
    frames = 100 + 80 * torch.rand((batch, 13, 10), generator=gen)
    g = FrameGeometry.build(13, 10, m, radius, centred, torch.device("cpu"))
    return frames, g, _kernels.FusedChain(g, torch.device("cpu"))


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS.keys())
@pytest.mark.parametrize(("m", "radius", "centred", "sensitivity", "weighting"), SETTINGS)
def test_kernels_match_twins(backend, m, radius, centred, sensitivity, weighting):
    """Six frames (a group of four and one of two) through the gradient and per-frame RGC
    kernels and their twins."""
    frames, g, chain = _case(m, radius, centred)
    want = torch.empty((6, 27, 21, 2))
    got = torch.full((6, 27, 21, 2), np.nan)
    _kernels._half_twin(frames, want, chain.row_half, chain.col_half)
    _kernels.half_gradients.run_on(backend, frames, got, chain.row_half, chain.col_half)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    norms = want.norm(dim=-1)
    assert torch.allclose(norms[norms > 0], torch.ones(()), atol=1e-6)  # unit vectors

    kwargs = {"geometry": g, "sensitivity": sensitivity, "weighting": weighting}
    args = (want, frames, chain.row_m, chain.col_m, chain.lut)
    out_twin = torch.empty((6, 13 * m, 10 * m))
    out_kernel = torch.full_like(out_twin, np.nan)
    _kernels._rgc_twin(*args, out_twin, **kwargs)
    _kernels.rgc.run_on(backend, *args, out_kernel, **kwargs)
    scale = float(out_twin.abs().max())
    assert scale > 0
    torch.testing.assert_close(out_kernel, out_twin, rtol=1e-4, atol=1e-5 * scale)


def _accumulate(op_run, chain, g, grad, frames, acc, **kwargs):
    sums, edges, staged_sums, staged_edges = acc.buffers()
    f32 = torch.float32
    op_run(
        grad,
        frames,
        chain.row_m,
        chain.col_m,
        chain.lut,
        sums.view(f32),
        edges,
        staged_sums.view(f32),
        staged_edges,
        geometry=g,
        statistic=acc.mode,
        continuing=acc.continuing,
        **kwargs,
    )
    acc.staged(frames.shape[0])
    acc.commit()


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS.keys())
@pytest.mark.parametrize("statistic", ["AVG", "VAR", "TAC2"])
@pytest.mark.parametrize(("m", "radius", "centred", "sensitivity", "weighting"), SETTINGS[:4])
def test_accumulating_kernel_folds_exactly_what_the_maps_kernel_computes(
    backend, statistic, m, radius, centred, sensitivity, weighting
):
    """Chunks of 6, 1 and 5 frames through ``esrrf_rgc_accumulate`` give bit for bit the sums
    and edges that folding the ``esrrf_rgc`` maps of the same frames gives (the same device
    code computes the values; float64 sums of float32 values in frame order), and the twin's
    within float32 rounding of the values."""
    frames, g, chain = _case(m, radius, centred, batch=12)
    grad = chain.gradients(frames)  # twins here: the same input for every path
    kwargs = {"sensitivity": sensitivity, "weighting": weighting}
    shape = g.output_shape
    fused = TemporalAccumulator(shape, statistic, torch.device("cpu"))
    twin = TemporalAccumulator(shape, statistic, torch.device("cpu"))
    folded = TemporalAccumulator(shape, statistic, torch.device("cpu"))
    for start, stop in ((0, 6), (6, 7), (7, 12)):
        part = (grad[start:stop].contiguous(), frames[start:stop].contiguous())
        kernel = functools.partial(_kernels.rgc_accumulate.run_on, backend)
        _accumulate(kernel, chain, g, *part, fused, **kwargs)
        _accumulate(_kernels._accumulate_twin, chain, g, *part, twin, **kwargs)
        maps = torch.empty((stop - start, *shape))
        _kernels.rgc.run_on(
            backend, *part, chain.row_m, chain.col_m, chain.lut, maps, geometry=g, **kwargs
        )
        folded.add(maps)
    assert fused.count == folded.count == twin.count == 12
    torch.testing.assert_close(fused.sums, folded.sums, rtol=0, atol=0)
    torch.testing.assert_close(fused.edges, folded.edges, rtol=0, atol=0)
    for got, want in zip([*fused.sums, *fused.edges], [*twin.sums, *twin.edges], strict=True):
        scale = float(want.abs().max())
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * scale)
    result = twin.result()
    scale = float(result.abs().max())
    assert scale > 0
    torch.testing.assert_close(fused.result(), result, rtol=1e-3, atol=1e-4 * scale)


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
