"""Batch throughput: positions per second and parallel efficiency on 1..N workers.

For each worker count W (CPU worker processes, or GPUs), a cluster is started and warmed up
(every worker imports the method and runs one position), then a fresh batch of N positions is
timed end to end (``run_batch``: planning, tasks, OME-Zarr writes, markers). Printed per W:

- positions/s, and the parallel efficiency ``rate(W) / (W * rate(1))`` (goal on GPUs: >= 85 %
  from 1 to 8);
- the mean time a task spends on its position (read + compute + write, each also shown alone:
  the run report's per-position stage times), and the scheduler's share: the fraction of the
  workers' time with no position in hand, ``1 - sum(busy) / (wall * W)`` from the report's
  busy time per worker (goal: < 5 %); each worker's busy / wall is printed too;
- the same positions computed directly in this process (no Dask) as a reference rate.

Usage::

    python benchmarks/batch_benchmark.py --device cpu --workers 1 2      # here (2 cores)
    python benchmarks/batch_benchmark.py --device cuda --workers 1 2 4 8 --positions 64 \
        --size 2048                                                      # an 8-GPU machine
"""

from __future__ import annotations

import argparse
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import tifffile


def _positions(folder: Path, count: int, size: int) -> None:
    from napari_gpuscope.sample_data._camera import simulate_camera
    from napari_gpuscope.sample_data._phantoms import fluorescence_phantom_2d

    folder.mkdir(parents=True, exist_ok=True)
    base = fluorescence_phantom_2d((size, size), seed=0)
    for index in range(count):
        image = simulate_camera(np.roll(base, 7 * index, axis=1), seed=index)
        tifffile.imwrite(folder / f"p{index:04d}.tif", image)


def _direct_rate(recipe, positions, device: str) -> float:
    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.methods import method

    job = method(recipe.method).job_function()
    params = recipe.params_model()
    run_job(job(positions[0].read(), params=params, device=device))  # warm-up
    start = time.perf_counter()
    for position in positions:
        run_job(job(position.read(), params=params, device=device))
    return len(positions) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (GPU workers 0..W-1)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--positions", type=int, default=16)
    parser.add_argument("--size", type=int, default=256, help="each position is size x size")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="TV tolerance")
    args = parser.parse_args()

    import torch

    from napari_gpuscope.batch.cluster import ClusterChoice, open_client
    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.batch.runner import run_batch

    torch.set_num_threads(1)
    scratch = Path(tempfile.mkdtemp(prefix="batch-benchmark-"))
    try:
        _positions(scratch / "in", args.positions, args.size)
        positions = discover(str(scratch / "in" / "*.tif"))
        recipe = Recipe.from_defaults("tv", tolerance=args.tolerance)
        direct_device = "cpu" if args.device == "cpu" else "cuda:0"
        direct = _direct_rate(recipe, positions, direct_device)
        print(
            f"# batch benchmark: TV on {args.positions} positions of {args.size}^2, "
            f"device {args.device}, host {platform.node()} ({platform.processor() or 'cpu'})"
        )
        print(f"direct in-process (1 {args.device}, no Dask): {direct:.2f} positions/s")
        print(
            "| workers | positions/s | efficiency | mean task s | read / compute / write s "
            "| scheduler share | busy / wall per worker |"
        )
        print("|---|---|---|---|---|---|---|")
        base = None
        for count in args.workers:
            device = "cpu" if args.device == "cpu" else ",".join(f"cuda:{i}" for i in range(count))
            choice = ClusterChoice(device=device, workers=count, dashboard="")
            with open_client(choice) as client:
                client.wait_for_workers(count)
                task_device = choice.task_device
                warm = positions[:count]
                run_batch(recipe, warm, scratch / f"warm{count}.zarr", client, device=task_device)
                report = run_batch(
                    recipe, positions, scratch / f"out{count}.zarr", client, device=task_device
                )
            assert not report.failed, report.failed
            rate = report.timings["positions_per_second"]
            base = base or rate
            efficiency = rate / (count * base)
            task = report.timings["mean_position_seconds"]
            workers = getattr(report, "workers", {}) or {}
            wall = report.timings["wall_seconds"]
            if workers:
                # The time the workers had no position in hand (a position's write overlaps
                # the next one's compute, so task times no longer add up to busy time).
                share = 1 - sum(w["busy_seconds"] for w in workers.values()) / (wall * count)
            else:
                share = (wall * count / len(positions) - task) / task
            stages = report.timings["mean_stage_seconds"]
            split = " / ".join(
                f"{stages.get(s, float('nan')):.3f}" for s in ("read", "compute", "write")
            )
            # The report's busy time per worker (absent before it had one: "-").
            busy = " ".join(f"{w['busy_seconds'] / wall:.0%}" for w in workers.values()) or "-"
            print(
                f"| {count} | {rate:.2f} | {efficiency:.0%} | {task:.3f} | {split} | {share:.1%} "
                f"| {busy} |"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
