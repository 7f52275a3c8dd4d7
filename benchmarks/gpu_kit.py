"""Measurements of the GPU verification kit (``scripts/gpu-check.sh``); also usable alone.

Needs only torch (CUDA), CuPy, NumPy and the package on ``PYTHONPATH`` (no napari). Subcommands:

- ``bench --out DIR``: environment, device-copy ceiling, CUDA-event timings of every fused
  kernel and its twin with achieved GB/s against the byte model, host microseconds per op and per
  FGP iteration (with a CUDA-graph replay for comparison), cold/warm first call, end-to-end
  ``tv.denoise`` split by phase, peak device memory against the memory model, and a forced
  out-of-memory retry. Writes ``DIR/bench.json`` and prints a summary.
- ``solve``: a small fused solve (what ``compute-sanitizer`` runs).
- ``cold``: one kernel preparation in a fresh process (timed by ``bench``).
- ``report --out DIR``: merges ``bench.json``, the pytest records and the tool logs of ``DIR``
  into ``report.md`` and ``report.json``.

Timings are medians over repeats, after warm-up. Byte model per element and call (``d`` coupled
axes, float32): ``fgp_step`` reads f, z, y and writes y, z_next: ``(1 + 4d) * 4``;
``fgp_primal`` reads f, z and writes u: ``(2 + d) * 4``; ``tv_gap_partials`` reads f, y, u:
``(2 + d) * 4``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import kit_esrrf
import kit_flatfield
import kit_phase
import numpy as np
import torch
from kit_common import GIB, host_us, kill_switch, median_event_ms

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------------


def environment() -> dict:
    """GPU, driver, torch, CuPy, CUDA runtime and NVRTC versions."""
    from napari_gpuscope.compute.devices import cupy_status

    props = torch.cuda.get_device_properties(0)
    env = {
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / GIB, 1),
        "sm_count": props.multi_processor_count,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "numpy": np.__version__,
        "scipy": _version("scipy"),
        "scikit-image": _version("skimage"),
        "cupy": _version("cupy"),
        "cupy_status": cupy_status(0)[1],
    }
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        env["driver"] = smi.stdout.strip().splitlines()[0] if smi.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        env["driver"] = None
    try:
        import cupy

        def version(number: int) -> str:
            return f"{number // 1000}.{number % 1000 // 10}"

        env["cuda_driver_api"] = version(cupy.cuda.runtime.driverGetVersion())
        env["cuda_runtime"] = version(cupy.cuda.runtime.runtimeGetVersion())
        major, minor = cupy.cuda.nvrtc.getVersion()
        env["nvrtc"] = f"{major}.{minor}"
    except Exception as exc:
        env["nvrtc"] = f"unavailable: {type(exc).__name__}: {exc}"
    return env


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


def bench(out: Path) -> dict:
    device = torch.device("cuda", 0)
    results: dict[str, object] = {"environment": environment()}
    copy = copy_bandwidth(device)
    results["copy_gbps"] = round(copy, 1)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("kernels", lambda: kernel_timings(device, copy)),
        ("host_overhead_us", lambda: host_overhead(device)),
        ("cold_warm", cold_warm),
        ("upload_gbps", lambda: upload_bandwidth(device)),
        ("end_to_end", lambda: end_to_end(device)),
        ("phase", lambda: kit_phase.bench(device)),
        ("peak_memory", lambda: peak_memory(device)),
        ("forced_oom", lambda: forced_oom(device)),
        ("esrrf", lambda: kit_esrrf.bench(device)),
        ("flatfield", lambda: kit_flatfield.bench(device)),
    ]
    for key, step in steps:
        start = time.perf_counter()
        try:
            results[key] = step()
        except Exception as exc:  # one failed measurement must not lose the others
            results[key] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"[bench] {key}: {time.perf_counter() - start:.1f} s", flush=True)
        (out / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    return results


# --------------------------------------------------------------------------------------------
# small solve for compute-sanitizer
# --------------------------------------------------------------------------------------------


def sanitize_solve() -> None:
    from napari_gpuscope.compute.tv._fgp import FUSED_OPS, solve_fgp

    for shape, spacing in (((2, 33, 47), [1.0, 0.5]), ((1, 5, 17, 23), [0.3, 1.0, 1.0])):
        f = torch.rand(shape, device="cuda")
        solver = solve_fgp(f, 0.1, spacing, lo=0.0, tolerance=0.0, max_iterations=20)
        with contextlib.suppress(StopIteration):
            while True:
                next(solver)
        torch.cuda.synchronize()
    paths = {op.name: op.last_paths["cuda:0"].path for op in FUSED_OPS}
    print("paths:", paths)
    assert set(paths.values()) == {"kernel"}, paths


def profile() -> None:
    """Prepare the kernels, then launch each 3-axis kernel once at 64x1024x1024 (for ncu:
    ``--launch-skip 2`` skips the two 3-axis self-test launches)."""
    from napari_gpuscope.compute.kernels import registered_ops
    from napari_gpuscope.compute.tv import _ops as ops

    for op in registered_ops():
        op.prepare("cuda:0")
    shape = (1, 64, 1024, 1024)
    f = torch.rand(shape, device="cuda")
    z, y = 0.1 * torch.randn((3, *shape), device="cuda"), torch.zeros((3, *shape), device="cuda")
    z_next, u = torch.empty_like(z), torch.empty_like(f)
    parts = [torch.empty((1, ops.gap_threads(1, f.numel())), device="cuda") for _ in range(2)]
    spacing = [1.0, 1.0, 1.0]
    ops.fgp_step(f, z, y, z_next, spacing=spacing, inv_l2=1 / 12, weight=0.1, momentum=0.5)
    ops.fgp_primal(f, y, u, spacing=spacing, lo=0.0)
    ops.tv_gap_partials(f, y, u, *parts, spacing=spacing, weight=0.1)
    torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def report(out: Path) -> str:
    def load(name: str) -> dict:
        path = out / name
        return json.loads(path.read_text()) if path.exists() else {}

    bench_data, records, status = load("bench.json"), load("records.json"), load("status.json")
    sections = ["# GPU check report", ""]
    env = bench_data.get("environment", {})
    if env:
        sections += [
            "## Environment",
            "",
            _table(["item", "value"], [[k, v] for k, v in env.items()]),
        ]
    if status:
        sections += [
            "",
            "## Steps",
            "",
            _table(["step", "result"], [[k, v] for k, v in status.items()]),
        ]
    if records:
        rows = [
            [k, json.dumps(v) if not isinstance(v, str) else v[:300]] for k, v in records.items()
        ]
        sections += ["", "## Test measurements", "", _table(["measurement", "value"], rows)]
    if "copy_gbps" in bench_data:
        sections += ["", f"Device copy ceiling: **{bench_data['copy_gbps']} GB/s** (read + write)."]
    kernels = bench_data.get("kernels")
    if isinstance(kernels, list):
        rows = [
            [r["case"], r["kernel"], r["path"], r["ms"], r["gbps"], r["fraction_of_copy"]]
            for r in kernels
        ]
        sections += [
            "",
            "## Kernel timings (CUDA events, median)",
            "",
            _table(["case", "op", "path", "ms", "GB/s (model)", "of copy"], rows),
        ]
    for key, title in (
        ("host_overhead_us", "Host time (µs)"),
        ("cold_warm", "Cold vs warm kernel preparation"),
        ("upload_gbps", "Upload bandwidth (GB/s, 256 MiB float32)"),
        ("forced_oom", "Forced out-of-memory retry"),
        ("esrrf", "eSRRF (512 x 512 frames, M 5, R 1.5; target <= 1 ms per frame)"),
    ):
        value = bench_data.get(key)
        if isinstance(value, dict):
            rows = [[k, v] for k, v in value.items()]
            sections += ["", f"## {title}", "", _table(["what", "value"], rows)]
    e2e = bench_data.get("end_to_end")
    if isinstance(e2e, dict) and "error" not in e2e:
        keys = ["upload_ms", "solve_ms", "download_ms", "iterations", "denoise_total_ms"]
        rows = [[case, *[v.get(k) for k in keys]] for case, v in e2e.items()]
        sections += [
            "",
            "## End to end (tv.denoise, whole image)",
            "",
            _table(["case", *keys], rows),
        ]
    elif e2e:
        sections += ["", "## End to end", "", str(e2e)]
    peak = bench_data.get("peak_memory")
    if isinstance(peak, dict) and "error" not in peak:
        rows = [[k, *v.values()] for k, v in peak.items()]
        headers = ["path", *next(iter(peak.values())).keys()]
        sections += ["", "## Peak device memory, 3d 64x1024x1024", "", _table(headers, rows)]
    phase_data = bench_data.get("phase")
    if isinstance(phase_data, dict):
        rows = [
            [k, json.dumps(v) if isinstance(v, list | dict) else v] for k, v in phase_data.items()
        ]
        sections += [
            "",
            "## Phase (reconstruction, tilt map, kernels)",
            "",
            _table(["what", "value"], rows),
        ]
    text = "\n".join(sections) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    merged = {"status": status, "records": records, "bench": bench_data}
    (out / "report.json").write_text(json.dumps(merged, indent=2, default=str), encoding="utf-8")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["bench", "solve", "profile", "report"])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-report")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.command == "bench":
        bench(args.out)
    elif args.command == "solve":
        sanitize_solve()
    elif args.command == "profile":
        profile()
    else:
        print(report(args.out))


if __name__ == "__main__":
    main()
