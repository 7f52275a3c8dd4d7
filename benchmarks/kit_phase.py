"""GPU kit measurements of phase (run by ``benchmarks/gpu_kit.py bench``).

``bench(device)`` returns JSON-able measurements; ``exercise(device)`` launches every fused
kernel of the method once at a small size (what compute-sanitizer runs); ``profile(device)``
launches each at a representative size (what Nsight Compute profiles).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from kit_common import kill_switch, median_event_ms


def bench(device: torch.device) -> dict:
    """Phase (compute/phase): its fused kernels against the twins (CUDA events, byte model),
    a 2048 x 2048 x 21 reconstruction (cold optics, cached optics, re-solve for a new
    regularization), and an 8 x 8 tile tilt map (NAdam, 40 iterations; damped Newton, 10).
    Design targets: reconstruction < 100 ms, tilt map < 2 s."""
    from napari_gpuscope.compute import phase
    from napari_gpuscope.compute.phase import _ops as phase_ops

    out: dict[str, object] = {}
    gen = torch.Generator(device=device).manual_seed(0)
    b, n_z, ny, nx = 1, 21, 2048, 2048
    data, a, p = (torch.randn((b, n_z, ny, nx, 2), device=device, generator=gen) for _ in range(3))
    outs = [torch.empty((b, ny, nx), device=device) for _ in range(2)]
    outs += [torch.empty((b, ny, nx, 2), device=device) for _ in range(3)]
    solved = [torch.empty((b, ny, nx, 2), device=device) for _ in range(2)]
    n = b * ny * nx
    cases = {
        "phase_normal_equations": (
            phase_ops.normal_equations_op,
            (data, a, p, *outs, -1.0),
            (3 * n_z * 2 + 8) * 4 * n,
        ),
        "phase_tikhonov_solve": (
            phase_ops.tikhonov_solve_op,
            (*outs, *solved, 1e-3),
            (2 + 6 + 4) * 4 * n,
        ),
    }
    rows = []
    for name, (op, args, model_bytes) in cases.items():
        for twin in (False, True):
            with kill_switch(twin):
                bound = op.bind(*(a for a in args if isinstance(a, torch.Tensor)))
                ms = median_event_ms(lambda b_=bound, a_=args: b_(*a_), repeats=10)
            rows.append(
                {
                    "kernel": name,
                    "path": bound.path.path,
                    "ms": round(ms, 3),
                    "gbps": round(model_bytes / (ms * 1e-3) / 1e9, 1),
                }
            )
    out["kernels 2048x2048x21"] = rows
    del data, a, p, outs, solved
    torch.cuda.empty_cache()

    optics = {"wavelength": 0.45, "yx_pixel_size": 0.325, "z_pixel_size": 2.0}
    optics |= {"na_illumination": 0.4, "na_detection": 0.55, "index_of_refraction": 1.0}
    rng = np.random.default_rng(0)
    stack = (1 + 0.02 * rng.standard_normal((21, 2048, 2048))).astype(np.float32)
    stack_gpu = torch.from_numpy(stack).to(device)
    cache = phase.OpticsCache()
    params = phase.PhaseParams(**optics, tilt_zenith=0.2, tilt_azimuth=1.0)

    def recon() -> None:
        phase.reconstruct(stack_gpu, params=params, optics_cache=cache, device=device)

    start = time.perf_counter()
    recon()
    torch.cuda.synchronize(device)
    out["reconstruct 2048x2048x21 cold optics (s, incl. host copy of the result)"] = round(
        time.perf_counter() - start, 3
    )
    out["reconstruct 2048x2048x21 cached optics (ms, events)"] = round(
        median_event_ms(recon, repeats=10), 2
    )
    solver = phase.PhaseSolver(stack_gpu, params, device=device, optics_cache=cache)
    out["re-solve new regularization 2048x2048 (ms, events)"] = round(
        median_event_ms(lambda: solver.solve(3e-3), repeats=10), 2
    )
    for optimizer, iterations in (("nadam", 40), ("newton", 10)):
        tilt_params = params.replace(
            tilt_mode="tiles", tiles_y=8, tiles_x=8, optimizer=optimizer, iterations=iterations
        )
        start = time.perf_counter()
        result = phase.estimate_tilt(stack_gpu, params=tilt_params, device=device)
        torch.cuda.synchronize(device)
        out[f"tilt map 8x8 {optimizer} {iterations} it (s)"] = round(time.perf_counter() - start, 3)
        out[f"tilt map 8x8 {optimizer} converged"] = result.converged
    return out
