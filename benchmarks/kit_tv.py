"""GPU kit measurements of TV denoising and of the kernel platform (``benchmarks/gpu_kit.py``).

``bench(device)`` returns JSON-able measurements: the device-copy ceiling, CUDA-event timings of
every TV kernel and its twin with achieved GB/s against the byte model, host microseconds per op
and per FGP iteration (with a CUDA-graph replay for comparison), cold/warm kernel preparation in
fresh processes, upload bandwidth, end-to-end ``tv.denoise`` split by phase and peak device
memory against the memory model. ``forced_oom(device)`` forces a real out-of-memory retry (the
kit's last step). ``exercise(device)`` launches every TV kernel variant (1-4 coupled axes,
32- and 64-bit indices) and the platform's ``axpby`` once at small sizes (what
compute-sanitizer runs); ``profile(device)`` launches each 3-axis kernel once at 64x1024x1024
(what Nsight Compute profiles).

Byte model per element and call (``d`` coupled axes, float32): ``fgp_step`` reads f, z, y and
writes y, z_next: ``(1 + 4d) * 4``; ``fgp_primal`` reads f, z and writes u: ``(2 + d) * 4``;
``tv_gap_partials`` reads f, y, u: ``(2 + d) * 4``.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
from kit_common import GIB, host_us, kill_switch, median_event_ms


def copy_bandwidth(device: torch.device) -> float:
    """GB/s of a 1 GiB device-to-device copy (bytes read + bytes written)."""
    a = torch.empty(GIB // 4, device=device).uniform_()
    b = torch.empty_like(a)
    ms = median_event_ms(lambda: b.copy_(a), repeats=10)
    return 2 * a.numel() * 4 / (ms * 1e-3) / 1e9


KERNEL_CASES = [
    ("2d 1024x1024", (1, 1024, 1024)),
    ("2d 4096x4096", (1, 4096, 4096)),
    ("3d 64x1024x1024", (1, 64, 1024, 1024)),
    ("4d 4x16x256x256", (1, 4, 16, 256, 256)),
    ("batch 64 x 2d 512x512", (64, 512, 512)),
]


def kernel_timings(device: torch.device, copy_gbps: float) -> list[dict]:
    """CUDA-event time and achieved bandwidth of each kernel and its twin, per case."""
    from napari_gpuscope.compute.tv import _ops as ops

    rows = []
    for label, shape in KERNEL_CASES:
        d = len(shape) - 1
        spacing = [1.0] * d
        gen = torch.Generator(device=device).manual_seed(0)
        f = torch.rand(shape, device=device, generator=gen)
        z = 0.1 * torch.randn((d, *shape), device=device, generator=gen)
        y = 0.1 * torch.randn((d, *shape), device=device, generator=gen)
        z_next, u = torch.empty_like(z), torch.empty_like(f)
        batch, per_problem = shape[0], math.prod(shape[1:])
        threads = ops.gap_threads(batch, per_problem)
        parts = [torch.empty((batch, threads), device=device) for _ in range(2)]
        n = f.numel()
        step_kw = {"spacing": spacing, "lo": 0.0, "hi": math.inf, "inv_l2": 1 / (4 * d)}
        step_kw |= {"weight": 0.1, "momentum": 0.5}
        kernels = {
            "fgp_step": (
                ops.fgp_step,
                (f, z, y, z_next),
                step_kw,
                (1 + 4 * d) * 4 * n,
            ),
            "fgp_primal": (
                ops.fgp_primal,
                (f, z, u),
                {"spacing": spacing, "lo": 0.0, "hi": math.inf},
                (2 + d) * 4 * n,
            ),
            "tv_gap_partials": (
                ops.tv_gap_partials,
                (f, y, u, *parts),
                {"spacing": spacing, "weight": 0.1},
                (2 + d) * 4 * n,
            ),
        }
        for name, (op, args, kwargs, model_bytes) in kernels.items():
            for twin in (False, True):
                with kill_switch(twin):
                    bound = op.bind(*args)
                    ms = median_event_ms(lambda b=bound, a=args, k=kwargs: b(*a, **k))
                gbps = model_bytes / (ms * 1e-3) / 1e9
                rows.append(
                    {
                        "case": label,
                        "kernel": name,
                        "path": bound.path.path,
                        "ms": round(ms, 4),
                        "model_bytes": model_bytes,
                        "gbps": round(gbps, 1),
                        "fraction_of_copy": round(gbps / copy_gbps, 3),
                    }
                )
        del f, z, y, z_next, u, parts
        torch.cuda.empty_cache()
    return rows


def host_overhead(device: torch.device) -> dict:
    """Host microseconds per launch and per FGP iteration; a CUDA graph for comparison."""
    from napari_gpuscope.compute.tv import _ops as ops
    from napari_gpuscope.compute.tv._fgp import solve_fgp

    shape = (1, 64, 64)
    f = torch.rand(shape, device=device)
    z, y = torch.zeros((2, *shape), device=device), torch.zeros((2, *shape), device=device)
    z_next = torch.empty_like(z)
    kw = {"spacing": [1.0, 1.0], "lo": -math.inf, "hi": math.inf, "inv_l2": 0.125}
    kw |= {"weight": 0.1, "momentum": 0.5}
    result: dict[str, float] = {}
    x = torch.zeros(shape, device=device)
    result["torch add_"] = host_us(lambda: x.add_(1.0))
    result["fgp_step via op() (dispatch every call)"] = host_us(
        lambda: ops.fgp_step(f, z, y, z_next, **kw)
    )
    bound = ops.fgp_step.bind(f, z, y, z_next)
    result["fgp_step via bind() (solver path)"] = host_us(lambda: bound(f, z, y, z_next, **kw))

    # A CUDA graph of 10 bound launches (the momentum baked in), replayed.
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    graph_us = None
    try:
        with torch.cuda.stream(stream):
            for _ in range(3):
                ops.fgp_step.bind(f, z, y, z_next)(f, z, y, z_next, **kw)
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = ops.fgp_step.bind(f, z, y, z_next)
            for _ in range(10):
                captured(f, z, y, z_next, **kw)
        graph_us = host_us(graph.replay, calls=500) / 10
    except Exception as exc:  # report, do not fail the kit
        result["cuda graph error"] = f"{type(exc).__name__}: {exc}"
    if graph_us is not None:
        result["fgp_step in a CUDA graph of 10 (per launch)"] = graph_us

    for size in (1024, 256):
        image = torch.rand((1, size, size), device=device)
        for twin in (False, True):
            with kill_switch(twin):

                def solve(image=image):
                    solver = solve_fgp(image, 0.1, [1.0, 1.0], tolerance=0.0, max_iterations=200)
                    with contextlib.suppress(StopIteration):
                        while True:
                            next(solver)

                solve()
                torch.cuda.synchronize()
                start = time.perf_counter()
                solve()
                torch.cuda.synchronize()
                per_iteration = (time.perf_counter() - start) / 200 * 1e6
            label = "twin" if twin else "fused"
            result[f"FGP iteration {size}x{size}, {label} (wall, incl. checks)"] = per_iteration
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in result.items()}


COLD_SCRIPT = """
import time, torch
t0 = time.perf_counter()
from napari_gpuscope.compute.tv import _ops as ops
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.kernels import warm_up
torch.ones(1, device="cuda").sum().item()
t1 = time.perf_counter()
ready = run_job(warm_up("cuda:0"))
t2 = time.perf_counter()
ready2 = run_job(warm_up("cuda:0"))
t3 = time.perf_counter()
print({"import_and_context_s": t1 - t0, "warm_up_s": t2 - t1, "again_s": t3 - t2,
       "ready": ready})
"""


def cold_warm() -> dict:
    """Kernel warm-up in fresh processes: empty CuPy cache, then the cache just filled."""
    result = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "CUPY_CACHE_DIR": cache}
        for label in ("cold (empty kernel cache)", "warm (disk kernel cache)"):
            run = subprocess.run(
                [sys.executable, "-c", COLD_SCRIPT],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
                check=False,
            )
            line = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr
            result[label] = line
    return result


def _phases(image: np.ndarray, weight: float, tolerance: float, device: torch.device) -> dict:
    """Upload, solve and download of one whole-image FGP run, then the same job end to end."""
    from napari_gpuscope.compute import tv
    from napari_gpuscope.compute.arrays import download_into, to_device
    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.compute.tv._fgp import solve_fgp

    d = image.ndim
    result = {}
    for _ in range(2):  # the first round warms up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        f = to_device(image, device).reshape(1, *image.shape)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        solver = solve_fgp(f, weight, [1.0] * d, lo=0.0, tolerance=tolerance, max_iterations=500)
        try:
            while True:
                next(solver)
        except StopIteration as stop:
            solved = stop.value
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        out = np.empty(image.shape, np.float32)
        download_into(out, solved.image[0])
        t3 = time.perf_counter()
        result = {
            "upload_ms": (t1 - t0) * 1e3,
            "solve_ms": (t2 - t1) * 1e3,
            "download_ms": (t3 - t2) * 1e3,
            "iterations": solved.iterations,
            "relative_gap": solved.relative_gap,
        }
        del f, solver, solved
    for _ in range(2):  # the first job in a process pays one-off set-up (101 ms vs 9 ms, H200)
        start = time.perf_counter()
        job = run_job(tv.iter_denoise(image, weight, tolerance=tolerance, device=device))
        result["denoise_total_ms"] = (time.perf_counter() - start) * 1e3
    result["denoise_iterations"] = job.iterations
    result["kernel_paths"] = job.kernel_paths
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in result.items()}


def end_to_end(device: torch.device) -> dict:
    rng = np.random.default_rng(0)
    preview = (0.5 + 0.1 * rng.standard_normal((1024, 1024))).astype(np.float32)
    volume = (0.5 + 0.1 * rng.standard_normal((64, 1024, 1024))).astype(np.float32)
    volume_u16 = (volume * 1000).clip(0, 65535).astype(np.uint16)
    return {
        "2d 1024x1024 preview (tol 1e-2)": _phases(preview, 0.08, 1e-2, device),
        "2d 1024x1024 (tol 1e-3)": _phases(preview, 0.08, 1e-3, device),
        "3d 64x1024x1024 float32 (tol 1e-3)": _phases(volume, 0.08, 1e-3, device),
        "3d 64x1024x1024 uint16 (tol 1e-3)": _phases(volume_u16, 80.0, 1e-3, device),
    }


def upload_bandwidth(device: torch.device) -> dict:
    """Host-to-device GB/s: our staged upload vs a plain pageable copy, 256 MiB float32."""
    from napari_gpuscope.compute.arrays import to_device

    host = np.random.default_rng(0).random((64, 1024, 1024), dtype=np.float32)
    result = {}
    for label, run in (
        ("staged pinned (to_device)", lambda: to_device(host, device)),
        ("pageable torch.from_numpy().to()", lambda: torch.from_numpy(host).to(device)),
    ):
        run()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        result[label] = round(host.nbytes / statistics.median(times) / 1e9, 2)
    return result


def peak_memory(device: torch.device) -> dict:
    """Peak device memory of a whole-volume job against the memory model."""
    from napari_gpuscope.compute import tv
    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.compute.tv import _job

    result = {}
    volume = np.random.default_rng(1).random((64, 1024, 1024), dtype=np.float32)
    for twin in (False, True):
        with kill_switch(twin):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            job = run_job(tv.iter_denoise(volume, 0.05, tolerance=1e-2, device=device))
            peak = torch.cuda.max_memory_allocated(device) - base
            model = _job._bytes_per_element("fgp", 3, device) * volume.size
            result["twin" if twin else "fused"] = {
                "peak_gib": round(peak / GIB, 3),
                "model_gib": round(model / GIB, 3),
                "peak_over_model": round(peak / model, 3),
                "chunks": job.chunks,
            }
    return result


def forced_oom(device: torch.device) -> dict:
    """A real out-of-memory error: a memory hog, and a budget that claims the whole GPU."""
    from napari_gpuscope.compute import tv
    from napari_gpuscope.compute.jobs import run_job

    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    keep = 3 * GIB
    hog = torch.empty(max(0, free - keep), dtype=torch.uint8, device=device)
    volume = np.random.default_rng(2).random((128, 1024, 1024), dtype=np.float32)
    messages: list[str] = []
    baseline = torch.cuda.memory_allocated(device)
    start = time.perf_counter()
    try:
        job = run_job(
            tv.iter_denoise(volume, 0.05, tolerance=1e-2, device=device, memory_budget=total),
            on_progress=lambda p: messages.append(p.message),
        )
        outcome = {"chunks": job.chunks, "converged": job.converged}
    except Exception as exc:
        outcome = {"error": f"{type(exc).__name__}: {exc}"}
    elapsed = time.perf_counter() - start
    left = torch.cuda.memory_allocated(device) - baseline
    del hog
    torch.cuda.empty_cache()
    retries = [m for m in messages if "retrying" in m]
    return {
        **outcome,
        "retries": retries[:5],
        "seconds": round(elapsed, 2),
        "bytes_left_allocated_after_job": int(left),
    }


def bench(device: torch.device) -> dict:
    """Every TV measurement; one that fails is reported as an error, the others still run."""
    results: dict[str, object] = {}
    copy = copy_bandwidth(device)
    results["copy_gbps"] = round(copy, 1)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("kernels", lambda: kernel_timings(device, copy)),
        ("host_overhead_us", lambda: host_overhead(device)),
        ("cold_warm", cold_warm),
        ("upload_gbps", lambda: upload_bandwidth(device)),
        ("end_to_end", lambda: end_to_end(device)),
        ("peak_memory", lambda: peak_memory(device)),
    ]
    for key, step in steps:
        start = time.perf_counter()
        try:
            results[key] = step()
        except Exception as exc:  # one failed measurement must not lose the others
            results[key] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"[bench tv] {key}: {time.perf_counter() - start:.1f} s", flush=True)
    return results


# Shapes of ``exercise``: (batch, coupled shape...), spacing; 1-4 coupled axes, odd sizes.
EXERCISE_CASES = [
    ((3, 1001), [0.7]),
    ((2, 33, 47), [1.0, 0.5]),
    ((1, 5, 17, 23), [0.3, 1.0, 1.0]),
    ((1, 2, 3, 5, 7), [1.0, 0.5, 1.0, 2.0]),
]


def exercise(device: torch.device) -> None:
    """Every TV kernel variant once at a small size: a short FGP solve (12 iterations: steps,
    then a check block's primal and gap partials) per case, with 32-bit and with 64-bit
    indices; then ``axpby``. One cudaMalloc per tensor under ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``,
    so compute-sanitizer sees every bound."""
    from napari_gpuscope.compute.kernels.axpby import axpby
    from napari_gpuscope.compute.tv import _ops as ops
    from napari_gpuscope.compute.tv._fgp import FUSED_OPS, solve_fgp

    limit = ops.NARROW_INDEX_LIMIT
    gen = torch.Generator().manual_seed(0)
    try:
        for narrow in (True, False):
            ops.NARROW_INDEX_LIMIT = limit if narrow else 0
            for shape, spacing in EXERCISE_CASES:
                f = torch.rand(shape, generator=gen).to(device)
                suffix = ops._launch_geometry(f, spacing)[0]
                assert suffix.endswith("u32" if narrow else "i64"), suffix
                solver = solve_fgp(f, 0.1, spacing, lo=0.0, tolerance=0.0, max_iterations=12)
                with contextlib.suppress(StopIteration):
                    while True:
                        next(solver)
                torch.cuda.synchronize(device)
    finally:
        ops.NARROW_INDEX_LIMIT = limit
    x, y = (torch.rand(1000, generator=gen).to(device) for _ in range(2))
    axpby(x, y, torch.empty_like(x), 1.5, -0.25)
    torch.cuda.synchronize(device)
    key = str(device)
    paths = {op.name: op.last_paths[key].path for op in (*FUSED_OPS, axpby)}
    print("paths:", paths)
    assert set(paths.values()) == {"kernel"}, paths


def profile(device: torch.device) -> None:
    """Each 3-axis kernel once at 64x1024x1024, and ``axpby`` once on 2^24 elements."""
    from napari_gpuscope.compute.kernels.axpby import axpby
    from napari_gpuscope.compute.tv import _ops as ops

    shape = (1, 64, 1024, 1024)
    f = torch.rand(shape, device=device)
    z, y = 0.1 * torch.randn((3, *shape), device=device), torch.zeros((3, *shape), device=device)
    z_next, u = torch.empty_like(z), torch.empty_like(f)
    parts = [torch.empty((1, ops.gap_threads(1, f.numel())), device=device) for _ in range(2)]
    spacing = [1.0, 1.0, 1.0]
    ops.fgp_step(f, z, y, z_next, spacing=spacing, inv_l2=1 / 12, weight=0.1, momentum=0.5)
    ops.fgp_primal(f, y, u, spacing=spacing, lo=0.0)
    ops.tv_gap_partials(f, y, u, *parts, spacing=spacing, weight=0.1)
    x = torch.rand(2**24, device=device)
    axpby(x, x, torch.empty_like(x), 2.0, 1.0)
    torch.cuda.synchronize(device)
