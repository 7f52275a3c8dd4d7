"""Where a job's host time goes, per function: the cases whose GPU time the kernels do not explain.

The H200 runs of 2026-11-29 left three such gaps (``benchmarks/README.md``): an eSRRF job of 64
frames of 512² took ~250 ms while each added frame cost ~0.4 ms; live flat-field apply took 17 ms
per 2048² frame where the arithmetic is a fraction of a millisecond; live eSRRF took 9.6 ms per
frame with frames waiting against 1.5 ms for a frame alone. This script profiles each case
once after a warm-up, sampling every thread's Python stack every millisecond
(:class:`StackSampler`; time the host waits for the GPU shows in the function that waits, e.g.
a ``.cpu()`` or an event's ``synchronize``), and prints per thread the functions it was inside
and in, as shares of its samples, so one GPU run names the culprits::

    python benchmarks/job_profile.py                        # first GPU, every case
    python benchmarks/job_profile.py --device cpu --quick   # small sizes (checks the script)
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter, defaultdict
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


class StackSampler:
    """Every thread's Python stack, sampled every ``interval`` seconds from a thread of its
    own: where each thread spends its time, worker threads included. (cProfile cannot do
    this from Python 3.12 on, the GPU machine's: it allows one profiler per process and that
    one sees only the thread that enabled it.)"""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.own: dict[str, Counter[str]] = defaultdict(Counter)
        self.inside: dict[str, Counter[str]] = defaultdict(Counter)
        self.samples: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                thread = names.get(ident, str(ident))
                keys = []
                while frame is not None:
                    code = frame.f_code
                    keys.append(f"{Path(code.co_filename).name}:{code.co_name}")
                    frame = frame.f_back
                self.samples[thread] += 1
                self.own[thread][keys[0]] += 1
                self.inside[thread].update(set(keys))

    def report(self, name: str) -> str:
        lines = []
        for thread, count in self.samples.most_common():
            if count < 5:
                continue
            lines.append(f"\n### {name}: thread {thread!r}, {count} samples\n")
            lines.append("| function | inside % | own % |")
            lines.append("|---|---|---|")
            for key, inside in self.inside[thread].most_common(TOP):
                own = self.own[thread][key]
                lines.append(f"| {key} | {100 * inside / count:.1f} | {100 * own / count:.1f} |")
        return "\n".join(lines)


def profile(name: str, run: Callable[[], None], device: str) -> str:
    """The case's stacks, sampled over one run after a warm-up run."""
    run()  # first use: kernels, plans, caches
    _sync(device)
    with StackSampler() as sampler:
        start = time.perf_counter()
        run()
        _sync(device)
        seconds = time.perf_counter() - start
    return f"\n## {name}: {seconds * 1e3:.1f} ms\n" + sampler.report(name)


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
