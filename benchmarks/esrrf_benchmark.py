"""eSRRF: ours and NanoPyx side by side on the same stack, in one process.

Time per frame and peak memory of ``napari_gpuscope.compute.esrrf.esrrf`` and of NanoPyx 2.1.5
``nanopyx.methods.eSRRF`` (``_force_run_type="threaded"``), with the same parameters, and the
largest difference between the two outputs. Peak memory: the resident set size above the
level at the call's start, sampled every 2 ms (host), and ``torch.cuda.max_memory_allocated``
(device) for ours on a GPU, where the per-frame time of a job's kernels (gradients and the RGC
folded into the temporal sums, a chunk of 16 frames) is also taken with CUDA events.

Run it in a NanoPyx environment with this repository's ``src`` on the path (NanoPyx is never a
dependency of the plugin)::

    PYTHONPATH=src /work/peers/nanopyx/venv/bin/python benchmarks/esrrf_benchmark.py \\
        --frames 20 --size 64 --device cpu

Without NanoPyx installed only our side runs.

``--drift-frames N`` adds drift estimation and correction (issue 19) on an N-frame stack of
``--drift-size`` pixels (default 512): ms per frame of ``estimate_drift`` (blocks of
``--drift-averaging`` frames, reference "first") and of ``correct_drift`` on ``--device``, and
of NanoPyx's ``DriftEstimator.estimate`` (same block size, ``ref_option=0``, threaded) and its
``DriftCorrector.apply_correction`` (OpenCV) when NanoPyx is installed::

    PYTHONPATH=src /work/peers/nanopyx/venv/bin/python benchmarks/esrrf_benchmark.py \\
        --frames 4 --size 32 --device cpu --drift-frames 200
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import numpy as np
import psutil
import torch


class PeakRSS:
    """Peak resident memory above the level at entry, sampled in a background thread."""

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.process = psutil.Process(os.getpid())

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def mib(self) -> float:
        return (self.peak - self.start) / 2**20


def blinking(frames: int, size: int) -> np.ndarray:
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    return blinking_filaments_stack(frames, (size, size))[0]


def ours(stack: np.ndarray, args: argparse.Namespace) -> dict:
    from napari_gpuscope.compute import esrrf

    device = torch.device(args.device)
    kwargs = {"magnification": args.magnification, "radius": args.radius, "device": device}
    esrrf.esrrf(stack[:2], **kwargs)  # warm-up: kernel compile and self-test, allocator
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    with PeakRSS() as rss:
        start = time.perf_counter()
        out = esrrf.esrrf(stack, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    result = {
        "ms_per_frame": 1e3 * seconds / len(stack),
        "peak_host_mib": round(rss.mib, 1),
        "output": out,
    }
    if device.type == "cuda":
        result["peak_device_mib"] = round(
            (torch.cuda.max_memory_allocated(device) - base) / 2**20, 1
        )
        from napari_gpuscope.compute.esrrf._pipeline import FramePipeline
        from napari_gpuscope.compute.esrrf._temporal import TemporalAccumulator

        params = esrrf.EsrrfParams(**{k: v for k, v in kwargs.items() if k != "device"})
        pipeline = FramePipeline(*stack.shape[1:], params, device, "bench")
        accumulator = TemporalAccumulator(pipeline.output_shape, params.temporal, device)
        frames = torch.from_numpy(stack[:16].astype(np.float32)).to(device)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        pipeline.stage(frames, accumulator)  # a job's kernels for one chunk (not committed)
        begin.record()
        for _ in range(5):
            pipeline.stage(frames, accumulator)
        end.record()
        end.synchronize()
        result["kernel_ms_per_frame_cuda_events"] = begin.elapsed_time(end) / (5 * 16)
    return result


def nanopyx(stack: np.ndarray, args: argparse.Namespace) -> dict | None:
    try:
        from nanopyx.methods import eSRRF
    except ImportError:
        return None
    kwargs = {"magnification": args.magnification, "radius": args.radius}
    eSRRF(stack[:2], _force_run_type="threaded", **kwargs)  # warm-up
    with PeakRSS() as rss:
        start = time.perf_counter()
        out = np.asarray(eSRRF(stack, _force_run_type="threaded", **kwargs), np.float32)
        seconds = time.perf_counter() - start
    return {
        "ms_per_frame": 1e3 * seconds / len(stack),
        "peak_host_mib": round(rss.mib, 1),
        "output": out.reshape(1, *out.shape[-2:]),
    }


def drift(args: argparse.Namespace) -> dict:
    """ms per frame of drift estimation and correction, ours and (if installed) NanoPyx's."""
    from napari_gpuscope.compute import esrrf

    stack = blinking(args.drift_frames, args.drift_size)
    device = torch.device(args.device)
    averaging = args.drift_averaging
    esrrf.estimate_drift(stack[: 2 * averaging], time_averaging=averaging, device=device)

    def timed(run) -> tuple[float, object]:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return 1e3 * (time.perf_counter() - start) / len(stack), out

    estimate_ms, result = timed(
        lambda: esrrf.estimate_drift(stack, time_averaging=averaging, device=device)
    )
    correct_ms, _ = timed(lambda: esrrf.correct_drift(stack, result.shifts, device=device))
    report: dict[str, object] = {
        "stack": list(stack.shape),
        "time_averaging": averaging,
        "ours": {
            "estimate_ms_per_frame": round(estimate_ms, 3),
            "correct_ms_per_frame": round(correct_ms, 3),
        },
    }
    try:
        from nanopyx.methods.drift_alignment.corrector import DriftCorrector
        from nanopyx.methods.drift_alignment.estimator import DriftEstimator
    except ImportError:
        return report
    estimator = DriftEstimator(verbose=False)
    start = time.perf_counter()
    estimator.estimate(
        stack.astype(np.float32),
        time_averaging=averaging,
        max_expected_drift=0,
        ref_option=0,
        apply=False,
    )
    theirs_estimate = 1e3 * (time.perf_counter() - start) / len(stack)
    corrector = DriftCorrector()
    corrector.estimator_table = estimator.estimator_table
    start = time.perf_counter()
    corrector.apply_correction(stack)
    theirs_correct = 1e3 * (time.perf_counter() - start) / len(stack)
    report["nanopyx"] = {
        "estimate_ms_per_frame": round(theirs_estimate, 3),
        "correct_ms_per_frame": round(theirs_correct, 3),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--magnification", type=int, default=5)
    parser.add_argument("--radius", type=float, default=1.5)
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--drift-frames", type=int, default=0, help="0: no drift section")
    parser.add_argument("--drift-size", type=int, default=512)
    parser.add_argument("--drift-averaging", type=int, default=50)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    stack = blinking(args.frames, args.size)
    report: dict[str, object] = {
        "stack": list(stack.shape),
        "dtype": str(stack.dtype),
        "magnification": args.magnification,
        "radius": args.radius,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
    mine = ours(stack, args)
    theirs = nanopyx(stack, args)
    out_mine = mine.pop("output")
    report["ours"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in mine.items()}
    if theirs is not None:
        out_theirs = theirs.pop("output")
        report["nanopyx_threaded"] = {k: round(v, 3) for k, v in theirs.items()}
        report["speedup"] = round(theirs["ms_per_frame"] / mine["ms_per_frame"], 2)
        report["max_abs_diff_over_max"] = float(
            np.abs(out_mine - out_theirs).max() / np.abs(out_theirs).max()
        )
    if args.drift_frames:
        report["drift"] = drift(args)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
