"""GPU kit measurements of flat-field (BaSiC) (run by ``benchmarks/gpu_kit.py bench``).

``bench(device)`` returns JSON-able measurements; ``exercise(device)`` launches every fused
kernel of the method once at a small size (what compute-sanitizer runs); ``profile(device)``
launches each at a representative size (what Nsight Compute profiles).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from kit_common import GIB, kill_switch, median_event_ms


def bench(device: torch.device) -> dict:
    """BaSiC: the fused ALM passes against their twins (CUDA events, bytes moved), and whole
    fits (256 x 256 tiles, working size 128) at T = 50, 200, 1000 with and without darkfield:
    CUDA-event time, peak memory, iterations, error against the known flatfield."""
    from napari_gpuscope.compute.flatfield import _ops as ff
    from napari_gpuscope.compute.flatfield import fit_basic
    from napari_gpuscope.sample_data._shading import shaded_tiles

    out: dict[str, object] = {"kernels": [], "fits": []}
    gen = torch.Generator().manual_seed(0)
    for t in (50, 1000):
        images, flat, baseline, dark, dual, weight, mu = ff._example_state(
            device, gen, 1, t, (128, 128)
        )
        sparse = torch.empty_like(images)
        column, square = torch.empty_like(flat), torch.empty_like(flat)
        runs = {
            "basic_sparse": (
                ff.basic_sparse,
                (images, flat, baseline, dark, dual, weight, mu, sparse),
            ),
            "basic_dual": (
                ff.basic_dual,
                (images, flat, baseline, dark, sparse, dual, mu, 1.5 * mu, column, square),
            ),
        }
        for name, (op, args) in runs.items():
            run = functools.partial(op, *args)
            row = {"op": name, "T": t, "bytes": 5 * images.numel() * 4}  # 3 reads, 1-2 writes
            for path, kill in (("kernel", False), ("twin", True)):
                with kill_switch(kill):
                    row[f"{path}_ms"] = round(median_event_ms(run), 4)
            row["kernel_gbps"] = round(row["bytes"] / row["kernel_ms"] / 1e6, 1)
            out["kernels"].append(row)
    for t in (50, 200, 1000):
        truth = shaded_tiles(t, (256, 256), seed=0, dark_offset=100.0)
        for dark in (False, True):
            fit_basic(truth.images[:8], get_darkfield=dark, device=device)  # warm up
            torch.cuda.reset_peak_memory_stats(device)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            profile = fit_basic(truth.images, get_darkfield=dark, device=device)
            stop.record()
            stop.synchronize()
            estimate = profile.flatfield / profile.flatfield.mean()
            out["fits"].append(
                {
                    "T": t,
                    "darkfield": dark,
                    "fit_ms": round(start.elapsed_time(stop), 1),
                    "peak_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 3),
                    "passes": profile.reweight_passes[0],
                    "converged": profile.all_converged,
                    "flat_rel_rmse": round(
                        float(np.sqrt(((estimate - truth.flatfield) ** 2).mean())), 5
                    ),
                }
            )
    return out
