"""Live processing: sustained frames/s and latency per method (issue 28).

A script source (:class:`napari_gpuscope.live.FrameFeed`) hands camera frames to a live
session, as a microscope's callback would. Two numbers per method:

- **sustained frames/s**: every frame of a run pushed at once into a buffer large enough to keep
  them all, then the time until the session has processed the last one. This is the rate the
  worker keeps up with; a camera faster than it makes counted drops.
- **latency ms**: one frame pushed, the clock stopped when the session says it is processed
  (its result is then what :meth:`LiveSession.latest` or ``result()`` returns). Median and 95th
  percentile over the frames after a warm-up. It excludes napari's redraw, which happens on the
  main thread after the result is ready and does not depend on the method.

For z-stack methods (phase) the unit is a whole stack, and the rate is given in stacks/s as
well as frames/s. eSRRF runs cumulatively (each frame joins the running reconstruction).

The GPU goals of issue 28 are printed beside the measured rows. On a CPU, rows measure the
reference path: compare them with each other, not with the goals. Run on an idle machine.

Usage::

    python benchmarks/live_benchmark.py                  # first GPU, the goals' sizes
    python benchmarks/live_benchmark.py --device cpu     # CPU reference path (a few minutes)
    python benchmarks/live_benchmark.py --device cpu --quick
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from napari_gpuscope import live
from napari_gpuscope.compute.devices import device_label, resolve_device

WAIT_S = 3600.0  # a bound on a hung session, never a pacing
DRAWN_FRAMES = 16


@dataclass(frozen=True)
class Case:
    """One live workload: how to make its frames and attach its session."""

    name: str
    size: int
    goal: str
    frames: Callable[[int, int], np.ndarray]
    attach: Callable[[live.FrameFeed, str, int], live.LiveSession]
    frames_per_unit: int = 1


def blinking_frames(count: int, size: int, seed: int = 0) -> np.ndarray:
    """Poisson camera frames of blinking emitters (uint16), as eSRRF and TV see them."""
    rng = np.random.default_rng(seed)
    emitters = rng.uniform(4, size - 4, (max(8, size * size // 400), 2))
    yy, xx = np.mgrid[:size, :size].astype(np.float32)
    base = np.full((size, size), 100.0, np.float32)
    stack = np.empty((count, size, size), np.uint16)
    # A few precomputed blink patterns keep frame making cheap beside the work measured.
    patterns = []
    for _ in range(min(count, 8)):
        image = base.copy()
        for y, x in emitters[rng.random(len(emitters)) < 0.3]:
            y0, y1, x0, x1 = int(y) - 4, int(y) + 5, int(x) - 4, int(x) + 5
            image[y0:y1, x0:x1] += 400 * np.exp(
                -((yy[y0:y1, x0:x1] - y) ** 2 + (xx[y0:y1, x0:x1] - x) ** 2) / 2.0
            )
        patterns.append(image)
    # Poisson draws of 2048² frames cost ~0.2 s each on the host: a run of 200 would spend
    # the benchmark's time making frames, so 16 noisy frames are drawn and cycled.
    drawn = [rng.poisson(patterns[t % len(patterns)]) for t in range(min(count, DRAWN_FRAMES))]
    for t in range(count):
        stack[t] = drawn[t % len(drawn)]
    return stack


def flat_profile(size: int):
    from napari_gpuscope.compute.flatfield import ShadingProfile

    yy, xx = np.mgrid[:size, :size] / size - 0.5
    return ShadingProfile.from_arrays(1.2 - 0.8 * (yy**2 + xx**2), camera_offset=100)


def phase_frames(count: int, size: int, slices: int = 8) -> np.ndarray:
    """``count`` brightfield z-stacks of a phase disc, flattened to frames (uint16)."""
    from napari_gpuscope.compute import phase

    params = phase_params()
    yy, xx = np.mgrid[:size, :size] - size / 2
    truth = (0.5 * (yy**2 + xx**2 < (size / 6) ** 2)).astype(np.float32)
    stack = np.asarray(phase.simulate_stack(truth, 0 * truth, params, slices))
    one = np.round(stack * 10_000).astype(np.uint16)
    return np.concatenate([one] * count)


def phase_params():
    from napari_gpuscope.compute import phase

    return phase.PhaseParams(
        wavelength=0.45,
        yx_pixel_size=0.325,
        z_pixel_size=1.0,
        na_illumination=0.4,
        na_detection=0.55,
        index_of_refraction=1.0,
    )


PHASE_SLICES = 8


def cases(quick: bool, on_gpu: bool) -> list[Case]:
    from napari_gpuscope.compute.esrrf import EsrrfParams
    from napari_gpuscope.compute.flatfield import BasicParams
    from napari_gpuscope.compute.tv import TVParams

    big = 512 if quick else 2048
    esrrf_size = 128 if quick else 512
    phase_size = 128 if quick else (512 if not on_gpu else 1024)

    def attach_tv(feed, device, size):
        return live.attach(feed, "tv", TVParams(strength=1.0), device=device, capacity=10**6)

    def attach_flat(feed, device, size):
        params = BasicParams(output_dtype="uint16", clip_negative=True)
        return live.attach(
            feed,
            "flatfield",
            params,
            device=device,
            job="apply",
            profile=flat_profile(size),
            capacity=10**6,
        )

    def attach_esrrf(feed, device, size, **tracks):
        return live.attach(
            feed,
            "esrrf",
            EsrrfParams(magnification=4),
            device=device,
            capacity=10**6,
            max_frames=10**6,
            **tracks,
        )

    def attach_esrrf_bare(feed, device, size):
        # Without the quality measurements and the drift track the dock runs by default:
        # their host work (the first measurement always runs) against the reconstruction's.
        return attach_esrrf(feed, device, size, measure_every=0, track_drift=False)

    def attach_phase(feed, device, size):
        return live.attach(
            feed,
            "phase",
            phase_params(),
            device=device,
            capacity=10**6,
            frames_per_stack=PHASE_SLICES,
        )

    return [
        Case("TV", big, "≤ 10 ms/frame at 2048²", blinking_frames, attach_tv),
        Case("flat-field apply", big, "≤ 2 ms/frame at 2048²", blinking_frames, attach_flat),
        Case(
            "eSRRF M4 (cumulative)",
            esrrf_size,
            "≥ 1,000 frames/s at 512²",
            blinking_frames,
            attach_esrrf,
        ),
        Case(
            "eSRRF M4 (cumulative, no quality or drift track)",
            esrrf_size,
            "≥ 1,000 frames/s at 512²",
            blinking_frames,
            attach_esrrf_bare,
        ),
        Case(
            f"phase ({PHASE_SLICES}-slice stacks)",
            phase_size,
            "(no goal)",
            lambda n, s: phase_frames(n, s, PHASE_SLICES),
            attach_phase,
            PHASE_SLICES,
        ),
    ]


def sustained(case: Case, device: str, units: int) -> float:
    """Frames/s of the worker with every frame waiting in the buffer (after one warm-up unit,
    which pays for first-use set-up; the final result's assembly is not counted)."""
    per = case.frames_per_unit
    frames = case.frames(units + 1, case.size)
    feed = live.FrameFeed(case.name, expected=len(frames))
    session = case.attach(feed, device, case.size)
    for frame in frames[:per]:
        feed.push(frame)
    if not session.wait_for_frames(per, WAIT_S):
        raise RuntimeError(f"{case.name}: {session.describe()}")
    start = time.perf_counter()
    for frame in frames[per:]:
        feed.push(frame)
    if not session.wait_for_frames(len(frames), WAIT_S):
        raise RuntimeError(f"{case.name}: {session.describe()}")
    elapsed = time.perf_counter() - start
    feed.end()
    if not session.wait(WAIT_S) or session.frames_dropped:
        raise RuntimeError(f"{case.name}: {session.describe()}")
    session.result()
    return (len(frames) - per) / elapsed


def latency(case: Case, device: str, units: int, warmup: int) -> list[float]:
    """Seconds from the last frame of a unit pushed to the unit processed, one at a time."""
    frames = case.frames(units + warmup, case.size)
    feed = live.FrameFeed(case.name, expected=len(frames))
    session = case.attach(feed, device, case.size)
    seconds = []
    per = case.frames_per_unit
    for unit in range(units + warmup):
        for frame in frames[unit * per : (unit + 1) * per - 1]:
            feed.push(frame)
        start = time.perf_counter()
        feed.push(frames[(unit + 1) * per - 1])
        if not session.wait_for_frames((unit + 1) * per, WAIT_S):
            raise RuntimeError(f"{case.name}: {session.describe()}")
        if unit >= warmup:
            seconds.append(time.perf_counter() - start)
    feed.end()
    session.wait(WAIT_S)
    session.detach()
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda:N or cpu (default: first GPU)")
    parser.add_argument("--quick", action="store_true", help="small frames, few of them")
    parser.add_argument("--units", type=int, default=None, help="frames (stacks) per run")
    args = parser.parse_args(argv)
    device = str(resolve_device(args.device) if args.device else resolve_device("cuda"))
    on_gpu = device.startswith("cuda")
    units = args.units or (200 if on_gpu else (6 if args.quick else 20))
    print(f"# live benchmark · {device_label(device)} · torch {torch.__version__}")
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print()
    print(
        "| method | frame | sustained frames/s | ms/frame | latency median ms | "
        "latency p95 ms | GPU goal |"
    )
    print("|---|---|---|---|---|---|---|")
    for case in cases(args.quick, on_gpu):
        rate = sustained(case, device, units)
        waits = latency(case, device, max(3, units // 4), warmup=1)
        p95 = sorted(waits)[max(0, round(0.95 * len(waits)) - 1)]
        unit_rate = (
            "" if case.frames_per_unit == 1 else (f" ({rate / case.frames_per_unit:.2f} stacks/s)")
        )
        print(
            f"| {case.name} | {case.size}² | {rate:.1f}{unit_rate} | {1000 / rate:.1f} | "
            f"{1000 * statistics.median(waits):.1f} | {1000 * p95:.1f} | {case.goal} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
