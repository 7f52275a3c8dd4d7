"""GPU kit measurements of eSRRF (run by ``benchmarks/gpu_kit.py bench``).

``bench(device)`` returns JSON-able measurements; ``exercise(device)`` launches every fused
kernel of the method once at a small size (what compute-sanitizer runs); ``profile(device)``
launches each at a representative size (what Nsight Compute profiles).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from kit_common import GIB, kill_switch, median_event_ms


def bench(device: torch.device) -> dict:
    """eSRRF: CUDA-event time per 512 x 512 frame at M = 5 (design target <= 1 ms) for the
    fused chain and the twins, achieved tap rate, end-to-end time per frame from a uint16 host
    stack, and peak device memory against the number of frames."""
    from napari_gpuscope.compute import esrrf
    from napari_gpuscope.compute.esrrf._pipeline import FramePipeline

    result: dict[str, object] = {}
    rng = np.random.default_rng(0)
    stack = rng.poisson(150, (400, 512, 512)).astype(np.uint16)
    params = esrrf.EsrrfParams()  # M 5, R 1.5
    batch = 16
    frames = torch.from_numpy(stack[:batch].astype(np.float32)).to(device)
    for twin in (False, True):
        with kill_switch(twin):
            pipeline = FramePipeline(512, 512, params, device, "bench")
            ms = median_event_ms(lambda p=pipeline: p.maps(frames), repeats=10, warmup=2)
        taps = int(pipeline.geometry.table.counts().mean()) * 512 * 512 * 25
        result["twin" if twin else "fused"] = {
            "ms_per_frame": round(ms / batch, 4),
            "taps_per_s": f"{taps * batch / (ms * 1e-3):.3e}",
            "paths": pipeline.kernel_paths(),
        }
    start = time.perf_counter()
    esrrf.esrrf(stack[:200], device=device)
    torch.cuda.synchronize()
    result["end_to_end_ms_per_frame_200x512x512_uint16"] = round(
        (time.perf_counter() - start) / 200 * 1e3, 3
    )
    peaks = {}
    for n in (50, 400):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        esrrf.esrrf(stack[:n], device=device, frames_per_chunk=25)
        peaks[str(n)] = round((torch.cuda.max_memory_allocated(device) - base) / GIB, 4)
    result["peak_gib_vs_frames"] = peaks
    return result
