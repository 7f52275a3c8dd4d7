"""GPU kit measurements of phase (run by ``benchmarks/gpu_kit.py``).

- ``bench(device)``: JSON-able measurements, each in its own ``try`` (one failure keeps the
  rest) and skipped once :data:`BENCH_BUDGET_S` is spent (the kit's phase bench step has 40 s):
  the fused kernels against their twins at 2048 x 2048 x 21 (CUDA events, achieved GB/s); a
  2048 x 2048 x 21 reconstruction from host data (upload and download included) with cold and
  cached optics, from a device tensor, and split into upload / compute / download; the live
  re-solve at a new regularization; the TV-regularised phase; a 4 x 4 tile map; peak device
  memory of the normal equations and solve against :class:`MemoryPlan` (cold and cached optics,
  cuFFT's measured work area beside the plan's bound); host synchronisations per solve and per
  tilt iteration (``torch.cuda.set_sync_debug_mode``); the 8 x 8 tilt map (NAdam 40 iterations,
  Newton 10, after a warm-up run); the tilt estimate of one stack on the CPU and on the GPU.
  Targets (issue 16): reconstruction < 50 ms including upload, re-solve < 10 ms, 8 x 8 tilt map
  < 1 s.
- ``exercise(device)``: every phase kernel once at a small size, through the ops and through
  the jobs (Tikhonov, TV, tiles): what compute-sanitizer memcheck, racecheck and initcheck run.
- ``profile(device)``: each kernel once at 2048 x 2048 x 21 after its inputs are made: what
  Nsight Compute profiles (kernels ``phase_normal_equations``, ``phase_tikhonov_solve``,
  ``phase_regularization_components``).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from kit_common import kill_switch, median_event_ms

BENCH_BUDGET_S = 32.0
"""Seconds after which the remaining measurements are skipped (the step is killed at 40)."""
OPTICS = {
    "wavelength": 0.45,
    "yx_pixel_size": 0.325,
    "z_pixel_size": 2.0,
    "na_illumination": 0.4,
    "na_detection": 0.55,
    "index_of_refraction": 1.0,
}
SHAPE = (21, 2048, 2048)
SYNC_CEILINGS = {"tikhonov solve": 0, "tv solve": 0, "nadam iteration": 1, "newton iteration": 2}
"""Host synchronisations allowed (``set_sync_debug_mode``): a solve waits for nothing (its
result's download aside), a tilt iteration reads its loss and values back once (twice after a
rejected Newton step)."""


# ------------------------------------------------------------------------------ helpers
def count_syncs(run: Callable[[], Any], device: torch.device) -> tuple[Any, int]:
    """``run()``'s result and how many synchronising CUDA calls torch warned about."""
    from napari_gpuscope.compute.devices import count_host_syncs

    return count_host_syncs(run)


def peak_bytes(run: Callable[[], Any], device: torch.device) -> tuple[Any, int]:
    """``run()``'s result and the most bytes it had allocated at once (beyond the start)."""
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = run()
    torch.cuda.synchronize(device)
    return result, torch.cuda.max_memory_allocated(device) - base


def fft_work_planes(shape: tuple[int, ...], device: torch.device) -> float:
    """cuFFT's work area for a batched 2D complex FFT of ``shape``, in outputs of that FFT."""
    x = torch.zeros(shape, dtype=torch.complex64, device=device)
    torch.fft.fft2(x)  # the plan is made (and cached) outside the measurement
    y, peak = peak_bytes(lambda: torch.fft.fft2(x), device)
    return max(0.0, (peak - y.numel() * y.element_size()) / (y.numel() * y.element_size()))


def wall_ms(run: Callable[[], Any], device: torch.device, repeats: int = 5) -> float:
    """Median wall milliseconds of ``run()`` (host data in, host data out: the user's view)."""
    run()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        run()
        torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _component_args(outs: list[torch.Tensor]) -> tuple[Any, ...]:
    """What ``phase_regularization_components`` takes after the normal equations ``outs``:
    their largest entries, outputs ``slots (2, n)`` and ``weights (4, 2, n)``, and the
    selector's binning for one pass over all ``n`` frequencies."""
    from napari_gpuscope.compute.phase._auto_regularization import binning_for

    n, device = outs[0].numel(), outs[0].device
    largest = torch.stack((outs[0].max(), outs[1].max()))
    slots, weights = torch.empty((2, n), device=device), torch.empty((4, 2, n), device=device)
    return (largest, slots, weights, binning_for(n))


def _stack(
    shape: tuple[int, int, int], seed: int = 0, zenith: float = 0.2, device: Any = "cpu"
) -> np.ndarray:
    """A tilted brightfield stack (the plugin's forward model, simulated on ``device``) of a
    smooth random phase (0 to ~0.6 rad) with 1 % noise."""
    from scipy.ndimage import gaussian_filter

    from napari_gpuscope.compute import phase

    rng = np.random.default_rng(seed)
    field = gaussian_filter(rng.standard_normal(shape[1:]).astype(np.float32), 4.0)
    truth = np.clip(field / (3 * field.std()), 0, None) * 0.6
    params = phase.PhaseParams(**OPTICS)
    stack = phase.simulate_stack(
        truth, 0.03 * truth, params, shape[0], tilt_zenith=zenith, tilt_azimuth=1.0, device=device
    )
    return (stack + 0.01 * rng.standard_normal(stack.shape)).astype(np.float32)


class _Budget:
    """Runs measurements until the time budget is spent; records errors per measurement."""

    def __init__(self, out: dict, seconds: float) -> None:
        self.out = out
        self.deadline = time.perf_counter() + seconds

    @contextlib.contextmanager
    def measure(self, name: str):
        if time.perf_counter() > self.deadline:
            self.out[name] = "skipped: time budget spent"
            yield False
            return
        try:
            yield True
        except Exception as exc:  # one failure must not lose the other measurements
            self.out[name] = f"error: {type(exc).__name__}: {exc}"
        finally:
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------ bench
def bench(device: torch.device) -> dict:
    """Phase measurements (module notes); ~20 s on an H100."""
    from napari_gpuscope.compute import phase
    from napari_gpuscope.compute.phase import _ops as phase_ops
    from napari_gpuscope.compute.phase import _regularization_ops as reg_ops
    from napari_gpuscope.compute.phase._optics import FFT_WORK_PLANES, build_group
    from napari_gpuscope.compute.phase._reconstruct import Reconstructor

    out: dict[str, Any] = {
        "targets": "reconstruct < 50 ms incl. upload, re-solve < 10 ms, "
        "8x8 tilt map < 1 s (issue 16)"
    }
    budget = _Budget(out, BENCH_BUDGET_S)
    n_z, ny, nx = SHAPE
    size = f"{ny}x{nx}x{n_z}"

    with budget.measure(f"kernels {size}") as go:
        if go:
            gen = torch.Generator(device=device).manual_seed(0)
            data, a, p = (
                torch.randn((1, n_z, ny, nx, 2), device=device, generator=gen) for _ in range(3)
            )
            # filled, not empty: the selector's pass reads their largest Gram entries
            outs = [torch.rand((1, ny, nx), device=device) for _ in range(2)]
            outs += [torch.rand((1, ny, nx, 2), device=device) for _ in range(3)]
            solved = [torch.empty((1, ny, nx, 2), device=device) for _ in range(2)]
            n = ny * nx
            cases = {
                "phase_normal_equations": (
                    phase_ops.normal_equations_op,
                    (data, a, p, *outs, -1.0),
                    (6 * n_z + 8) * 4 * n,
                ),
                "phase_tikhonov_solve": (
                    phase_ops.tikhonov_solve_op,
                    (*outs, *solved, 1e-3),
                    (2 + 6 + 4) * 4 * n,
                ),
                "phase_regularization_components": (
                    reg_ops.regularization_components_op,
                    (*outs, *_component_args(outs)),
                    (2 + 6 + 2 + 8) * 4 * n,
                ),
            }
            rows = []
            for name, (op, args, model_bytes) in cases.items():
                for twin in (False, True):
                    with kill_switch(twin):
                        bound = op.bind(*(t for t in args if isinstance(t, torch.Tensor)))
                        ms = median_event_ms(lambda b_=bound, a_=args: b_(*a_), repeats=10)
                    gbps = round(model_bytes / (ms * 1e-3) / 1e9, 1)
                    rows.append(
                        {"kernel": name, "path": bound.path.path, "ms": round(ms, 3), "gbps": gbps}
                    )
            out[f"kernels {size}"] = rows
            del data, a, p, outs, solved

    stack = _stack(SHAPE, device=device)
    params = phase.PhaseParams(**OPTICS, tilt_zenith=0.2, tilt_azimuth=1.0)
    cache = phase.OpticsCache()

    def from_host(p=params) -> Any:
        return phase.reconstruct(stack, params=p, optics_cache=cache, device=device)

    with budget.measure(f"reconstruct {size}") as go:
        if go:
            start = time.perf_counter()
            cold = from_host()
            torch.cuda.synchronize(device)
            rows = {"cold optics, from host (s)": round(time.perf_counter() - start, 3)}
            rows["cached optics, from host (ms, wall)"] = round(wall_ms(from_host, device), 1)
            on_device = torch.from_numpy(stack).to(device)
            rows["cached optics, device tensor in (ms, wall)"] = round(
                wall_ms(
                    lambda: phase.reconstruct(
                        on_device, params=params, optics_cache=cache, device=device
                    ),
                    device,
                ),
                1,
            )
            from napari_gpuscope.compute.arrays import to_device

            rows["upload alone (ms, wall)"] = round(
                wall_ms(lambda: to_device(stack, device), device), 1
            )
            recon = Reconstructor(on_device, params, cache)
            rows["normal equations + solve, cached optics (ms, events)"] = round(
                median_event_ms(lambda: recon.whole(0.2, 1.0), repeats=10), 2
            )
            rows["optics built (cache.builds)"] = dict(cache.builds)
            rows["chunks"] = cold.chunks
            rows["kernel paths"] = cold.kernel_paths
            out[f"reconstruct {size}"] = rows
            del on_device, recon

    with budget.measure(f"re-solve {ny}x{nx}") as go:
        if go:
            solver = phase.PhaseSolver(stack, params, device=device, optics_cache=cache)
            out[f"re-solve {ny}x{nx}"] = {
                "new regularization (ms, wall incl. download)": round(
                    wall_ms(lambda: solver.solve(3e-3), device, repeats=10), 2
                ),
                "syncs per solve": count_syncs(lambda: solver.solve(3e-3), device)[1],
            }
            del solver

    with budget.measure(f"tv-regularised {size}") as go:
        if go:
            rows = {}
            data = torch.from_numpy(stack).to(device)
            recon = Reconstructor(data, params.replace(regularizer="tv"), cache)
            system = recon.system(data, 0.2, 1.0)
            for iterations in (5, 15):
                recon.params = params.replace(regularizer="tv", tv_iterations=iterations)
                ms = median_event_ms(lambda r=recon: r.solve(system), repeats=3, warmup=1)
                syncs = count_syncs(lambda r=recon: r.solve(system), device)[1]
                rows[f"tv_iterations={iterations}"] = {
                    "solve ms (events)": round(ms, 1),
                    "syncs": syncs,
                }
            recon.params = params
            rows["tikhonov solve syncs"] = count_syncs(lambda: recon.solve(system), device)[1]
            tv_params = params.replace(regularizer="tv")
            rows["whole job from host, 15 iterations (ms, wall)"] = round(
                wall_ms(lambda: from_host(tv_params), device, repeats=3), 1
            )
            out[f"tv-regularised {size}"] = rows
            del data, recon, system

    with budget.measure(f"tiles 4x4 {size}") as go:
        if go:
            grid = phase.TileGrid.covering(SHAPE[1:], (4, 4), 0.25)
            zen = np.linspace(0.1, 0.25, 16).reshape(4, 4)
            tilt = phase.TiltMap(
                grid, zen, np.full((4, 4), 1.0), np.zeros((4, 4)), np.full((4, 4), np.nan)
            )
            tile_cache = phase.OpticsCache()

            def tiles() -> Any:
                return phase.reconstruct(
                    stack, params=params, tilt_map=tilt, optics_cache=tile_cache, device=device
                )

            start = time.perf_counter()
            tiles()
            torch.cuda.synchronize(device)
            out[f"tiles 4x4 {size}"] = {
                "tile size": list(grid.size),
                "cold optics (s)": round(time.perf_counter() - start, 3),
                "cached optics (ms, wall)": round(wall_ms(tiles, device, repeats=3), 1),
                "syncs (cached)": count_syncs(tiles, device)[1],
            }
            del tile_cache

    with budget.measure(f"memory vs plan {size}") as go:
        if go:
            data = torch.from_numpy(stack).to(device)
            rows = {}
            fresh = phase.OpticsCache()
            for label in ("cold optics", "cached optics"):
                recon = Reconstructor(data, params, fresh)
                _, peak = peak_bytes(lambda r=recon: r.solve(r.system(data, 0.2, 1.0)), device)
                plan = recon.plan
                slices = -(-n_z // recon.chunks)
                key = recon.key(SHAPE[1:])
                work = max(
                    fft_work_planes(
                        (min(n_z, build_group(key)), ny * key.factor, nx * key.factor), device
                    ),
                    fft_work_planes((slices, ny, nx), device),
                )
                rows[label] = {
                    "measured peak (GiB)": round(peak / 2**30, 3),
                    "plan (GiB)": round(plan.peak(slices) / 2**30, 3),
                    "plan / measured": round(plan.peak(slices) / peak, 3),
                    "plan with measured cuFFT work / measured": round(
                        plan.peak(slices, work) / peak, 3
                    ),
                    "cuFFT work measured (outputs)": round(work, 3),
                    "plan's bound (outputs)": FFT_WORK_PLANES,
                    "chunks": recon.chunks,
                    "passes (GiB)": {
                        k: round(v / 2**30, 3) for k, v in plan.breakdown(slices).items()
                    },
                }
            out[f"memory vs plan {size}"] = rows
            del data, fresh

    cache.clear()
    torch.cuda.empty_cache()
    with budget.measure("tilt estimate cpu vs cuda") as go:
        if go:
            small = _stack((11, 256, 256), seed=3, zenith=0.15)
            agree = params.replace(
                tilt_mode="tiles", tiles_y=2, tiles_x=2, optimizer="newton", iterations=5
            )
            start = time.perf_counter()
            on_cpu = phase.estimate_tilt(small, params=agree, device="cpu")
            cpu_s = time.perf_counter() - start
            on_gpu = phase.estimate_tilt(small, params=agree, device=device)
            dz = np.abs(on_cpu.tilt_map.zenith - on_gpu.tilt_map.zenith).max()
            da = np.abs(
                np.angle(np.exp(1j * (on_cpu.tilt_map.azimuth - on_gpu.tilt_map.azimuth)))
            ).max()
            out["tilt estimate cpu vs cuda"] = {
                "stack": "256x256x11, 2x2 tiles, newton 5 it",
                "max |zenith cpu - cuda| (rad)": float(dz),
                "max |azimuth cpu - cuda| (rad)": float(da),
                "agree (zenith < 2e-3, azimuth < 2e-2)": bool(dz < 2e-3 and da < 2e-2),
                "cpu s": round(cpu_s, 2),
            }

    with budget.measure(f"tilt map 8x8 {size}") as go:
        if go:
            rows = {}
            for optimizer, iterations in (("nadam", 40), ("newton", 10)):
                tilt_params = params.replace(
                    tilt_mode="tiles", tiles_y=8, tiles_x=8, optimizer=optimizer
                )
                # warm-up: cuFFT plans and the autograd kernels of these shapes
                phase.estimate_tilt(stack, params=tilt_params, iterations=2, device=device)
                few, more = 2, 5  # syncs counted on short runs: the difference is per iteration

                def run(n: int, p=tilt_params) -> Any:
                    return phase.estimate_tilt(stack, params=p, iterations=n, device=device)

                start = time.perf_counter()
                result = run(iterations)
                torch.cuda.synchronize(device)
                seconds = time.perf_counter() - start
                _, syncs_few = count_syncs(lambda n=few: run(n), device)
                _, syncs_more = count_syncs(lambda n=more: run(n), device)
                per_iteration = (syncs_more - syncs_few) / (more - few)
                rows[f"{optimizer} {iterations} it"] = {
                    "s (wall, from host data)": round(seconds, 3),
                    "ms per iteration": round(seconds / iterations * 1e3, 1),
                    "converged": result.converged,
                    "syncs per iteration": per_iteration,
                    "within ceiling": per_iteration <= SYNC_CEILINGS[f"{optimizer} iteration"],
                }
            out[f"tilt map 8x8 {size}"] = rows

    out["sync ceilings"] = SYNC_CEILINGS
    return out


# ------------------------------------------------------------------------------ sanitizers
def exercise(device: torch.device) -> None:
    """Every phase kernel once at a small size (what compute-sanitizer runs): the normal
    equations and the solve with a transfer function per problem and shared by the problems,
    the automatic regularization's pass over their result, each with a tail that is not a
    multiple of the block, then the jobs (Tikhonov, TV, a tile map, the live re-solve)."""
    from napari_gpuscope.compute import phase
    from napari_gpuscope.compute.phase import _ops as phase_ops
    from napari_gpuscope.compute.phase import _regularization_ops as reg_ops

    gen = torch.Generator(device=device).manual_seed(0)
    batch, n_z, ny, nx = 3, 5, 37, 53
    data = torch.randn((batch, n_z, ny, nx, 2), device=device, generator=gen)
    for tf_batch in (batch, 1):
        a, p = (
            torch.randn((tf_batch, n_z, ny, nx, 2), device=device, generator=gen) for _ in range(2)
        )
        outs = [torch.empty((batch, ny, nx), device=device) for _ in range(2)]
        outs += [torch.empty((batch, ny, nx, 2), device=device) for _ in range(3)]
        phase_ops.normal_equations_op(data, a, p, *outs, -1.0)
        solved = [torch.empty((batch, ny, nx, 2), device=device) for _ in range(2)]
        phase_ops.tikhonov_solve_op(*outs, *solved, 1e-2)
        reg_ops.regularization_components_op(*outs, *_component_args(outs))
    stack = _stack((7, 64, 64))
    params = phase.PhaseParams(**OPTICS, tilt_zenith=0.2, tilt_azimuth=1.0)
    phase.reconstruct(stack, params=params, device=device)
    phase.reconstruct(stack, params=params, regularizer="tv", tv_iterations=2, device=device)
    grid = phase.TileGrid.covering((64, 64), (2, 2), 0.25)
    phase.reconstruct(
        stack, params=params, tilt_map=phase.TiltMap.uniform(grid, 0.2, 1.0), device=device
    )
    phase.PhaseSolver(stack, params, device=device).solve(3e-3)
    torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------ ncu
def profile(device: torch.device) -> None:
    """``phase_normal_equations``, ``phase_tikhonov_solve`` and
    ``phase_regularization_components`` once each at 2048 x 2048 x 21,
    their inputs made first (what Nsight Compute profiles)."""
    from napari_gpuscope.compute.phase import _ops as phase_ops
    from napari_gpuscope.compute.phase import _regularization_ops as reg_ops

    n_z, ny, nx = SHAPE
    gen = torch.Generator(device=device).manual_seed(0)
    data, a, p = (torch.randn((1, n_z, ny, nx, 2), device=device, generator=gen) for _ in range(3))
    outs = [torch.rand((1, ny, nx), device=device) for _ in range(2)]
    outs += [torch.rand((1, ny, nx, 2), device=device) for _ in range(3)]
    solved = [torch.empty((1, ny, nx, 2), device=device) for _ in range(2)]
    normal = phase_ops.normal_equations_op.bind(data, a, p, *outs)
    solve = phase_ops.tikhonov_solve_op.bind(*outs, *solved)
    components = _component_args(outs)
    binned = reg_ops.regularization_components_op.bind(*outs, *components[:3])
    torch.cuda.synchronize(device)
    normal(data, a, p, *outs, -1.0)
    solve(*outs, *solved, 1e-3)
    binned(*outs, *components)
    torch.cuda.synchronize(device)
