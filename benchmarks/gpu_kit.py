"""The GPU verification kit's driver (``scripts/gpu-check.sh``); each subcommand also runs alone.

Run from the repository root with ``PYTHONPATH=src`` (``benchmarks/`` is on ``sys.path`` as this
script's folder). Subcommands:

- ``plan [--only A,B] [--skip C] [--format json|tsv]``: the kit's steps, generated from
  :func:`napari_gpuscope.compute.kernels.registered_ops` (no GPU needed): first the ``fresh``
  steps, what has never run on a GPU (:data:`FRESH_STEPS`); then for every method a
  ``twin`` step (its GPU tests, plus the generic per-op and per-source tests of
  ``tests/gpu/test_gpu_kernels.py``), ``memcheck``, ``racecheck`` and ``initcheck`` steps
  (compute-sanitizer on ``exercise``), an ``ncu`` step (Nsight Compute on ``profile``, only the
  method's kernels) and a ``bench`` step; then the ``batch`` step and the forced ``oom`` step.
  eSRRF, flat-field and phase come first, then batch, then TV, then the forced OOM. A token of
  ``--only``/``--skip`` matches a step's name, kind or method.
- ``exercise --method M``: compiles and self-tests the method's ops on the GPU (each self-test
  launches its kernels once), then ``kit_<M>.exercise(device)`` (what the sanitizers run).
- ``profile --method M``: the same preparation, then ``kit_<M>.profile(device)`` between
  ``cudaProfilerStart`` and ``cudaProfilerStop`` (``ncu --profile-from-start off`` profiles
  only those launches, never the self-tests').
- ``bench --method M --out DIR``: ``kit_<M>.bench(device)`` into ``DIR/bench-<M>.json`` (and the
  environment into ``DIR/environment.json``).
- ``oom --out DIR``: ``kit_tv.forced_oom`` into ``DIR/bench-oom.json``.
- ``batch --out DIR [--wheels DIR]``: installs the batch runner's dependencies from the carried
  wheels (``scripts/kit-wheels.sh``) into a temporary folder, then runs
  ``tests/batch/test_batch_gpu.py`` and ``benchmarks/batch_benchmark.py --device cuda``; exit
  status 77 (skipped) without wheels.
- ``site --target DIR [--wheels DIR]``: where pydantic is missing (the GPU machine), installs
  it and its dependencies (:data:`PARAMS_WHEELS`) from the carried wheels into ``DIR``, which
  ``scripts/gpu-check.sh`` puts first on ``PYTHONPATH`` before any step: the compute layer's
  parameter models are pydantic models. Fails naming ``scripts/kit-wheels.sh`` without them.
- ``report --out DIR``: ``DIR/report.md`` and ``DIR/report.json`` from whatever the steps left
  (per-step status and seconds, test results and measurements, sanitizer summaries, Nsight
  Compute per kernel, every method's bench tables, batch); missing pieces are said to be missing.

A method's kit module is ``benchmarks/kit_<method>.py`` with ``bench``, ``exercise`` and
``profile`` functions of one argument, the device; one that is missing fails its step with a
message naming it. Nothing here imports torch or the package at module level: ``plan`` and
``report`` run anywhere.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("fresh", "twin", "memcheck", "racecheck", "initcheck", "ncu", "bench", "batch", "oom")
SANITIZERS = ("memcheck", "racecheck", "initcheck")
METHOD_ORDER = ("esrrf", "flatfield", "phase", "tv")
"""Steps run method by method in this order within each kind; methods not listed (new ones)
come before TV."""
PLATFORM_GROUP = {"kernels": "tv"}
"""The platform's own ops (``compute/kernels``, e.g. ``axpby``) are checked with TV's steps."""
TWIN_TESTS = {
    "esrrf": ("tests/gpu/test_gpu_esrrf.py",),
    "flatfield": ("tests/gpu/test_gpu_flatfield.py",),
    "phase": ("tests/gpu/test_gpu_phase.py",),
    "tv": (
        "tests/gpu/test_gpu_kernels.py",
        "tests/gpu/test_gpu_solve.py",
        "tests/gpu/test_gpu_arrays.py",
        "tests/compute",
    ),
}
GENERIC_TESTS = "tests/gpu/test_gpu_kernels.py"
OP_TEST = "test_registered_op_runs_its_verified_kernel"
SOURCE_TEST = "test_kernel_source_compiles_for_this_gpu"
DEFAULT_LIMITS = {
    "twin": 45,
    "memcheck": 20,
    "racecheck": 25,
    "initcheck": 25,
    "ncu": 25,
    "bench": 45,
}
# Seconds measured on an H100 (2026-11-25) in brackets: the limits leave ~1.5x.
LIMITS = {
    ("twin", "phase"): 60,  # 2048 x 2048 x 21 cases [41; 34 on the H200], 2048² statistics
    ("twin", "tv"): 45,  # three files, the 64x1024x1024 case and a child process [25-32]
    ("racecheck", "esrrf"): 45,  # [36]
    ("initcheck", "flatfield"): 40,  # [timed out while printing 4000 reports; now zeroed]
    ("bench", "phase"): 40,  # [22]
    ("bench", "tv"): 40,  # cold/warm kernel preparation in two fresh processes [32]
    ("memcheck", "tv"): 20,  # [7]
    ("racecheck", "tv"): 20,  # [13]
    ("initcheck", "tv"): 20,  # [10-15]
    ("batch", None): 75,  # pip install, the GPU test [20], the Dask benchmark [> 18]
    ("oom", None): 25,  # [7-12]
}
MAX_TOTAL_S = 1200
"""The plan's limits may add up to more than the default budget (570 s): the budget stops
starting steps, and the steps that have run on a GPU before come last, so a short window cuts
those."""
FRESH_STEPS = (
    (
        "fresh-drift",
        "tests/gpu/test_gpu_drift.py tests/gpu/test_gpu_decorr_register.py",
        "pytest",
        60,
    ),
    ("fresh-live-exact", "tests/gpu/test_gpu_live.py", "pytest", 40),
    ("fresh-latency", "benchmarks/interactive_latency.py --device cuda:0", "script", 60),
    ("fresh-live", "benchmarks/live_benchmark.py --device cuda:0", "script", 90),
    (
        "fresh-phase-auto",
        "benchmarks/phase_auto_regularization.py --device cuda:0 --profile",
        "script",
        30,
    ),
    ("fresh-profile", "benchmarks/job_profile.py --device cuda:0", "script", 45),
)
"""What has never run on a GPU (issue 29 item 5), first in the plan: the drift, registration
and decorrelation GPU tests (not in any twin step), live sessions against the offline jobs
(issue 28 item 4), the docks' interactive latency, the live benchmark and the automatic phase
regularization's timing; and where the host time of the jobs the H200 found slow goes
(``job_profile.py``). (name, target, how, limit s)."""
BATCH_ARGS = (
    'batch --out "$KIT_OUT" --wheels "${KIT_WHEELS:-.kit-wheels}" --limit "${KIT_STEP_LIMIT:-55}"'
)
SKIPPED_EXIT = 77
NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "ComputeWorkloadAnalysis")
BATCH_PACKAGES = ("dask", "distributed", "zarr", "ome_zarr", "pydantic", "yaml")
PARAMS_WHEELS = ("pydantic", "pydantic_core", "annotated_types", "typing_extensions")
PARAMS_WHEELS += ("typing_inspection",)
"""The wheels the compute layer needs beyond the GPU machine's packages: its parameter models
are pydantic models (``site`` installs these before any step)."""

# --------------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------------


class KitError(RuntimeError):
    """A step cannot run as asked (missing kit function, unknown method or step)."""


def _src_on_path() -> None:
    src = str(ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)


def method_of(op: Any) -> str:
    """The method whose steps check ``op``: the compute sub-package defining it."""
    parts = op.module.split(".")
    if parts[:2] != ["napari_gpuscope", "compute"] or len(parts) < 3:
        return "tv"  # a plug-in's op (register=True): checked with the platform's
    return PLATFORM_GROUP.get(parts[2], parts[2])


def _source_method(path: Path, compute_dir: Path) -> str:
    package = path.relative_to(compute_dir).parts[0]
    return PLATFORM_GROUP.get(package, package)


def _ordered(methods: Iterable[str]) -> list[str]:
    known = [m for m in METHOD_ORDER if m in methods]
    new = sorted(set(methods) - set(METHOD_ORDER))
    return [m for m in known if m != "tv"] + new + (["tv"] if "tv" in known else [])


def _limit(kind: str, method: str | None) -> int:
    scale = float(os.environ.get("GPU_KIT_LIMIT_SCALE", "1") or 1)
    return round(scale * LIMITS.get((kind, method), DEFAULT_LIMITS.get(kind, 30)))


def _python() -> str:
    return '"$KIT_PYTHON"'


def _kit(args: str) -> str:
    return f"{_python()} benchmarks/gpu_kit.py {args}"


def _twin_command(method: str, ops: Sequence[Any], sources: Sequence[str], others: dict) -> str:
    targets = list(TWIN_TESTS.get(method, (f"tests/gpu/test_gpu_{method}.py",)))
    nodes = [f"{GENERIC_TESTS}::{OP_TEST}[{op.name}]" for op in ops]
    nodes += [f"{GENERIC_TESTS}::{SOURCE_TEST}[{name}]" for name in sources]
    deselect: list[str] = []
    if GENERIC_TESTS in targets:
        # The whole file runs here: the generic tests of the other methods' ops run in theirs.
        deselect = [f"{GENERIC_TESTS}::{OP_TEST}[{name}]" for name in others["ops"]]
        deselect += [f"{GENERIC_TESTS}::{SOURCE_TEST}[{name}]" for name in others["sources"]]
    else:
        targets += nodes
    words = ["-m", "pytest", "-m", "gpu", "-q", "-ra", "-p", "no:cacheprovider", "-o", "addopts="]
    words += ["--strict-markers", *targets]
    for node in deselect:
        words += ["--deselect", node]
    records = f'GPUSCOPE_KIT_RECORDS="$KIT_OUT/records-twin-{method}.json"'
    return f"{records} {_python()} " + " ".join(shlex.quote(w) for w in words)


def _sanitizer_command(tool: str, method: str) -> str:
    # One cudaMalloc per tensor (no caching allocator), so every bound is the tensor's own.
    return (
        f"PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool {tool} --error-exitcode 9 "
        f"--target-processes all --print-limit 100 " + _kit(f"exercise --method {method}")
    )


def _ncu_command(method: str, kernels: Sequence[str], count: int) -> str:
    regex = "regex:^(" + "|".join(re.escape(k) for k in kernels) + ")$"
    sections = " ".join(f"--section {s}" for s in NCU_SECTIONS)
    return (
        "ncu --clock-control none --target-processes all --profile-from-start off "
        f"--kernel-name-base function -k {shlex.quote(regex)} -c {count} {sections} "
        + _kit(f"profile --method {method}")
    )


def build_plan(only: Sequence[str] = (), skip: Sequence[str] = ()) -> dict:
    """The kit's steps for the ops registered now, filtered by ``only`` and ``skip``.

    Returns
    -------
    dict
        ``{"steps": [{"name", "kind", "method", "ops", "limit_s", "requires", "log",
        "command", ...}], "total_limit_s": ...}``; ``ncu`` steps also list their
        ``kernels``. Commands are shell text for ``bash -c`` with ``$KIT_PYTHON`` and
        ``$KIT_OUT`` set (``scripts/gpu-check.sh`` sets both).

    Raises
    ------
    KitError
        A token of ``only``/``skip`` matches no step.
    """
    _src_on_path()
    from napari_gpuscope.compute.kernels import COMPUTE_DIR, kernel_files, registered_ops

    ops = registered_ops()
    by_method: dict[str, list[Any]] = {}
    for op in ops:
        by_method.setdefault(method_of(op), []).append(op)
    sources: dict[str, list[str]] = {}
    for path in kernel_files():
        sources.setdefault(_source_method(path, COMPUTE_DIR), []).append(path.name)
    methods = _ordered(by_method)
    steps: list[dict] = []

    def add(kind: str, method: str | None, command: str, **extra: Any) -> None:
        method_ops = [op.name for op in by_method.get(method, [])] if method else []
        name = f"{kind}-{method}" if method else kind
        steps.append(
            {
                "name": name,
                "kind": kind,
                "method": method,
                "ops": method_ops,
                "limit_s": _limit(kind, method),
                "requires": {"ncu": "ncu", **dict.fromkeys(SANITIZERS, "compute-sanitizer")}.get(
                    kind
                ),
                "log": f"{name}.log",
                "command": command,
                **extra,
            }
        )

    def method_steps(method: str, kind: str) -> None:
        mine = by_method.get(method, [])
        if kind == "twin":
            others = {
                "ops": [op.name for op in ops if method_of(op) != method],
                "sources": [n for m, names in sources.items() if m != method for n in names],
            }
            add(kind, method, _twin_command(method, mine, sources.get(method, []), others))
        elif kind in SANITIZERS:
            add(kind, method, _sanitizer_command(kind, method))
        elif kind == "ncu":
            kernels = sorted({k for op in mine for k in op.kernel_names})
            # Each op's profile launches its kernels a few times at most; the cap keeps a
            # profile that loops (whole jobs) from replaying hundreds of launches.
            count = max(4, 3 * len(mine))
            op_kernels = {op.name: list(op.kernel_names) for op in mine}
            command = _ncu_command(method, kernels, count)
            add(kind, method, command, kernels=kernels, op_kernels=op_kernels)
        elif kind == "bench":
            add(kind, method, _kit(f'bench --method {method} --out "$KIT_OUT"'))

    for name, target, how, limit in FRESH_STEPS:
        if how == "pytest":
            words = "-m pytest -m gpu -q -ra -p no:cacheprovider -o addopts= --strict-markers"
            records = f'GPUSCOPE_KIT_RECORDS="$KIT_OUT/records-{name}.json"'
            command = f"{records} {_python()} {words} {target}"
        else:
            command = f'set -o pipefail; {_python()} {target} | tee "$KIT_OUT/{name}.md"'
        steps.append(
            {
                "name": name,
                "kind": "fresh",
                "method": None,
                "ops": [],
                "limit_s": round(float(os.environ.get("GPU_KIT_LIMIT_SCALE", "1") or 1) * limit),
                "requires": None,
                "log": f"{name}.log",
                "command": command,
            }
        )
    per_method_kinds = ("twin", *SANITIZERS, "ncu", "bench")
    first = [m for m in methods if m != "tv"]
    for kind in per_method_kinds:
        for method in first:
            method_steps(method, kind)
    add("batch", None, _kit(BATCH_ARGS))
    if "tv" in methods:
        for kind in per_method_kinds:
            method_steps("tv", kind)
    add("oom", None, _kit('oom --out "$KIT_OUT"'))

    steps = _select(steps, only, skip)
    return {"steps": steps, "total_limit_s": sum(s["limit_s"] for s in steps)}


def _split(tokens: Sequence[str]) -> list[str]:
    return [t.strip() for token in tokens for t in token.split(",") if t.strip()]


def _select(steps: list[dict], only: Sequence[str], skip: Sequence[str]) -> list[dict]:
    only, skip = _split(only), _split(skip)
    known = {s["name"] for s in steps} | {s["kind"] for s in steps}
    known |= {s["method"] for s in steps if s["method"]}
    unknown = sorted(set(only + skip) - known)
    if unknown:
        raise KitError(f"no step matches {unknown}; steps, kinds and methods: {sorted(known)}")

    def matches(step: dict, tokens: list[str]) -> bool:
        return bool({step["name"], step["kind"], step["method"]} & set(tokens))

    return [s for s in steps if (not only or matches(s, only)) and not matches(s, skip)]


def _plan_tsv(plan: dict) -> str:
    lines = []
    for step in plan["steps"]:
        fields = [step["name"], step["kind"], step["method"] or "-", str(step["limit_s"])]
        fields += [step["requires"] or "-", step["log"], step["command"]]
        assert not any("\t" in f or "\n" in f for f in fields), fields
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# exercise, profile, bench, oom
# --------------------------------------------------------------------------------------------


def _kit_function(method: str, name: str) -> Any:
    """``kit_<method>.<name>``, or a KitError saying what is missing."""
    try:
        module = importlib.import_module(f"kit_{method}")
    except ModuleNotFoundError as exc:
        if exc.name != f"kit_{method}":
            raise
        raise KitError(f"benchmarks/kit_{method}.py does not exist") from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise KitError(f"benchmarks/kit_{method}.py has no {name}(device) function")
    return function


def _prepare_method(method: str, device: Any) -> dict[str, str]:
    """Compile and self-test the method's ops on ``device``: {op: path}."""
    from napari_gpuscope.compute.kernels import registered_ops

    ops = [op for op in registered_ops() if method_of(op) == method]
    if not ops:
        raise KitError(f"no registered op belongs to method {method!r}")
    return {op.name: op.path(device).describe() for op in ops}


def _require_kernels(paths: dict[str, str]) -> None:
    off = {name: how for name, how in paths.items() if not how.startswith("fused kernel")}
    if off:
        raise KitError(f"ops not on their fused kernel: {off}")


def exercise(method: str) -> None:
    import torch

    device = torch.device("cuda", 0)
    paths = _prepare_method(method, device)
    print("self-tests:", json.dumps(paths), flush=True)
    torch.cuda.synchronize(device)
    function = _kit_function(method, "exercise")
    function(device)
    torch.cuda.synchronize(device)
    _require_kernels(paths)
    print(f"exercise {method}: done", flush=True)


def profile(method: str) -> None:
    import torch

    device = torch.device("cuda", 0)
    paths = _prepare_method(method, device)
    print("self-tests:", json.dumps(paths), flush=True)
    function = _kit_function(method, "profile")
    torch.cuda.synchronize(device)
    torch.cuda.profiler.start()  # ncu --profile-from-start off: only what follows
    try:
        with torch.cuda.nvtx.range(f"gpuscope-profile-{method}"):
            function(device)
        torch.cuda.synchronize(device)
    finally:
        torch.cuda.profiler.stop()
    _require_kernels(paths)
    print(f"profile {method}: done", flush=True)


def _version(module: str) -> str | None:
    try:
        return importlib.import_module(module).__version__
    except Exception:
        return None


def environment() -> dict:
    """GPU, driver, torch, CuPy, CUDA runtime and NVRTC versions."""
    import numpy as np
    import torch

    from napari_gpuscope.compute.devices import cupy_status

    props = torch.cuda.get_device_properties(0)
    env = {
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 1024**3, 1),
        "sm_count": props.multi_processor_count,
        "gpu_count": torch.cuda.device_count(),
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


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")


def bench(method: str, out: Path) -> int:
    import torch

    device = torch.device("cuda", 0)
    if not (out / "environment.json").exists():
        try:
            _write_json(out / "environment.json", environment())
        except Exception as exc:  # the measurements matter more than the versions
            print(f"environment: {type(exc).__name__}: {exc}", flush=True)
    start = time.perf_counter()
    try:
        result = _kit_function(method, "bench")(device)
        status = 0
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
        status = 1
    seconds = round(time.perf_counter() - start, 1)
    _write_json(out / f"bench-{method}.json", {"seconds": seconds, "result": result})
    print(f"[bench {method}] {seconds} s" + (f": {result['error']}" if status else ""))
    return status


def oom(out: Path) -> int:
    import torch

    start = time.perf_counter()
    result = _kit_function("tv", "forced_oom")(torch.device("cuda", 0))
    seconds = round(time.perf_counter() - start, 1)
    _write_json(out / "bench-oom.json", {"seconds": seconds, "result": result})
    print(json.dumps(result, indent=2, default=str))
    return 0 if "error" not in result and result.get("bytes_left_allocated_after_job") == 0 else 1


# --------------------------------------------------------------------------------------------
# batch: the batch runner on the GPU, with its dependencies from carried wheels
# --------------------------------------------------------------------------------------------


def install_wheels(
    wheels: Path,
    target: Path,
    python: str = sys.executable,
    names: Sequence[str] | None = None,
) -> str:
    """Install every wheel of ``wheels`` (or those of the distributions ``names``) into
    ``target`` (no index, no dependency resolution: ``scripts/kit-wheels.sh`` resolved them);
    with pip when the interpreter has it, else by unpacking them (a wheel is a zip of its
    site-packages files). Returns how."""
    files = sorted(wheels.glob("*.whl"))
    if names is not None:
        wanted = {re.sub(r"[-_.]+", "_", n).lower() for n in names}
        files = [f for f in files if f.name.split("-", 1)[0].lower() in wanted]
    if not files:
        raise KitError(f"no wheels in {wheels}")
    has_pip = (
        subprocess.run(
            [python, "-m", "pip", "--version"], capture_output=True, check=False, timeout=60
        ).returncode
        == 0
    )
    if has_pip:
        command = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet"]
        command += ["--disable-pip-version-check", "--target", str(target), *map(str, files)]
        subprocess.run(command, check=True, timeout=300)
        return f"pip install --no-index --no-deps --target {target} ({len(files)} wheels)"
    for path in files:
        with zipfile.ZipFile(path) as archive:
            archive.extractall(target)
    # Files a wheel keeps under NAME.data/{purelib,platlib} belong in site-packages itself.
    for data in target.glob("*.data"):
        for kind in ("purelib", "platlib"):
            for item in (data / kind).glob("*") if (data / kind).is_dir() else ():
                destination = target / item.name
                if destination.exists():
                    continue
                shutil.move(str(item), str(destination))
    return f"unpacked {len(files)} wheels into {target} (no pip)"


def _run_logged(command: Sequence[str], env: dict, timeout: float) -> dict:
    print("$ " + " ".join(shlex.quote(c) for c in command), flush=True)
    start = time.perf_counter()
    try:
        run = subprocess.run(
            command,
            env=env,
            cwd=ROOT,
            timeout=max(1.0, timeout),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        output, rc = run.stdout, run.returncode
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode()
        rc = 124
    print(output, flush=True)
    tail = without_log_lines(output)[-3000:]
    return {"rc": rc, "seconds": round(time.perf_counter() - start, 1), "tail": tail}


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - [\w.]+ - (INFO|DEBUG) - ")
"""An INFO or DEBUG line of Python logging in Dask's format (``2026-11-29 22:22:11,391 -
distributed.nanny - INFO - ...``): the H200 run's batch report held 3000 characters of them
instead of the benchmark's table. Warnings and errors stay: they may say why a step failed."""


def without_log_lines(text: str) -> str:
    """``text`` without Dask's logging lines (the log keeps them; the report's tail does not).

    >>> without_log_lines("2026-11-29 22:22:11,391 - distributed.nanny - INFO - Closing\\n| 1 |")
    '| 1 |'
    """
    return "\n".join(line for line in text.splitlines() if not LOG_LINE.match(line))


def site(wheels: Path, target: Path) -> int:
    """Make the compute layer importable on a machine without pydantic: install
    :data:`PARAMS_WHEELS` from the carried wheels into ``target`` (the caller puts it on
    ``PYTHONPATH``); nothing to do where pydantic imports already."""
    if importlib.util.find_spec("pydantic") is not None:
        print("pydantic is installed: nothing to install")
        return 0
    wheels = wheels if wheels.is_absolute() else ROOT / wheels
    if not any(wheels.glob("pydantic-*.whl")):
        raise KitError(
            f"the parameter models need pydantic, which {sys.executable} lacks, and {wheels} "
            "holds no pydantic wheel: run scripts/kit-wheels.sh where PyPI is reachable and "
            "carry its folder (.kit-wheels) to this machine with the tree"
        )
    print(install_wheels(wheels, target, names=PARAMS_WHEELS))
    return 0


def batch(out: Path, wheels: Path, limit_s: float) -> int:
    deadline = time.perf_counter() + limit_s
    wheels = wheels if wheels.is_absolute() else ROOT / wheels
    if not wheels.is_dir() or not any(wheels.glob("*.whl")):
        message = (
            f"SKIPPED: no wheels in {wheels}. Run scripts/kit-wheels.sh where PyPI is reachable "
            "and carry the folder to the GPU machine (it holds dask, distributed, zarr, "
            "ome-zarr, pydantic and PyYAML, which the GPU machine lacks)."
        )
        print(message)
        _write_json(out / "batch.json", {"status": "skipped", "reason": message})
        return SKIPPED_EXIT
    target = Path(tempfile.mkdtemp(prefix="kit-batch-site-"))
    result: dict[str, Any] = {"wheels": str(wheels)}
    try:
        result["install"] = install_wheels(wheels, target)
        env = dict(os.environ)
        # The target first, so that Dask's worker processes inherit it too.
        paths = [str(target), str(ROOT / "src"), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        probe = "import importlib, json; print(json.dumps({m: getattr(importlib.import_module(m),"
        probe += f" '__version__', '?') for m in {list(BATCH_PACKAGES)!r}}}))"
        check = _run_logged([sys.executable, "-c", probe], env, 120)
        result["imports"] = check
        if check["rc"] != 0:
            raise KitError("the carried wheels do not import: " + check["tail"][-500:])
        result["versions"] = json.loads(check["tail"].strip().splitlines()[-1])
        pytest_command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-ra"]
        pytest_command += ["-p", "no:cacheprovider", "-o", "addopts=", "--strict-markers"]
        pytest_command += ["tests/batch/test_batch_gpu.py"]
        left = deadline - time.perf_counter()
        result["pytest"] = _run_logged(pytest_command, env, 0.55 * left)
        import torch

        count = max(1, torch.cuda.device_count())
        workers = [str(w) for w in (1, 2, 4, 8) if w <= count]
        bench_command = [sys.executable, "benchmarks/batch_benchmark.py", "--device", "cuda"]
        bench_command += ["--workers", *workers, "--positions", "32", "--size", "1024"]
        left = deadline - time.perf_counter() - 2
        result["benchmark"] = _run_logged(bench_command, env, left)
        status = 0 if result["pytest"]["rc"] == 0 and result["benchmark"]["rc"] == 0 else 1
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        print(result["error"])
        status = 1
    finally:
        shutil.rmtree(target, ignore_errors=True)
    result["status"] = "passed" if status == 0 else "failed"
    _write_json(out / "batch.json", result)
    return status


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, dict | list):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _scalar(value: Any) -> bool:
    return not isinstance(value, dict | list)


def render(value: Any, title: str, level: int = 3) -> list[str]:
    """Markdown for a JSON measurement: a list of flat dicts or a dict of flat dicts becomes
    one table, a dict of scalars a what/value table, anything nested its own sub-sections."""
    head = ["", "#" * level + " " + title, ""]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        keys = list(dict.fromkeys(k for row in value for k in row))
        return head + _table(keys, [[row.get(k, "") for k in keys] for row in value])
    if not isinstance(value, dict):
        return [*head, _cell(value)]
    flat = {k: v for k, v in value.items() if _scalar(v) or (isinstance(v, list) and not v)}
    rows_of_dicts = {
        k: v
        for k, v in value.items()
        if isinstance(v, dict) and v and all(map(_scalar, v.values()))
    }
    lines = list(head)
    if flat:
        lines += _table(["what", "value"], flat.items())
    if len(rows_of_dicts) >= 2:
        keys = list(dict.fromkeys(k for v in rows_of_dicts.values() for k in v))
        cases = [[c, *[v.get(k, "") for k in keys]] for c, v in rows_of_dicts.items()]
        lines += ["", *_table(["case", *keys], cases)]
        rest = {k: v for k, v in value.items() if k not in flat and k not in rows_of_dicts}
    else:
        rest = {k: v for k, v in value.items() if k not in flat}
    for key, item in rest.items():
        lines += render(item, f"{title}: {key}", min(level + 1, 6))
    return lines


_PYTEST_SUMMARY = re.compile(
    r"^=*\s*(\d+ (?:passed|failed|error|errors|skipped|deselected)\b.*?)=*$"
)
_SANITIZER_SUMMARY = re.compile(r"=+ (ERROR SUMMARY: .*|RACECHECK SUMMARY: .*|LEAK SUMMARY: .*)$")
_SANITIZER_AT = re.compile(r"\bat (?:0x[0-9a-f]+ in )?([A-Za-z_]\w*)\+0x[0-9a-f]+")


def pytest_summary(log: str) -> dict:
    """The final count line and the FAILED/ERROR lines of a pytest log."""
    summary = ""
    for line in log.splitlines():
        match = _PYTEST_SUMMARY.match(line.strip())
        if match:
            summary = match.group(1).strip()
    problems = [
        line.strip()
        for line in log.splitlines()
        if line.startswith(("FAILED ", "ERROR ")) and "::" in line
    ]
    return {"summary": summary or "(no pytest summary line)", "problems": problems}


def sanitizer_summary(log: str, ours: set[str]) -> dict:
    """Summary lines of a compute-sanitizer log and the kernels its reports name."""
    summaries = [m.group(1) for m in map(_SANITIZER_SUMMARY.search, log.splitlines()) if m]
    kernels: dict[str, int] = {}
    for line in log.splitlines():
        if line.startswith("====="):
            for name in dict.fromkeys(_SANITIZER_AT.findall(line)):
                kernels[name] = kernels.get(name, 0) + 1
    return {
        "summary": summaries or ["(no sanitizer summary: the program did not finish?)"],
        "reports_by_kernel": kernels,
        "our_kernels_reported": sorted(k for k in kernels if k in ours),
        "exercise": [
            line
            for line in log.splitlines()
            if line.startswith(("self-tests:", "paths:", "exercise "))
        ],
    }


_NCU_KERNEL = re.compile(r"^\s{2}(\w+) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)")
_NCU_METRIC = re.compile(r"^\s{4}(\S.*?)\s{2,}(\S+)\s+([\d.,]+)\s*$")
NCU_METRICS = {
    "Duration": "duration",
    "DRAM Throughput": "dram_%",
    "Memory Throughput": "memory_%",
    "Compute (SM) Throughput": "sm_%",
    "Registers Per Thread": "registers",
    "Theoretical Occupancy": "occupancy_theoretical_%",
    "Achieved Occupancy": "occupancy_achieved_%",
    "Executed Ipc Active": "ipc",
}


def ncu_summary(log: str, op_kernels: dict[str, Sequence[str]]) -> dict:
    """Per profiled kernel: grid, block and the speed-of-light and occupancy metrics; and the
    ops none of whose kernels was profiled."""
    kernels: list[dict] = []
    current: dict | None = None
    for line in log.splitlines():
        head = _NCU_KERNEL.match(line)
        if head:
            current = {"kernel": head.group(1), "grid": "x".join(head.group(2, 3, 4))}
            current["block"] = "x".join(head.group(5, 6, 7))
            kernels.append(current)
            continue
        metric = _NCU_METRIC.match(line)
        if metric and current is not None and metric.group(1).strip() in NCU_METRICS:
            key = NCU_METRICS[metric.group(1).strip()]
            unit = metric.group(2)
            value = metric.group(3).replace(",", "")
            current[key] = f"{value} {unit}" if key == "duration" else value
    profiled = {k["kernel"] for k in kernels}
    return {
        "kernels": kernels,
        "ops_not_profiled": sorted(
            op for op, names in op_kernels.items() if not profiled & set(names)
        ),
        "notes": [
            line.strip()
            for line in log.splitlines()
            if "No kernels were profiled" in line or "==ERROR==" in line
        ],
    }


def _status_rows(out: Path) -> list[dict]:
    path = out / "status.tsv"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) >= 6 and fields[0] != "name":
            name, kind, method, status, rc, seconds = fields[:6]
            limit = fields[6] if len(fields) > 6 else ""
            rows.append(
                {
                    "name": name,
                    "kind": kind,
                    "method": method,
                    "status": status,
                    "rc": rc,
                    "seconds": seconds,
                    "limit_s": limit,
                }
            )
    return rows


def report(out: Path) -> str:
    plan = _load(out / "plan.json") or {"steps": []}
    steps = {s["name"]: s for s in plan.get("steps", [])}
    status = _status_rows(out)
    ran = {row["name"]: row for row in status}
    logs = out / "steps"

    def log_of(name: str) -> str | None:
        """The log of a step that ran (not of one skipped or not reached)."""
        if ran.get(name, {}).get("status") not in ("passed", "failed", "timeout"):
            return None
        step = steps.get(name, {"log": f"{name}.log"})
        path = logs / step["log"]
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else None

    data: dict[str, Any] = {"plan": plan, "status": status}
    lines = ["# GPU check report", ""]
    env = _load(out / "environment.json")
    data["environment"] = env
    lines += ["## Environment", ""]
    lines += (
        _table(["item", "value"], env.items())
        if env
        else ["(no environment.json: no bench step ran)"]
    )

    lines += ["", "## Steps", ""]
    rows = []
    for name, step in steps.items():
        row = ran.get(name, {})
        rows.append(
            [
                name,
                step["kind"],
                row.get("status", "not run"),
                row.get("rc", ""),
                f"{row.get('seconds', '-')} / {row.get('limit_s') or step['limit_s']}",
                ", ".join(step.get("ops", [])),
            ]
        )
    lines += _table(["step", "kind", "status", "rc", "seconds / limit", "ops"], rows)
    total = sum(float(r["seconds"]) for r in status if r["seconds"].replace(".", "").isdigit())
    lines += [
        "",
        f"Steps took {total:.0f} s in all; the plan's limits add up to "
        f"{plan.get('total_limit_s')} s.",
    ]

    fresh = {}
    for name, step in steps.items():
        if step["kind"] != "fresh" or (text := log_of(name)) is None:
            continue
        table = out / f"{name}.md"
        fresh[name] = (
            table.read_text(encoding="utf-8", errors="replace").strip()
            if table.exists()
            else pytest_summary(text)["summary"]
        )
    data["fresh"] = fresh
    if fresh:
        lines += ["", "## Never run on a GPU before", ""]
        for name, text in fresh.items():
            lines += [f"### {name}", "", text, ""]
    twin = {}
    for name, step in steps.items():
        if step["kind"] == "twin" and (text := log_of(name)) is not None:
            twin[name] = pytest_summary(text)
    data["twin"] = twin
    if twin:
        lines += ["", "## Kernels against their twins (pytest)", ""]
        for name, summary in twin.items():
            lines.append(f"- **{name}**: {summary['summary']}")
            lines += [f"  - {p}" for p in summary["problems"][:25]]
    records = {}
    for path in sorted(out.glob("records-*.json")):
        records.update(_load(path) or {})
    data["records"] = records
    if records:
        lines += ["", "## Test measurements", ""]
        lines += _table(["measurement", "value"], records.items())

    ours = {k for s in steps.values() for k in s.get("kernels", [])}
    sanitizers = {}
    for name, step in steps.items():
        if step["kind"] in SANITIZERS and (text := log_of(name)) is not None:
            sanitizers[name] = sanitizer_summary(text, ours)
    data["sanitizers"] = sanitizers
    if sanitizers:
        lines += ["", "## compute-sanitizer", ""]
        for name, summary in sanitizers.items():
            reported = summary["reports_by_kernel"]
            lines.append(
                f"- **{name}** ({ran.get(name, {}).get('status', 'not run')}): "
                + "; ".join(summary["summary"])
                + (f"; reports by kernel: {json.dumps(reported)}" if reported else "")
            )
    ncu = {}
    for name, step in steps.items():
        if step["kind"] == "ncu" and (text := log_of(name)) is not None:
            ncu[name] = ncu_summary(text, step.get("op_kernels", {}))
    data["ncu"] = ncu
    if ncu:
        lines += ["", "## Nsight Compute (one launch each, `--clock-control none`)", ""]
        rows = [
            [
                name,
                *[
                    k.get(c, "")
                    for c in (
                        "kernel",
                        "grid",
                        "block",
                        "duration",
                        "dram_%",
                        "memory_%",
                        "sm_%",
                        "registers",
                        "occupancy_theoretical_%",
                        "occupancy_achieved_%",
                    )
                ],
            ]
            for name, summary in ncu.items()
            for k in summary["kernels"]
        ]
        lines += _table(
            [
                "step",
                "kernel",
                "grid",
                "block",
                "duration",
                "DRAM %",
                "memory %",
                "SM %",
                "registers",
                "occupancy theor. %",
                "achieved %",
            ],
            rows,
        )
        for name, summary in ncu.items():
            missing = summary["ops_not_profiled"]
            if missing or summary["notes"]:
                notes = [*summary["notes"], *([f"ops not profiled: {missing}"] if missing else [])]
                lines.append(f"- {name}: " + "; ".join(notes))
    benches = {}
    for path in sorted(out.glob("bench-*.json")):
        benches[path.stem.removeprefix("bench-")] = _load(path)
    data["bench"] = benches
    for method, value in benches.items():
        if value is None:
            continue
        title = f"Bench: {method} ({value.get('seconds', '?')} s)"
        lines += render(value.get("result"), title, 2)
    batch_data = _load(out / "batch.json")
    data["batch"] = batch_data
    if batch_data:
        lines += ["", "## Batch runner on the GPU", ""]
        lines.append(
            f"Status: **{batch_data.get('status')}**. "
            + str(batch_data.get("reason") or batch_data.get("error") or "")
        )
        for key in ("install", "versions"):
            if key in batch_data:
                lines.append(f"- {key}: {_cell(batch_data[key])}")
        for key in ("pytest", "benchmark"):
            if key in batch_data:
                part = batch_data[key]
                lines += [
                    "",
                    f"{key} (rc {part['rc']}, {part['seconds']} s):",
                    "",
                    "```",
                    part["tail"][-1500:].strip(),
                    "```",
                ]
    missing = [n for n in steps if ran.get(n, {}).get("status", "not-run").startswith("not-run")]
    if missing:
        lines += ["", f"Not run: {', '.join(missing)}."]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    _write_json(out / "report.json", data)
    return text


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = ("plan", "exercise", "profile", "bench", "oom", "batch", "report", "site")
    parser.add_argument("command", choices=commands)
    parser.add_argument("--method", help="exercise, profile, bench: esrrf, flatfield, phase, tv")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("KIT_OUT", "gpu-report")))
    parser.add_argument("--only", action="append", default=[], help="plan: NAME[,NAME]")
    parser.add_argument("--skip", action="append", default=[], help="plan: NAME[,NAME]")
    parser.add_argument("--format", choices=("json", "tsv"), default="json", help="plan")
    parser.add_argument("--wheels", type=Path, default=Path(".kit-wheels"), help="batch, site")
    parser.add_argument("--target", type=Path, help="site: the folder to install into")
    parser.add_argument("--limit", type=float, default=_limit("batch", None), help="batch: s")
    args = parser.parse_args(argv)
    _src_on_path()
    try:
        if args.command == "site":
            if args.target is None:
                raise KitError("site needs --target")
            return site(args.wheels, args.target)
        if args.command == "plan":
            plan = build_plan(args.only, args.skip)
            print(_plan_tsv(plan) if args.format == "tsv" else json.dumps(plan, indent=2), end="")
            return 0
        if args.command in ("exercise", "profile", "bench") and not args.method:
            raise KitError(f"{args.command} needs --method")
        if args.command == "exercise":
            exercise(args.method)
            return 0
        if args.command == "profile":
            profile(args.method)
            return 0
        args.out.mkdir(parents=True, exist_ok=True)
        if args.command == "bench":
            return bench(args.method, args.out)
        if args.command == "oom":
            return oom(args.out)
        if args.command == "batch":
            return batch(args.out, args.wheels, args.limit)
        report(args.out)
        return 0
    except KitError as exc:
        print(f"gpu_kit {args.command}: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
