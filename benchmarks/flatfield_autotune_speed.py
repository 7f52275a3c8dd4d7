"""Flat-field autotune on the CPU: the candidates all at once vs a few at a time (issue 30).

Runs ``autotune`` on the dock's sample (``sample_data.flatfield``: 48 tiles of 256 x 256, working
size 128) with the dock's defaults, once per schedule, and prints per schedule: wall, user and
system CPU seconds, minor page faults, the time of each reweighting pass (with how many problems
it fitted and their ALM iterations), the search's share and the final fit's; then checks that
both schedules chose the same smoothness with the same costs and the same profile, byte for byte.

    python benchmarks/flatfield_autotune_speed.py                 # both schedules, no darkfield
    python benchmarks/flatfield_autotune_speed.py --darkfield     # the offset sample, estimated
    python benchmarks/flatfield_autotune_speed.py --only grouped

Times on a shared machine say little without its load: the script prints ``uptime`` before and
after each run. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import torch

from napari_gpuscope.compute.flatfield import BasicParams, _autotune, iter_autotune
from napari_gpuscope.compute.flatfield._alm import FitState
from napari_gpuscope.sample_data import flatfield as sample

SCHEDULES = ("at-once", "grouped")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(schedule: str, darkfield: bool) -> dict:
    """One autotune with ``schedule``; its timings and result."""
    images = (sample.vignetted_tiles_with_offset if darkfield else sample.vignetted_tiles)()[0][0]
    params = BasicParams(get_darkfield=darkfield)
    real_group, real_steps = _autotune._group_size, _autotune.reweighting_steps
    passes: list[tuple[float, int, list[int]]] = []
    if schedule == "at-once":
        _autotune._group_size = lambda shape, device: None  # type: ignore[assignment]

    def timed_steps(*args, **kwargs):
        last = time.perf_counter()
        previous = None
        for step in real_steps(*args, **kwargs):
            if isinstance(step, FitState):
                now = time.perf_counter()
                ran = step.passes if previous is None else step.passes - previous
                fitted = [int(i) for i, r in zip(step.alm_iterations, ran, strict=True) if r]
                passes.append((now - last, len(fitted), fitted))
                previous, last = step.passes.clone(), now
            yield step

    _autotune.reweighting_steps = timed_steps  # type: ignore[assignment]
    load_before = _load()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    chose_at = None
    job = iter_autotune(images, params, device="cpu")
    try:
        while True:
            update = next(job)
            if chose_at is None and update.message.startswith("autotune chose"):
                chose_at = time.perf_counter()
    except StopIteration as done:
        result = done.value
    finally:
        _autotune._group_size, _autotune.reweighting_steps = real_group, real_steps
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "schedule": schedule,
        "wall": wall,
        "search": (chose_at or start) - start,
        "user": after.ru_utime - usage.ru_utime,
        "sys": after.ru_stime - usage.ru_stime,
        "faults": after.ru_minflt - usage.ru_minflt,
        "load": (load_before, _load()),
        "passes": passes,
        "result": result,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--darkfield", action="store_true", help="offset sample, darkfield on")
    parser.add_argument("--only", choices=SCHEDULES, help="run one schedule")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    runs = []
    for schedule in SCHEDULES:
        if args.only not in (None, schedule):
            continue
        r = run(schedule, args.darkfield)
        runs.append(r)
        print(
            f"\n{r['schedule']}: wall {r['wall']:.1f} s (search {r['search']:.1f} s), user "
            f"{r['user']:.1f} s, sys {r['sys']:.1f} s, {r['faults']} minor faults; load "
            f"{r['load'][0]} -> {r['load'][1]}; chose {r['result'].smoothness_flatfield:g}",
            flush=True,
        )
        for k, (seconds, problems, iterations) in enumerate(r["passes"], 1):
            print(f"  pass {k:2d}: {seconds:6.2f} s, {problems:2d} problems, ALM {iterations}")
    if len(runs) == 2:
        a, b = (r["result"] for r in runs)
        same = (
            a.costs == b.costs
            and a.smoothness_flatfield == b.smoothness_flatfield
            and all(
                np.asarray(getattr(a.profile, f)).tobytes()
                == np.asarray(getattr(b.profile, f)).tobytes()
                for f in ("flatfield", "darkfield", "baseline")
            )
        )
        print(f"\nsame costs, choice and profile (bytes): {same}")
        print(f"speed-up (wall): {runs[0]['wall'] / runs[1]['wall']:.2f}x")


if __name__ == "__main__":
    main()
