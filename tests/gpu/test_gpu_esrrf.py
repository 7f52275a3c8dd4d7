"""eSRRF on a real GPU: fused kernels against their twins, whole jobs against the CPU reference
for every statistic and input kind, a CUDA input written on its producer's stream, flat
memory, and a ceiling on host synchronisations per frame."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.devices import count_host_syncs
from napari_gpuscope.compute.esrrf import _kernels as esrrf_kernels
from napari_gpuscope.compute.esrrf._ops import FrameGeometry
from napari_gpuscope.compute.esrrf._temporal import TemporalAccumulator
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.kernels import CupyBackend

pytestmark = pytest.mark.gpu

ESRRF_SETTINGS = [
    # (frames, rows, cols, magnification, radius, centred, sensitivity, weighting)
    (6, 64, 48, 5, 1.5, False, 1.0, True),
    (3, 37, 53, 2, 1.0, False, 2.0, False),
    (5, 40, 40, 3, 2.0, True, 0.5, True),
    (1, 128, 96, 4, 1.5, True, 1.5, True),
]

SYNCS_PER_FRAME_CEILING = 0.5
"""Host synchronisations per frame of a 64-frame job (uint16 or float32 host frames, chunks of
8): a constant few per job (tables, the result's download) and at most one per chunk (the
finiteness check of float frames)."""


def _setting_id(s) -> str:
    return f"M{s[3]}-R{s[4]}-B{s[0]}"


@pytest.mark.parametrize("setting", ESRRF_SETTINGS, ids=_setting_id)
def test_esrrf_kernels_match_twins(gpu, setting):
    frames_n, rows, cols, m, radius, centred, sensitivity, weighting = setting
    gen = torch.Generator().manual_seed(m)
    frames = (100 + 80 * torch.rand((frames_n, rows, cols), generator=gen)).to(gpu)
    geometry = FrameGeometry.build(rows, cols, m, radius, centred, gpu)
    chain = esrrf_kernels.FusedChain(geometry, gpu)
    lattice = (frames_n, 2 * rows + 1, 2 * cols + 1, 2)
    want = torch.empty(lattice, device=gpu)
    got = torch.full(lattice, math.nan, device=gpu)
    esrrf_kernels._half_twin(frames, want, chain.row_half, chain.col_half)
    bound = esrrf_kernels.half_gradients.bind(frames, got, chain.row_half, chain.col_half)
    assert bound.path.path == "kernel", bound.path
    bound(frames, got, chain.row_half, chain.col_half)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    kwargs = {"geometry": geometry, "sensitivity": sensitivity, "weighting": weighting}
    args = (want, frames, chain.row_m, chain.col_m, chain.lut)
    out_twin = torch.empty((frames_n, rows * m, cols * m), device=gpu)
    out_kernel = torch.full_like(out_twin, math.nan)
    esrrf_kernels._rgc_twin(*args, out_twin, **kwargs)
    bound = esrrf_kernels.rgc.bind(*args, out_kernel)
    assert bound.path.path == "kernel", bound.path
    bound(*args, out_kernel, **kwargs)
    scale = float(out_twin.abs().max())
    torch.testing.assert_close(out_kernel, out_twin, rtol=1e-4, atol=1e-5 * scale)

    # The accumulating kernel folds what the maps kernel computes (same device code).
    for statistic in ("AVG", "VAR", "TAC2"):
        acc = TemporalAccumulator(geometry.output_shape, statistic, gpu)
        folded = TemporalAccumulator(geometry.output_shape, statistic, gpu)
        for _chunk in range(2):  # a first chunk, then one continuing it
            sums, edges, staged_sums, staged_edges = acc.buffers()
            f32 = torch.float32
            esrrf_kernels.rgc_accumulate(
                *args,
                sums.view(f32),
                edges,
                staged_sums.view(f32),
                staged_edges,
                statistic=statistic,
                continuing=acc.continuing,
                **kwargs,
            )
            acc.staged(frames_n)
            acc.commit()
            folded.add(out_kernel)
        for a, b in zip([*acc.sums, *acc.edges], [*folded.sums, *folded.edges], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * float(b.abs().max()))
    assert esrrf_kernels.rgc_accumulate.last_paths[str(gpu)].path == "kernel"


def _stack(frames=12, rows=64, cols=56, seed=0):
    rng = np.random.default_rng(seed)
    return rng.poisson(120, (frames, rows, cols)).astype(np.uint16)


@pytest.mark.parametrize("temporal", ["AVG", "VAR", "TAC2"])
def test_esrrf_job_matches_the_cpu_reference_for_every_input(gpu, temporal):
    """uint16 and float32 host frames and a float32 CUDA tensor, in chunks of 5 (a group of 4
    frames and one more), through the fused path; the CPU reference runs the twins."""
    stack = _stack()
    kwargs = {"temporal": temporal, "sensitivity": 1.5, "frames_per_chunk": 5}
    cpu = esrrf.esrrf(stack, device="cpu", **kwargs)
    sources = {
        "uint16": stack,
        "float32": stack.astype(np.float32),
        "cuda": torch.from_numpy(stack.astype(np.float32)).to(gpu),
    }
    for name, source in sources.items():
        result = run_job(esrrf.iter_esrrf(source, device=gpu, **kwargs))
        assert all(p.startswith("fused kernel") for p in result.kernel_paths.values()), name
        np.testing.assert_allclose(
            result.image, cpu, rtol=0, atol=1e-4 * np.abs(cpu).max(), err_msg=name
        )
        np.testing.assert_allclose(
            result.widefield[0], stack.astype(np.float64).mean(0), rtol=1e-6, err_msg=name
        )


def test_esrrf_memory_does_not_grow_with_frames(gpu, kit_record):
    stack = _stack(200, 128, 128, seed=1)
    peaks = {}
    for frames in (20, 200):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(gpu)
        torch.cuda.reset_peak_memory_stats(gpu)
        esrrf.esrrf(stack[:frames], device=gpu, frames_per_chunk=10, temporal="TAC2")
        peaks[frames] = torch.cuda.max_memory_allocated(gpu) - base
    kit_record("esrrf_peak_bytes_vs_frames", peaks)
    assert peaks[200] <= 1.05 * peaks[20] + (1 << 20), peaks


def test_esrrf_reads_a_cuda_input_after_the_stream_that_writes_it(gpu):
    """Issue 16, 1.1: frames 4-11 of a CUDA stack are written on the producer stream (torch's
    current one) by work queued behind a ~50 ms spin, while the job is paused after its
    first chunk; the next chunks must see the written frames, not the zeros before them."""
    host = _stack(seed=2).astype(np.float32)
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


def _count_syncs(run) -> int:
    return count_host_syncs(run)[1]


def test_esrrf_host_syncs_per_frame_stay_under_the_ceiling(gpu, kit_record):
    """torch.cuda.set_sync_debug_mode counts every synchronising call; 32 and 64 frames in
    chunks of 8: the four extra chunks add no synchronisation for uint16 frames and one each
    for float32 ones (their NaN check), and the whole job stays under the ceiling."""
    stack = _stack(64, 128, 128, seed=3)
    esrrf.esrrf(stack[:8], device=gpu, frames_per_chunk=8)  # compile and self-test first
    counts: dict[str, int] = {}
    for dtype in ("uint16", "float32"):
        for frames in (32, 64):
            part = stack[:frames].astype(dtype)
            counts[f"{dtype}_{frames}"] = _count_syncs(
                lambda part=part: esrrf.esrrf(part, device=gpu, frames_per_chunk=8)
            )
    per_frame = {k: round(v / int(k.split("_")[1]), 3) for k, v in counts.items()}
    kit_record("esrrf_host_syncs", {"counts": counts, "per_frame": per_frame})
    assert counts["uint16_64"] - counts["uint16_32"] <= 0, counts
    assert counts["float32_64"] - counts["float32_32"] <= 4, counts
    assert max(per_frame[k] for k in ("uint16_64", "float32_64")) <= SYNCS_PER_FRAME_CEILING


def test_esrrf_kernel_source_compiles_for_this_gpu(gpu):
    backend = CupyBackend(gpu)
    for name in esrrf_kernels.SOURCE.kernel_names:
        assert backend.function(esrrf_kernels.SOURCE, name) is not None
