"""Flat-field (BaSiC): ours and BaSiCPy 2.0 side by side on the same tiles, in one process.

For T = 50, 200, 1000 tiles of 256 x 256 (synthetic, known flatfield and darkfield;
``sample_data/_shading.py``) and with/without darkfield estimation: fit time, peak memory,
flatfield error against the truth, and the ratios. On a GPU our fit is timed with CUDA events;
BaSiCPy runs on the same device it picks (``device="cuda"`` when available, else CPU).

BaSiCPy is not a dependency of the plugin: run this in an environment that has both, e.g.
BaSiCPy's own venv with this repository's ``src`` on the path::

    /work/peers/basicpy/venv/bin/python benchmarks/flatfield_benchmark.py --tiles 50 200
    python benchmarks/flatfield_benchmark.py --device cuda            # ours only without basicpy

Writes ``flatfield_benchmark.json`` into ``--out`` (default: the current folder) and prints a
table. Peak memory: ``torch.cuda.max_memory_allocated`` on a GPU; on the CPU the growth of the
process's peak resident set (``ru_maxrss``) during the fit, which only rises (run one
configuration per process for exact CPU numbers).
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from napari_gpuscope.compute.flatfield import fit_basic
from napari_gpuscope.sample_data._shading import shaded_tiles


def rel_rmse(estimate: np.ndarray, truth: np.ndarray) -> float:
    estimate = estimate / estimate.mean()
    return float(np.sqrt(((estimate - truth) ** 2).mean()))


def _measure(fit, device: str) -> tuple[object, float, float]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fit()
        stop.record()
        stop.synchronize()
        return result, start.elapsed_time(stop) / 1000, torch.cuda.max_memory_allocated() / 2**20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    result = fit()
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result, seconds, after - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--no-basicpy", action="store_true")
    args = parser.parse_args()
    try:
        if args.no_basicpy:
            raise ImportError
        from basicpy import BaSiC
    except ImportError:
        BaSiC = None
    rows = []
    for n in args.tiles:
        truth = shaded_tiles(n, (args.size, args.size), seed=0, dark_offset=100.0)
        for dark in (False, True):
            fit_basic(truth.images[:8], get_darkfield=dark, device=args.device)  # warm up
            ours, seconds, memory = _measure(
                functools.partial(fit_basic, truth.images, get_darkfield=dark, device=args.device),
                args.device,
            )
            row = {
                "tiles": n,
                "tile": f"{args.size}x{args.size}",
                "darkfield": dark,
                "device": args.device,
                "ours_s": round(seconds, 3),
                "ours_peak_mib": round(memory, 1),
                "ours_error": round(rel_rmse(ours.flatfield, truth.flatfield), 5),
                "ours_converged": ours.all_converged,
                "ours_passes": ours.reweight_passes[0],
            }
            if BaSiC is not None:
                basic = BaSiC(get_darkfield=dark, device=args.device)
                _, seconds, memory = _measure(
                    functools.partial(basic.fit, truth.images), args.device
                )
                row.update(
                    basicpy_s=round(seconds, 3),
                    basicpy_peak_mib=round(memory, 1),
                    basicpy_error=round(rel_rmse(basic.flatfield, truth.flatfield), 5),
                    speedup=round(seconds / row["ours_s"], 2),
                )
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "flatfield_benchmark.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
