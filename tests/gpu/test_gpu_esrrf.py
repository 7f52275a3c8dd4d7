"""eSRRF: fused kernels against their twins and whole jobs on a real GPU."""

from __future__ import annotations

import math

import pytest
import torch

from napari_gpuscope.compute.esrrf import _kernels as esrrf_kernels
from napari_gpuscope.compute.kernels import CupyBackend

pytestmark = pytest.mark.gpu


ESRRF_SETTINGS = [
    # (frames, rows, cols, magnification, radius, centred, sensitivity, weighting)
    (3, 64, 48, 5, 1.5, False, 1.0, True),
    (2, 37, 53, 2, 1.0, False, 2.0, False),
    (2, 40, 40, 3, 2.0, True, 0.5, True),
    (1, 128, 96, 4, 1.5, True, 1.5, True),
]


@pytest.mark.parametrize("setting", ESRRF_SETTINGS, ids=lambda s: f"M{s[3]}-R{s[4]}")
def test_esrrf_kernels_match_twins(gpu, setting):
    from napari_gpuscope.compute.esrrf._ops import FrameGeometry

    frames_n, rows, cols, m, radius, centred, sensitivity, weighting = setting
    gen = torch.Generator().manual_seed(m)
    frames = (100 + 80 * torch.rand((frames_n, rows, cols), generator=gen)).to(gpu)
    geometry = FrameGeometry.build(rows, cols, m, radius, centred, gpu)
    chain = esrrf_kernels.FusedChain(geometry, gpu)
    lattice = (frames_n, 2 * rows + 1, 2 * cols + 1)
    want = [torch.empty(lattice, device=gpu) for _ in range(2)]
    got = [torch.full(lattice, math.nan, device=gpu) for _ in range(2)]
    esrrf_kernels._half_twin(frames, *want, chain.row_half, chain.col_half)
    bound = esrrf_kernels.half_gradients.bind(frames, *got, chain.row_half, chain.col_half)
    assert bound.path.path == "kernel", bound.path
    bound(frames, *got, chain.row_half, chain.col_half)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-3)
    kwargs = {"geometry": geometry, "sensitivity": sensitivity, "weighting": weighting}
    args = (*want, frames, chain.row_m, chain.col_m, chain.lut, chain.counts)
    out_twin = torch.empty((frames_n, rows * m, cols * m), device=gpu)
    out_kernel = torch.full_like(out_twin, math.nan)
    esrrf_kernels._rgc_twin(*args, out_twin, **kwargs)
    bound = esrrf_kernels.rgc.bind(*args, out_kernel)
    assert bound.path.path == "kernel", bound.path
    bound(*args, out_kernel, **kwargs)
    scale = float(out_twin.abs().max())
    torch.testing.assert_close(out_kernel, out_twin, rtol=1e-4, atol=1e-5 * scale)


def test_esrrf_job_matches_the_cpu_reference_and_memory_does_not_grow_with_frames(gpu, kit_record):
    import numpy as np

    from napari_gpuscope.compute import esrrf

    rng = np.random.default_rng(0)
    stack = rng.poisson(120, (200, 128, 128)).astype(np.uint16)
    ours = esrrf.esrrf(stack[:20], device=gpu, frames_per_chunk=8)
    cpu = esrrf.esrrf(stack[:20], device="cpu", frames_per_chunk=8)
    np.testing.assert_allclose(ours, cpu, rtol=0, atol=1e-4 * np.abs(cpu).max())
    peaks = {}
    for frames in (20, 200):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(gpu)
        torch.cuda.reset_peak_memory_stats(gpu)
        esrrf.esrrf(stack[:frames], device=gpu, frames_per_chunk=10)
        peaks[frames] = torch.cuda.max_memory_allocated(gpu) - base
    kit_record("esrrf_peak_bytes_vs_frames", peaks)
    assert peaks[200] <= 1.05 * peaks[20] + (1 << 20), peaks


def test_esrrf_kernel_source_compiles_for_this_gpu(gpu):
    backend = CupyBackend(gpu)
    for name in esrrf_kernels.SOURCE.kernel_names:
        assert backend.function(esrrf_kernels.SOURCE, name) is not None


def test_esrrf_reads_a_cuda_input_after_the_stream_that_writes_it(gpu):
    """Issue 16, 1.1: frames 4-11 of a CUDA stack are written on the producer stream (torch's
    current one) by work queued behind a ~50 ms spin, while the job is paused after its
    first chunk; the next chunks must see the written frames, not the zeros before them."""
    import numpy as np

    from napari_gpuscope.compute import esrrf

    rng = np.random.default_rng(1)
    host = rng.poisson(120, (12, 64, 64)).astype(np.float32)
    cpu = esrrf.esrrf(host, device="cpu", frames_per_chunk=4)
    source = torch.from_numpy(host).to(gpu)
    producer = torch.cuda.Stream(gpu)
    producer.wait_stream(torch.cuda.current_stream(gpu))
    with torch.cuda.stream(producer):
        stack = torch.zeros_like(source)
        stack[:4].copy_(source[:4])
        job = esrrf.iter_esrrf(stack, device=gpu, frames_per_chunk=4)
        next(job)  # the first chunk is done; the job is paused
        torch.cuda._sleep(100_000_000)
        stack[4:].copy_(source[4:])
        try:
            while True:
                job.send(None)
        except StopIteration as done:
            ours = done.value.image
    np.testing.assert_allclose(ours, cpu, rtol=0, atol=1e-4 * np.abs(cpu).max())
