"""TV denoising: napari-gpuscope vs scikit-image, side by side on the same data.

Runs, in one process and on identical inputs (the sample-data phantoms plus Gaussian noise):

- ours, FGP with the duality-gap stopping rule (tolerance 1e-3) -- the plugin's default;
- ours, ``method="chambolle"`` (scikit-image parity mode: same iteration and stopping rule);
- ``skimage.restoration.denoise_tv_chambolle`` with its defaults (eps=2e-4, <= 200 iterations);
- ``denoise_tv_chambolle`` with eps=0, i.e. exactly 200 iterations;

and prints, per method: wall time, iterations, the relative duality gap (a certified bound on
``(P(u) - P*) / P(u)``, P = ROF energy), PSNR against the noise-free phantom, and the speed ratio
against scikit-image.

For scikit-image's output, which carries no dual certificate, the gap column is the bound
``(P(u) - P_low) / P(u)`` with ``P_low = P(u_ref) * (1 - gap_ref)`` a certified lower bound on the
optimum from a tightly converged reference solve of ours (tolerance 1e-5, at most 3000 iterations)
-- the same quantity our own gap bounds, so the columns are comparable.

Timing: on a GPU, ours is timed with CUDA events after a warm-up run (host->device transfer and the
copy back are included, as a user sees them); scikit-image always runs on the CPU and is timed with
``time.perf_counter``. With ``--device cpu`` ours runs on the CPU reference path: absolute times
then say nothing about GPU speed, only the ratios and the quality columns are meaningful.

Usage::

    python benchmarks/tv_benchmark.py                      # first GPU, 2D 1024^2 + 3D 32x256x256
    python benchmarks/tv_benchmark.py --device cpu --quick # CPU sanity run, < 2 minutes
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from skimage.metrics import peak_signal_noise_ratio
from skimage.restoration import denoise_tv_chambolle

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.devices import device_label, resolve_device
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.noise import estimate_noise_sigma
from napari_gpuscope.sample_data import fluorescence_phantom_2d, fluorescence_phantom_3d

NOISE_SIGMA = 0.1  # in the phantom's [0, 1] units: noisy PSNR ~ 20 dB
REFERENCE_TOLERANCE = 1e-5  # for the certified lower bound on the optimum
STRENGTH = 0.8  # weight = strength * sigma-hat (the best weight in the research runs was ~0.08)


@dataclass
class Row:
    method: str
    seconds: float
    iterations: str
    gap: float | None
    psnr: float


def rof_energy(u: np.ndarray, f: np.ndarray, weight: float) -> float:
    """P(u) = 1/2 ||u - f||^2 + weight * sum |grad u| (isotropic, forward differences, Neumann)."""
    u64 = u.astype(np.float64)
    squared = np.zeros_like(u64)
    for axis in range(u64.ndim):
        diff = np.diff(u64, axis=axis, append=np.take(u64, [-1], axis=axis))
        squared += diff * diff
    return 0.5 * float(np.sum((u64 - f.astype(np.float64)) ** 2)) + weight * float(
        np.sum(np.sqrt(squared))
    )


def gap_bound(u: np.ndarray, f: np.ndarray, weight: float, lower: float) -> float:
    """Certified bound on (P(u) - P*) / P(u) given a lower bound ``lower <= P*``."""
    energy = rof_energy(u, f, weight)
    return max(0.0, (energy - lower) / energy)


def time_call(fn: Callable[[], object], device: torch.device, repeats: int) -> tuple[float, object]:
    """Median wall time of ``fn`` (CUDA events on a GPU, after one warm-up call)."""
    result = fn()  # warm-up: kernel compilation, allocator, caches
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            result = fn()
            stop.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(stop) / 1000.0)
        else:
            t0 = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def time_cpu(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def run_case(
    name: str, truth: np.ndarray, device: torch.device, repeats: int, seed: int = 1
) -> list[Row]:
    rng = np.random.default_rng(seed)
    noisy = (truth + NOISE_SIGMA * rng.standard_normal(truth.shape)).astype(np.float32)
    sigma_hat = estimate_noise_sigma(noisy)
    weight = STRENGTH * sigma_hat

    def psnr(image: np.ndarray) -> float:
        return float(peak_signal_noise_ratio(truth, image, data_range=1))

    print(
        f"\n== {name}: shape {truth.shape}, sigma {NOISE_SIGMA} (estimated {sigma_hat:.4f}), "
        f"weight {weight:.4f}, noisy PSNR {psnr(noisy):.2f} dB"
    )

    def ours(method: str, tolerance: float, max_iterations: int) -> tv.TVResult:
        return run_job(
            tv.iter_denoise(
                noisy,
                weight,
                method=method,
                tolerance=tolerance,
                max_iterations=max_iterations,
                device=str(device),
            )
        )

    reference = ours("fgp", REFERENCE_TOLERANCE, 3000)
    # P* >= P(u_ref) * (1 - gap_ref): a certified lower bound on the optimum.
    lower = rof_energy(reference.image, noisy, weight) * (1.0 - reference.relative_gap)

    def row(
        method: str, seconds: float, iterations: str, image: np.ndarray, gap: float | None = None
    ) -> Row:
        if gap is None:
            gap = gap_bound(image, noisy, weight, lower)
        return Row(method, seconds, iterations, gap, psnr(image))

    rows = []
    # FGP with the product's default cap; the parity run with scikit-image's (200), like the
    # denoise_tv_chambolle(defaults) row it stands for.
    cap = tv.TVParams().max_iterations
    t, fgp = time_call(lambda: ours("fgp", 1e-3, cap), device, repeats)
    rows.append(row("ours FGP (tol 1e-3)", t, str(fgp.iterations), fgp.image, fgp.relative_gap))
    t, cham = time_call(lambda: ours("chambolle", 2e-4, 200), device, repeats)
    rows.append(row("ours chambolle (skimage parity)", t, str(cham.iterations), cham.image))
    t, sk = time_cpu(lambda: denoise_tv_chambolle(noisy, weight=weight), repeats)
    # scikit-image does not report its iteration count; our parity mode runs the same rule.
    rows.append(row("skimage chambolle (defaults)", t, f"{cham.iterations} (parity)", sk))
    t, sk200 = time_cpu(
        lambda: denoise_tv_chambolle(noisy, weight=weight, eps=0, max_num_iter=200), repeats
    )
    rows.append(row("skimage chambolle (eps=0, 200 it)", t, "200", sk200))
    print_table(rows)
    return rows


def print_table(rows: list[Row]) -> None:
    sk_default = next(r.seconds for r in rows if r.method.startswith("skimage chambolle (def"))
    sk_200 = next(r.seconds for r in rows if "200 it" in r.method)
    header = (
        f"{'method':36s} {'time s':>9s} {'iters':>14s} {'rel. gap':>9s} {'PSNR dB':>8s} "
        f"{'skimage-default/this':>21s} {'skimage-200it/this':>19s}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        gap = "n/a" if r.gap is None else f"{r.gap:.1e}"
        print(
            f"{r.method:36s} {r.seconds:9.3f} {r.iterations:>14s} {gap:>9s} {r.psnr:8.2f} "
            f"{sk_default / r.seconds:20.2f}x {sk_200 / r.seconds:18.2f}x"
        )
    print(
        "rel. gap: ours FGP = its own duality-gap certificate; other rows = certified bound "
        "(P(u) - P_low) / P(u) from the reference solve. Ratios > 1 mean faster than scikit-image."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: first GPU)")
    parser.add_argument("--size", type=int, default=None, help="2D side (default 1024; quick 512)")
    parser.add_argument(
        "--shape3d",
        type=lambda s: tuple(int(v) for v in s.lower().split("x")),
        default=None,
        help="3D shape ZxYxX (default 32x256x256; quick 16x128x128)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per method")
    parser.add_argument("--quick", action="store_true", help="small sizes, one timed run")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default 1 with --device cpu, to match single-threaded NumPy "
        "and to avoid thread oversubscription on busy machines)",
    )
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    size = args.size or (512 if args.quick else 1024)
    shape3d = args.shape3d or ((16, 128, 128) if args.quick else (32, 256, 256))
    repeats = args.repeats or (1 if args.quick else 3)
    if args.threads is not None or device.type == "cpu":
        torch.set_num_threads(args.threads or 1)

    print(f"napari-gpuscope TV benchmark -- ours on {device_label(device)}; scikit-image on CPU")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads for torch")
    if device.type != "cuda":
        print(
            "NOTE: CPU reference run. Our CPU path is the correctness reference, not a fast path: "
            "absolute times do not reflect GPU speed; compare quality columns and ratios only."
        )
    t0 = time.perf_counter()
    run_case(f"2D {size}x{size}", fluorescence_phantom_2d((size, size)), device, repeats)
    run_case("3D " + "x".join(map(str, shape3d)), fluorescence_phantom_3d(shape3d), device, repeats)
    print(f"\ntotal benchmark time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
