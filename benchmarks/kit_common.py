"""What the GPU kit's measurement modules share: CUDA-event timing, host time, the kill switch.

The kit (``benchmarks/gpu_kit.py``) and the per-method modules (``kit_tv.py``-style
``kit_<method>.py``) import this by name: ``benchmarks/`` is on ``sys.path`` when they run.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable

import torch

GIB = 1024**3


def median_event_ms(run: Callable[[], None], repeats: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def host_us(run: Callable[[], None], calls: int = 2000, warmup: int = 50) -> float:
    """Host microseconds per call of ``run`` (small launches: the GPU keeps up; otherwise the
    device lags and is drained at the end)."""
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


SLEEP_CYCLES = 100_000_000
"""GPU cycles (~50 ms) a stream spins before a timed batch, so the host's launches queue up
behind it and the events time the GPU alone."""


def gpu_ms(run: Callable[[], None], calls: int = 20, repeats: int = 3) -> float:
    """GPU milliseconds per call of ``run``, calls back to back behind a spin of the stream
    (host overhead hidden): the median over ``repeats`` batches of ``calls``."""
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(calls):
            run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / calls)
    return statistics.median(times)


@contextlib.contextmanager
def kill_switch(active: bool):
    from napari_gpuscope.compute.kernels import KILL_SWITCH_ENV

    previous = os.environ.get(KILL_SWITCH_ENV)
    if active:
        os.environ[KILL_SWITCH_ENV] = "1"
    else:
        os.environ.pop(KILL_SWITCH_ENV, None)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(KILL_SWITCH_ENV, None)
        else:
            os.environ[KILL_SWITCH_ENV] = previous
