"""Phase: napari-gpuscope vs waveorder 3.0.5, side by side on the same stack, in one process.

On a simulated brightfield stack of the cell phantom (the plugin's forward model, which equals
waveorder's ``apply_transfer_function`` with a background of 1; 2000 photons per pixel of
background; illumination tilted by 0.2 rad toward azimuth 1.0 rad) it runs

- reconstruction at a known tilt: ours (closed-form 2x2 inverse, device optics, cold and cached)
  and waveorder's ``isotropic_thin_3d.reconstruct`` (SVD inverse) at azimuth + pi, the
  azimuth its inverse needs (``azimuth_to_waveorder``);
- global tilt estimation: ours (damped Newton and NAdam, residual loss) and waveorder's
  ``phase.optimize`` (NAdam, midband loss), from the same start;

and prints wall time, iterations, the recovered tilt, Pearson r and RMSE of the phase against
the phantom, and the time ratios. waveorder is optional (skipped when it does not import).

Timing: on a GPU ours is timed with CUDA events after a warm-up (waveorder is given the same
device when it accepts it); on the CPU both use ``time.perf_counter``. With ``--device cpu`` the
absolute times say nothing about GPU speed, only the ratios and the quality columns count.

waveorder 3.0.5 needs Python >= 3.12 by its metadata; on 3.11 run this file with the venv that
made the fixtures (``tests/fixtures/phase/make_phase_fixtures.py``)::

    PYTHONPATH=src /work/peers/waveorder/venv/bin/python benchmarks/phase_benchmark.py \
        --device cpu --size 128 --iterations 10
    python benchmarks/phase_benchmark.py                    # first GPU, 512 x 512 x 21
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
import torch

from napari_gpuscope.compute import phase
from napari_gpuscope.sample_data.phase import OPTICS, cell_phantom

ZENITH, AZIMUTH = 0.2, 1.0


def timed(
    run: Callable[[], object], device: torch.device, repeats: int = 3
) -> tuple[float, object]:
    """Best wall (CPU) or CUDA-event time in seconds, and the last result."""
    result = run()  # warm-up
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = run()
            stop.record()
            torch.cuda.synchronize(device)
            best = min(best, start.elapsed_time(stop) / 1e3)
        else:
            t = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - t)
    return best, result


def quality(recon: np.ndarray, truth: np.ndarray) -> dict:
    r, t = recon.ravel() - recon.mean(), truth.ravel() - truth.mean()
    return {
        "pearson": float((r @ t) / math.sqrt((r @ r) * (t @ t))),
        "rmse_rad": float(np.sqrt(np.mean((r - t) ** 2))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from napari_gpuscope.compute.devices import resolve_device

    device = resolve_device(args.device)
    truth, absorption = cell_phantom((args.size, args.size))
    params = phase.PhaseParams(**OPTICS)
    clean = phase.simulate_stack(
        truth, absorption, params, 21, tilt_zenith=ZENITH, tilt_azimuth=AZIMUTH
    )
    rng = np.random.default_rng(0)
    stack = (rng.poisson(2000.0 * clean) / 2000.0).astype(np.float32)
    rows: list[dict] = []

    cache = phase.OpticsCache()
    t_cold = time.perf_counter()
    phase.reconstruct(stack, params=params, tilt_zenith=ZENITH, tilt_azimuth=AZIMUTH, device=device)
    t_cold = time.perf_counter() - t_cold
    t_ours, ours = timed(
        lambda: phase.reconstruct(
            stack,
            params=params,
            tilt_zenith=ZENITH,
            tilt_azimuth=AZIMUTH,
            optics_cache=cache,
            device=device,
        ),
        device,
    )
    rows.append(
        {"run": "ours reconstruct (cached optics)", "s": t_ours, **quality(ours.phase, truth)}
    )
    rows.append({"run": "ours reconstruct (cold, first call)", "s": t_cold})

    for optimizer, iterations in (
        ("newton", max(4, args.iterations // 2)),
        ("nadam", args.iterations),
    ):
        p = params.replace(tilt_mode="global", optimizer=optimizer, iterations=iterations)
        t = time.perf_counter()
        est = phase.estimate_tilt(stack, params=p, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter() - t
        recon = phase.reconstruct(stack, params=params, tilt_map=est.tilt_map, device=device)
        rows.append(
            {
                "run": f"ours estimate_tilt {optimizer}",
                "s": t,
                "iterations": est.iterations,
                "tilt": (
                    round(est.tilt_map.zenith.item(), 4),
                    round(est.tilt_map.azimuth.item(), 4),
                ),
                **quality(recon.phase, truth),
            }
        )

    try:
        import xarray as xr
        from waveorder.api import phase as wo_phase
        from waveorder.models import isotropic_thin_3d
        from waveorder.optim import OptimizableFloat
    except ImportError as exc:
        print(f"waveorder not importable ({exc}); ours only")
    else:
        z_list = [(21 // 2 - i) * OPTICS["z_pixel_size"] for i in range(21)]
        wo_optics = {
            "yx_pixel_size": OPTICS["yx_pixel_size"],
            "wavelength_illumination": OPTICS["wavelength"],
            "index_of_refraction_media": OPTICS["index_of_refraction"],
            "numerical_aperture_illumination": OPTICS["na_illumination"],
            "numerical_aperture_detection": OPTICS["na_detection"],
        }
        data = torch.from_numpy(stack).to(device)
        z_t = torch.tensor(z_list, device=device)

        def wo_reconstruct():
            return isotropic_thin_3d.reconstruct(
                data,
                z_position_list=z_t,
                tilt_angle_zenith=ZENITH,
                tilt_angle_azimuth=phase.azimuth_to_waveorder(AZIMUTH),
                regularization_strength=params.regularization,
                **wo_optics,
            )[1]

        t_wo, wo = timed(wo_reconstruct, device)
        rows.append(
            {
                "run": "waveorder reconstruct (az + pi)",
                "s": t_wo,
                **quality(wo.cpu().numpy(), truth),
            }
        )
        settings = wo_phase.Settings(
            transfer_function=wo_phase.TransferFunctionSettings(
                **wo_optics,
                z_pixel_size=OPTICS["z_pixel_size"],
                tilt_angle_zenith=OptimizableFloat(init=0.05, lr=0.02),
                tilt_angle_azimuth=OptimizableFloat(init=0.0, lr=0.2),
            ),
            apply_inverse=wo_phase.ApplyInverseSettings(
                regularization_strength=params.regularization
            ),
        )
        t = time.perf_counter()
        new, rec = wo_phase.optimize(
            xr.DataArray(stack[None], dims=("c", "z", "y", "x")),
            recon_dim=2,
            settings=settings,
            max_iterations=args.iterations,
            method="nadam",
        )
        t = time.perf_counter() - t
        zen, azi = phase.canonical_tilt(
            float(new.transfer_function.tilt_angle_zenith),
            phase.azimuth_from_waveorder(float(new.transfer_function.tilt_angle_azimuth)),
        )
        rows.append(
            {
                "run": "waveorder phase.optimize nadam",
                "s": t,
                "iterations": args.iterations,
                "tilt": (round(float(zen), 4), round(float(azi), 4)),
                **quality(np.asarray(rec.values[0, 0]), truth),
            }
        )

    print(
        f"\nstack 21 x {args.size} x {args.size}, device {device}, true tilt ({ZENITH}, {AZIMUTH})"
    )
    print(
        f"{'run':40s} {'time s':>9s} {'iters':>6s} {'tilt (zen, az)':>18s} {'r':>6s} {'rmse':>7s}"
    )
    for row in rows:
        print(
            f"{row['run']:40s} {row['s']:9.3f} {row.get('iterations', ''):>6} "
            f"{row.get('tilt', '')!s:>18s} {row.get('pearson', float('nan')):6.3f} "
            f"{row.get('rmse_rad', float('nan')):7.4f}"
        )
    by = {row["run"]: row["s"] for row in rows}
    if "waveorder reconstruct (az + pi)" in by:
        ratio = by["waveorder reconstruct (az + pi)"] / by["ours reconstruct (cached optics)"]
        print(f"reconstruction: waveorder / ours = {ratio:.1f}x")
        ratio = by["waveorder phase.optimize nadam"] / by["ours estimate_tilt nadam"]
        print(f"tilt estimate (same iterations, NAdam): waveorder / ours = {ratio:.1f}x")


if __name__ == "__main__":
    main()
