"""GPU kit measurements of flat-field (BaSiC) (``benchmarks/gpu_kit.py bench --method flatfield``).

``bench(device)`` returns JSON-able measurements; ``exercise(device)`` launches every fused
kernel of the method at a small size, with and without the darkfield (what compute-sanitizer
memcheck, racecheck and initcheck run); ``profile(device)`` launches each kernel once at the
size of a 1000-tile fit (P = 1, T = 1000, 128 x 128 working size: what Nsight Compute profiles).

Sizes: fits take 256 x 256 tiles (``sample_data.shaded_tiles``) and work at 128 x 128 (the
default ``working_size``); kernel timings are on the working-size stack ``(1, T, 128, 128)``.
Every figure says its tile size and T.

Byte model (``_ops.step_bytes``): ``basic_sparse`` reads I, Y, W and writes I_R, and
``basic_dual`` reads I, I_R, Y and writes Y: 16 B per stack element each (the first kit
assumed 20), plus the per-problem images, baselines and float64 partial sums (a few %).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable

import numpy as np
import torch
from kit_common import GIB, gpu_ms, host_us, kill_switch

TILE = (256, 256)
WORKING = (128, 128)
"""GPU cycles the stream spins before a timed batch of calls (~50 ms), so the host has queued
them all before the first one starts: the events then time the GPU alone."""
BUDGET_S = 36.0
"""Measurements start only while the bench has run less than this (its kit step's limit is
45 s, the process start and kernel compilation included)."""
FIT_TARGET_MS = 500.0
"""Design target: 1000 tiles of 256 x 256 fitted in under 0.5 s (issue 16)."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _problem(device: torch.device, p: int, t: int, shape=WORKING, seed: int = 0) -> dict:
    """An ALM pass's inputs on ``device``: random tiles (100-300 counts, a vignetting, one
    brightness per tile so that about half the baselines fall below 1), weight 1."""
    from napari_gpuscope.compute.flatfield import _alm

    gen = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(*(torch.linspace(-1, 1, s) for s in shape), indexing="ij")
    flat = 1.2 - 0.4 * (yy**2 + xx**2)
    level = 100 + 200 * torch.rand((p, t, 1, 1), generator=gen)
    images = (level * flat * (1 + 0.1 * torch.randn((p, t, *shape), generator=gen)) + 100).to(
        device
    )
    means = images.mean(dim=(-2, -1))
    lam = _alm.auto_smoothness(images)
    return {
        "images": images,
        "weight": torch.ones_like(images),
        "init_baseline": means / means.mean(dim=1, keepdim=True),
        "lam_flat": lam,
        "lam_dark": 0.1 * lam,
        "mu0": _alm.MU_COEF / _alm.spectral_norm(images),
        "image_norm": torch.linalg.vector_norm(images.reshape(p, -1), dim=1),
        "offset_max": images.reshape(p, -1).amin(dim=1),
    }


def _op_args(device: torch.device, p: int, t: int, shape, with_dark: bool, exact: bool = False):
    """Arguments of ``basic_sparse`` and ``basic_dual`` on a state of ``(p, t, *shape)``, each a
    one-element list holding its ``AlmState`` (scratch sized for each op when ``exact``, as
    compute-sanitizer should see it), every problem active."""
    from napari_gpuscope.compute.flatfield import _examples
    from napari_gpuscope.compute.flatfield import _ops as ff

    gen = torch.Generator().manual_seed(p * 1000 + t)
    (sparse,), _ = _examples.sparse_example(device, gen, p, t, shape)
    (dual,), dual_kw = _examples.dual_example(device, gen, p, t, shape)
    if exact:
        sparse.scratch = ff.scratch_for(sparse.images, with_dark, "basic_sparse")
        dual.scratch = ff.scratch_for(dual.images, with_dark, "basic_dual")
    if not with_dark:
        dual.pixel_sums = dual.pixel_sums[:, :1].contiguous()
    active = torch.ones(p, device=device)
    sparse.active = active
    dual.active = active
    return [sparse], [dual], dual_kw


# --------------------------------------------------------------------------------------------
# bench
# --------------------------------------------------------------------------------------------


def _kernels(device: torch.device) -> list[dict]:
    """The two stack passes, kernel against twin, at T = 50 and 1000 (working size 128 x 128,
    P = 1): GPU ms per call, achieved GB/s of the 16 B/element model, host us per call."""
    from napari_gpuscope.compute.flatfield import _ops as ff

    rows = []
    for t in (50, 1000):
        for with_dark in (False, True):
            sparse_args, dual_args, dual_kw = _op_args(device, 1, t, WORKING, with_dark)
            model = ff.step_bytes(sparse_args[0].images, with_dark)
            runs = {"basic_sparse": (ff.basic_sparse, sparse_args, {})}
            runs["basic_dual"] = (ff.basic_dual, dual_args, dual_kw)
            for name, (op, args, kwargs) in runs.items():
                if name == "basic_sparse" and with_dark:
                    continue  # the same launch either way
                row: dict[str, object] = {
                    "op": name,
                    "T": t,
                    "working": "128x128",
                    "darkfield": with_dark,
                    "bytes": model[name],
                }
                for path, kill in (("kernel", False), ("twin", True)):
                    with kill_switch(kill):
                        bound = op.bind(*args)
                        row[f"{path}_path"] = bound.path.path

                        def run(bound=bound, args=args, kwargs=kwargs):
                            bound(*args, **kwargs)

                        row[f"{path}_ms"] = round(gpu_ms(run), 4)
                        row[f"{path}_host_us"] = round(host_us(run, calls=50, warmup=1), 1)
                row["kernel_gbps"] = round(model[name] / row["kernel_ms"] / 1e6, 1)
                row["speedup_vs_twin"] = round(row["twin_ms"] / row["kernel_ms"], 2)
                rows.append(row)
    return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _CountOps:
    """Torch operations that launch device work, and fused kernel launches (by kernel name),
    while :meth:`counting` is active: on CUDA through ``CupyBackend.launch``, on the CPU
    through the g++ emulation's ``HostBackend.launch``."""

    NO_LAUNCH = frozenset(
        {
            "aten._unsafe_view.default",
            "aten.empty.memory_format",
            "aten.empty_like.default",
            "aten.empty_strided.default",
            "aten.detach.default",
            "aten.alias.default",
            "aten.lift_fresh.default",
        }
    )

    def __init__(self) -> None:
        self.torch_ops: Counter[str] = Counter()
        self.kernels: Counter[str] = Counter()

    @contextlib.contextmanager
    def counting(self, device: torch.device):
        from torch.utils._python_dispatch import TorchDispatchMode

        from napari_gpuscope.compute.kernels import CupyBackend, HostBackend

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = str(func)
                if not func.is_view and name not in counter.NO_LAUNCH:
                    counter.torch_ops[name] += 1
                return func(*args, **(kwargs or {}))

        backend = CupyBackend if device.type == "cuda" else HostBackend
        real = backend.launch

        def launch(self, function, n_threads, args):
            name = getattr(function, "name", None)
            if name is None:  # a CUDA function: look its name up among the compiled ones
                names = {id(f): key[1] for key, f in self._functions.items()}
                name = names.get(id(function), "?")
            counter.kernels[name] += 1
            return real(self, function, n_threads, args)

        backend.launch = launch
        try:
            with Mode():
                yield self
        finally:
            backend.launch = real


def _syncs(run: Callable[[], None], device: torch.device) -> int | None:
    """Synchronising CUDA calls torch reports (``set_sync_debug_mode("warn")``) during ``run``
    (None off CUDA)."""
    if device.type != "cuda":
        return None
    from napari_gpuscope.compute.devices import count_host_syncs

    return count_host_syncs(run)[1]


def _timed_ms(run: Callable[[], None], device: torch.device) -> tuple[float | None, float]:
    """(CUDA-event ms or None off CUDA, wall ms) of ``run``, the device drained at the end."""
    _sync(device)
    wall = time.perf_counter()
    if device.type != "cuda":
        run()
        return None, (time.perf_counter() - wall) * 1e3
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop), (time.perf_counter() - wall) * 1e3


def iteration_profile(
    device: torch.device, t: int, with_dark: bool, shape: tuple[int, int] = WORKING
) -> dict:
    """One ALM iteration on ``(1, t, *shape)``: kernel launches and torch operations, host
    syncs, GPU and host time per iteration (the differences between a 6- and a 3-iteration
    pass for the counts, a 20- and a 10-iteration pass for the syncs and a 40- and a
    10-iteration pass for the times, so the pass's setup cancels)."""
    from napari_gpuscope.compute.flatfield import _alm

    problem = _problem(device, 1, t, shape)

    def alm(iterations: int):
        return _alm._alm_pass(
            **problem,
            get_darkfield=with_dark,
            max_iterations=iterations,
            tol=0.0,  # never converges: exactly ``iterations``
        )

    alm(2)
    counts = {}
    for n in (3, 6):
        counter = _CountOps()
        with counter.counting(device):
            alm(n)
        counts[n] = counter
    torch_ops = {
        k: (v - counts[3].torch_ops[k]) / 3
        for k, v in counts[6].torch_ops.items()
        if v != counts[3].torch_ops[k]
    }
    kernels = {k: (v - counts[3].kernels[k]) / 3 for k, v in counts[6].kernels.items()}
    copies = torch_ops.pop("aten.copy_.default", 0.0)
    syncs = {n: _syncs(lambda n=n: alm(n), device) for n in (10, 20)}
    timing = {n: _timed_ms(lambda n=n: alm(n), device) for n in (10, 40)}
    gpu = None if timing[10][0] is None else (timing[40][0] - timing[10][0]) / 30
    return {
        "T": t,
        "working": "x".join(map(str, shape)),
        "darkfield": with_dark,
        "launches_per_iteration": round(sum(torch_ops.values()) + sum(kernels.values()), 2),
        "kernels_per_iteration": kernels,
        "torch_ops_per_iteration": torch_ops,
        "async_copies_per_iteration": copies,
        "syncs_per_iteration": None if syncs[10] is None else (syncs[20] - syncs[10]) / 10,
        "syncs_per_pass_of_10": syncs[10],
        "gpu_ms_per_iteration": None if gpu is None else round(gpu, 4),
        "wall_ms_per_iteration": round((timing[40][1] - timing[10][1]) / 30, 4),
    }


def _fits(device: torch.device, tiles: np.ndarray, truth_flat: np.ndarray) -> list[dict]:
    """Whole fits from uint16 host tiles (256 x 256, working size 128), T = 50, 200, 1000,
    with and without the darkfield: CUDA-event time (upload included), wall time, peak memory,
    passes, iterations, error against the known flatfield."""
    from napari_gpuscope.compute.flatfield import fit_basic

    rows = []
    for t in (50, 200, 1000):
        images = tiles[:t]
        for dark in (False, True):
            fit_basic(images[:8], get_darkfield=dark, device=device)  # warm up
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            wall = time.perf_counter()
            start.record()
            profile = fit_basic(images, get_darkfield=dark, device=device)
            stop.record()
            stop.synchronize()
            wall_ms = (time.perf_counter() - wall) * 1e3
            estimate = profile.flatfield / profile.flatfield.mean()
            row = {
                "T": t,
                "tile": "256x256",
                "working": "128x128",
                "darkfield": dark,
                "fit_ms": round(start.elapsed_time(stop), 1),
                "wall_ms": round(wall_ms, 1),
                "peak_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 3),
                "passes": profile.reweight_passes[0],
                "alm_iterations_last_pass": profile.alm_iterations[0],
                "converged": profile.all_converged,
                "flat_rel_rmse": round(float(np.sqrt(((estimate - truth_flat) ** 2).mean())), 5),
            }
            if t == 1000:
                row["target_ms"] = FIT_TARGET_MS
                row["target_met"] = row["wall_ms"] < FIT_TARGET_MS
            rows.append(row)
    return rows


def several_problems(device: torch.device, t: int = 100) -> dict:
    """Three problems (channels) of ``t`` tiles of 256 x 256 that converge after different
    numbers of passes, fitted as one batch and each alone: passes, iterations and flatfields
    must agree; times of both."""
    from napari_gpuscope.compute.flatfield import fit_basic
    from napari_gpuscope.sample_data._shading import shaded_tiles

    stacks = [
        shaded_tiles(t, TILE, seed=11, vignetting=0.6).images,
        shaded_tiles(t, TILE, seed=12, vignetting=1.4).images,
        shaded_tiles(t, TILE, seed=13, read_noise=20.0, dark_offset=10.0).images,
    ]
    batch = np.stack(stacks)
    fit_basic(batch[:, :8], batch_axis=0, device=device)  # warm up
    torch.cuda.synchronize()
    wall = time.perf_counter()
    both = fit_basic(batch, batch_axis=0, device=device)
    batch_ms = (time.perf_counter() - wall) * 1e3
    wall = time.perf_counter()
    alone = [fit_basic(s, device=device) for s in stacks]
    alone_ms = (time.perf_counter() - wall) * 1e3
    return {
        "T": t,
        "tile": "256x256",
        "problems": len(stacks),
        "passes_batch": list(both.reweight_passes),
        "passes_alone": [a.reweight_passes[0] for a in alone],
        "iterations_batch": list(both.alm_iterations),
        "iterations_alone": [a.alm_iterations[0] for a in alone],
        "converged_batch": list(both.converged),
        "max_flat_diff_vs_alone": float(
            max(np.abs(both.flatfield[k] - alone[k].flatfield).max() for k in range(3))
        ),
        "batch_wall_ms": round(batch_ms, 1),
        "alone_wall_ms": round(alone_ms, 1),
    }


def autotune_on_gpu(device: torch.device, tiles: np.ndarray) -> dict:
    """Autotune (BaSiCPy's 17 candidates fitted as one batch on ~50 of the tiles, then the
    winner on all): wall time, the choice, how many candidates converged."""
    from napari_gpuscope.compute.flatfield import autotune

    autotune(tiles[:12], candidates=(1.0, 2.0), device=device)  # warm up
    torch.cuda.synchronize()
    wall = time.perf_counter()
    result = autotune(tiles, device=device)
    return {
        "T": len(tiles),
        "tile": "256x256",
        "wall_ms": round((time.perf_counter() - wall) * 1e3, 1),
        "smoothness": result.smoothness_flatfield,
        "finite_costs": int(np.isfinite(result.costs).sum()),
        "candidates": len(result.costs),
        "profile_converged": result.profile.all_converged,
    }


def correction_on_gpu(device: torch.device, tiles: np.ndarray, flat: np.ndarray) -> list[dict]:
    """``correct`` of uint16 tiles (256 x 256) into float32 and uint16 NumPy arrays: wall time,
    GB/s of input + output, max difference from the formula on the host."""
    from napari_gpuscope.compute.flatfield import ShadingProfile, correct

    profile = ShadingProfile.from_arrays(flat, camera_offset=100.0)
    expected = (tiles[:20].astype(np.float32) - np.float32(100.0)) / profile.flatfield
    rows = []
    for dtype in ("float32", "uint16"):
        correct(tiles[:8], profile, dtype=dtype, device=device)  # warm up
        torch.cuda.synchronize()
        wall = time.perf_counter()
        out = correct(tiles, profile, dtype=dtype, device=device)
        seconds = time.perf_counter() - wall
        moved = tiles.nbytes + out.nbytes
        reference = expected if dtype == "float32" else np.clip(np.round(expected), 0, 65535)
        rows.append(
            {
                "T": len(tiles),
                "tile": "256x256",
                "dtype": dtype,
                "wall_ms": round(seconds * 1e3, 1),
                "host_gbps": round(moved / seconds / 1e9, 2),
                "max_abs_diff_vs_host": float(np.abs(out[:20] - reference).max()),
            }
        )
    return rows


def bench(device: torch.device) -> dict:
    """BaSiC on the GPU (one try/except per measurement, so one failure loses nothing else):

    - ``kernels``: the two stack passes against their twins (T = 50, 1000; 128 x 128);
    - ``iteration``: launches, host syncs, GPU and wall time per ALM iteration (T = 50, 1000,
      darkfield off and on);
    - ``fits``: whole fits of 256 x 256 tiles, T = 50, 200, 1000, darkfield off and on
      (target: T = 1000 under 0.5 s);
    - ``several_problems``: three channels converging at different passes, batch vs alone;
    - ``autotune``, ``correction``: on the GPU.
    """
    from napari_gpuscope.sample_data._shading import shaded_tiles

    out: dict[str, object] = {}
    start = time.perf_counter()

    def measure(key: str, step: Callable[[], object]) -> None:
        begin = time.perf_counter()
        if begin - start > BUDGET_S:
            out[key] = {"skipped": f"the bench has run {begin - start:.0f} s (budget {BUDGET_S} s)"}
            return
        try:
            out[key] = step()
        except Exception as exc:  # one failed measurement must not lose the others
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}
        out.setdefault("seconds", {})[key] = round(time.perf_counter() - begin, 1)

    truth = None

    def data():
        nonlocal truth
        truth = shaded_tiles(1000, TILE, seed=0, dark_offset=100.0)
        return {"tiles": 1000, "tile": "256x256"}

    # Most important first: the step's time limit may cut the rest.
    measure("data", data)
    if truth is not None:
        measure("fits", lambda: _fits(device, truth.images, truth.flatfield))
    measure(
        "iteration",
        lambda: [iteration_profile(device, t, dark) for t in (50, 1000) for dark in (False, True)],
    )
    measure("kernels", lambda: _kernels(device))
    measure("several_problems", lambda: several_problems(device))
    if truth is not None:
        measure("autotune", lambda: autotune_on_gpu(device, truth.images[:200]))
        measure("correction", lambda: correction_on_gpu(device, truth.images, truth.flatfield))
    return out


# --------------------------------------------------------------------------------------------
# exercise (compute-sanitizer) and profile (Nsight Compute)
# --------------------------------------------------------------------------------------------


def exercise(device: torch.device) -> None:
    """Every flat-field kernel at a small size, with and without the darkfield: a 2-iteration
    ALM pass of two problems (every kernel of an iteration), then every op once on buffers
    sized exactly for it (one cudaMalloc per tensor under ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``,
    so memcheck sees each bound), with one problem frozen."""
    from napari_gpuscope.compute.flatfield import _alm
    from napari_gpuscope.compute.flatfield import _ops as ff

    for with_dark in (False, True):
        problem = _problem(device, 2, 20, (24, 24))
        _alm._alm_pass(**problem, get_darkfield=with_dark, max_iterations=2, tol=0.0)
        _sync(device)
        sparse_args, dual_args, dual_kw = _op_args(device, 3, 20, (24, 24), with_dark, True)
        frozen = torch.tensor([1.0, 0.0, 1.0], device=device)
        sparse_args[0].active = dual_args[0].active = frozen
        ff.basic_sparse(*sparse_args)
        ff.basic_dual(*dual_args, **dual_kw)
        gen = torch.Generator().manual_seed(1)
        (status,), status_kw = ff.basic_status.example(device, gen)
        if not with_dark:
            status.totals = status.totals[:, :1].contiguous()
        ff.basic_status(status, **status_kw)
        _sync(device)
    for op in (ff.basic_shrink, ff.basic_dark_shape, ff.basic_dark_finish):
        args, kwargs = op.example(device, torch.Generator().manual_seed(2))
        op(*args, **kwargs)
    args, kwargs = ff.basic_shrink.example(device, torch.Generator().manual_seed(3))
    ff.basic_shrink(*args, **{**kwargs, "with_y": False})
    _sync(device)


def profile(device: torch.device, t: int = 1000) -> None:
    """Every flat-field kernel once at the size of a 1000-tile fit (P = 1, T = 1000, 128 x 128):
    one ALM iteration with the darkfield (``basic_shrink`` runs twice)."""
    from napari_gpuscope.compute.flatfield import _alm

    problem = _problem(device, 1, t)
    _sync(device)
    _alm._alm_pass(**problem, get_darkfield=True, max_iterations=1, tol=0.0)
    _sync(device)
