"""Where a job's host time goes, per function: the cases whose GPU time the kernels do not explain.

The H200 runs of 2026-11-29 left three such gaps (``benchmarks/README.md``): an eSRRF job of 64
frames of 512² took ~250 ms while each added frame cost ~0.4 ms; live flat-field apply took 17 ms
per 2048² frame where the arithmetic is a fraction of a millisecond; live eSRRF took 9.6 ms per
frame with frames waiting against 1.5 ms for a frame alone. This script profiles each case
once after a warm-up with :mod:`cProfile` (host time per function; time the host waits for the
GPU shows in the function that waits, e.g. a ``.cpu()`` or an event's ``synchronize``) and
prints the top functions by total and by own time, so one GPU run names the culprits::

    python benchmarks/job_profile.py                        # first GPU, every case
    python benchmarks/job_profile.py --device cpu --quick   # small sizes (checks the script)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_benchmark import blinking_frames, flat_profile

from napari_gpuscope import live
from napari_gpuscope.compute.devices import device_label, resolve_device
from napari_gpuscope.compute.jobs import run_job

TOP = 22
WAIT_S = 600.0  # a bound on a hung session, never a pacing


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def esrrf_job(device: str, size: int, frames: int) -> Callable[[], None]:
    from napari_gpuscope.compute.esrrf import EsrrfParams, iter_esrrf

    stack = blinking_frames(frames, size)
    params = EsrrfParams(magnification=5)
    return lambda: run_job(iter_esrrf(stack, params=params, device=device))


def live_flat_apply(device: str, size: int, frames: int) -> Callable[[], None]:
    from napari_gpuscope.compute.flatfield import BasicParams

    stack = blinking_frames(frames, size)
    profile = flat_profile(size)
    params = BasicParams(output_dtype="uint16", clip_negative=True)

    def run() -> None:
        feed = live.FrameFeed("flat", expected=frames)
        session = live.attach(
            feed,
            "flatfield",
            params,
            device=device,
            job="apply",
            profile=profile,
            capacity=frames,
        )
        _drain(feed, session, stack)

    return run


def live_esrrf(device: str, size: int, frames: int) -> Callable[[], None]:
    from napari_gpuscope.compute.esrrf import EsrrfParams

    stack = blinking_frames(frames, size)
    params = EsrrfParams(magnification=4)

    def run() -> None:
        feed = live.FrameFeed("esrrf", expected=frames)
        session = live.attach(
            feed, "esrrf", params, device=device, capacity=frames, max_frames=frames
        )
        _drain(feed, session, stack)

    return run


def _drain(feed: live.FrameFeed, session: live.LiveSession, stack: np.ndarray) -> None:
    """All frames waiting at once (the sustained case), then the session's end."""
    for frame in stack:
        feed.push(frame)
    feed.end()
    if not session.wait(WAIT_S) or session.frames_dropped:
        raise RuntimeError(session.describe())
    session.result()


def profile(name: str, run: Callable[[], None], device: str) -> str:
    """The case's profile after a warm-up run, as text (the live cases run their worker on
    another thread: cProfile is enabled there too through ``threading.setprofile``)."""
    import threading

    run()  # first use: kernels, plans, caches
    _sync(device)
    profiler = cProfile.Profile()
    threading.setprofile(lambda *a: None)  # make sure no stale hook is left on new threads
    profilers = [profiler]

    def start_thread_profile(*_args: object) -> None:
        sub = cProfile.Profile()
        profilers.append(sub)
        threading.setprofile(None)
        sub.enable()

    threading.setprofile(start_thread_profile)
    try:
        profiler.enable()
        run()
        _sync(device)
        profiler.disable()
    finally:
        threading.setprofile(None)
    for sub in profilers[1:]:
        sub.disable()
    out = io.StringIO()
    stats = pstats.Stats(*profilers, stream=out)
    for key in ("cumulative", "tottime"):
        out.write(f"\n### {name}: top {TOP} by {key}\n\n```\n")
        stats.sort_stats(key).print_stats(TOP)
        out.write("```\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda:N or cpu (default: first GPU)")
    parser.add_argument("--quick", action="store_true", help="small frames, few of them")
    args = parser.parse_args(argv)
    device = str(resolve_device(args.device) if args.device else resolve_device("cuda"))
    quick = args.quick
    cases = {
        "eSRRF job, 64 frames, M5": esrrf_job(device, 32 if quick else 512, 4 if quick else 64),
        "live flat-field apply, 50 frames": live_flat_apply(
            device, 64 if quick else 2048, 4 if quick else 50
        ),
        "live eSRRF M4, 100 frames waiting": live_esrrf(
            device, 32 if quick else 512, 4 if quick else 100
        ),
    }
    print(f"# job profiles · {device_label(device)} · torch {torch.__version__}")
    for name, run in cases.items():
        print(profile(name, run, device), flush=True)


if __name__ == "__main__":
    main()
