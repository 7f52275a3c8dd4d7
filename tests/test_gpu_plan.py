"""The GPU kit's plan (``bash scripts/gpu-check.sh --plan``) against the op registry: every
registered op is checked against its twin, by memcheck, racecheck and initcheck, and profiled
by Nsight Compute; the new methods come first; the limits add up to at most 20 minutes and the
never-run and twin steps fit the default budget. Also the
kit's report and wheel installation, on the CPU."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from napari_gpuscope.compute.kernels import kernel_files, registered_ops

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_kit  # noqa: E402

METHOD_OF_PACKAGE = {"esrrf": "esrrf", "flatfield": "flatfield", "phase": "phase", "tv": "tv"}


def _plan(*args: str) -> dict:
    env = {**os.environ, "PYTHON": sys.executable}
    run = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--plan", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def plan() -> dict:
    return _plan()


def _method(op) -> str:
    """Independently of the kit: the compute sub-package, the platform's ops with TV's."""
    package = op.module.split(".")[2]
    return "tv" if package == "kernels" else METHOD_OF_PACKAGE.get(package, package)


def test_every_registered_op_is_twinned_sanitized_and_profiled(plan):
    steps = plan["steps"]
    assert {s["kind"] for s in steps} == set(gpu_kit.KINDS)
    for op in registered_ops():
        for kind in ("twin", "memcheck", "racecheck", "initcheck", "ncu", "bench"):
            holding = [s for s in steps if s["kind"] == kind and op.name in s["ops"]]
            assert len(holding) == 1, (op.name, kind, [s["name"] for s in holding])
            assert holding[0]["method"] == _method(op)


def test_limits_fit_the_window_and_every_step_has_its_own(plan):
    limits = [s["limit_s"] for s in plan["steps"]]
    assert all(isinstance(limit, int) and limit >= 10 for limit in limits)
    assert sum(limits) == plan["total_limit_s"] <= gpu_kit.MAX_TOTAL_S
    assert len({s["name"] for s in plan["steps"]}) == len(plan["steps"])
    assert len({s["log"] for s in plan["steps"]}) == len(plan["steps"])


def test_new_methods_run_before_tv_and_the_forced_oom_runs_last(plan):
    names = [s["name"] for s in plan["steps"]]
    methods = [s["method"] for s in plan["steps"]]
    first_tv = methods.index("tv")
    for method in ("esrrf", "flatfield", "phase"):
        assert method in methods
        assert max(i for i, m in enumerate(methods) if m == method) < first_tv
    assert names[-1] == "oom"
    # Correctness first: every method's twin step before any sanitizer, profile or bench.
    kinds = [s["kind"] for s in plan["steps"] if s["method"] != "tv"]
    assert kinds.index("memcheck") > max(i for i, k in enumerate(kinds) if k == "twin")


def test_what_never_ran_on_a_gpu_runs_first_and_fits_the_default_budget(plan):
    """Issue 29 item 5: the fresh steps lead, and with every method's twin tests they fit in
    the default budget (570 s), so a short window still checks them."""
    steps = plan["steps"]
    kinds = [s["kind"] for s in steps]
    fresh = [s for s in steps if s["kind"] == "fresh"]
    assert kinds[: len(fresh)] == ["fresh"] * len(fresh) and len(fresh) == len(gpu_kit.FRESH_STEPS)
    twins = [s for s in steps if s["kind"] == "twin" and s["method"] != "tv"]
    assert sum(s["limit_s"] for s in fresh + twins) <= 570
    for name, target, how, _ in gpu_kit.FRESH_STEPS:
        files = [w for w in target.split() if w.endswith(".py")]
        assert files and all((ROOT / f).is_file() for f in files), name
        command = next(s["command"] for s in steps if s["name"] == name)
        assert how == "pytest" or command.startswith("set -o pipefail")  # tee keeps the status


def test_ncu_steps_profile_exactly_the_methods_kernels(plan):
    profiled = set()
    for step in [s for s in plan["steps"] if s["kind"] == "ncu"]:
        words = shlex.split(step["command"])
        regex = words[words.index("-k") + 1].removeprefix("regex:")
        ops = [op for op in registered_ops() if op.name in step["ops"]]
        mine = {k for op in ops for k in op.kernel_names}
        every = {k for path in kernel_files() for k in _kernels_of(path)}
        assert {k for k in every if re.fullmatch(regex, k)} == mine, step["name"]
        assert "--profile-from-start" in words and words[words.index("-c") + 1].isdigit()
        assert words[-3:] == ["profile", "--method", step["method"]]
        profiled |= mine
    assert profiled == {k for path in kernel_files() for k in _kernels_of(path)}


def _kernels_of(path: Path) -> set[str]:
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.DOTALL)
    return set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)", text))


def test_sanitizer_steps_run_the_methods_exercise_without_the_caching_allocator(plan):
    for step in [s for s in plan["steps"] if s["kind"] in ("memcheck", "racecheck", "initcheck")]:
        words = shlex.split(step["command"])
        assert words[0] == "PYTORCH_NO_CUDA_MEMORY_CACHING=1" and words[1] == "compute-sanitizer"
        assert words[words.index("--tool") + 1] == step["kind"]
        assert words[-3:] == ["exercise", "--method", step["method"]]
        assert step["requires"] == "compute-sanitizer"


def _twin_targets(step: dict) -> tuple[list[str], list[str]]:
    """The test files and node ids a twin step runs, and those it deselects."""
    words = shlex.split(step["command"].split('"$KIT_PYTHON"', 1)[1])
    deselected = [b for a, b in itertools.pairwise(words) if a == "--deselect"]
    chosen = [w for w in words if w.startswith("tests/") and w not in deselected]
    return chosen, deselected


def test_twin_steps_run_each_ops_generic_test_once_and_name_tests_that_exist(plan):
    """Every op's generic GPU test runs in its own method's twin step only, and every file and
    node id of the twin steps is collected by pytest (here, skipped)."""
    twins = [s for s in plan["steps"] if s["kind"] == "twin"]
    node = "tests/gpu/test_gpu_kernels.py::test_registered_op_runs_its_verified_kernel[{}]"
    for op in registered_ops():
        running = []
        for step in twins:
            chosen, deselected = _twin_targets(step)
            whole_file = "tests/gpu/test_gpu_kernels.py" in chosen
            if node.format(op.name) in chosen or (
                whole_file and node.format(op.name) not in deselected
            ):
                running.append(step["method"])
        assert running == [_method(op)], (op.name, running)
    everything = [t for step in twins for part in _twin_targets(step) for t in part]
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*collect, "-o", "addopts=", "-m", "gpu", *dict.fromkeys(everything)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    collected = set(run.stdout.split())
    for target in everything:
        if "::" in target:
            assert target in collected, target


def test_only_and_skip_select_by_name_kind_or_method():
    only = _plan("--only", "esrrf,ncu-tv", "--skip", "bench")
    names = [s["name"] for s in only["steps"]]
    assert names == [
        "twin-esrrf",
        "memcheck-esrrf",
        "racecheck-esrrf",
        "initcheck-esrrf",
        "ncu-esrrf",
        "ncu-tv",
    ]
    assert only["total_limit_s"] == sum(s["limit_s"] for s in only["steps"])
    with pytest.raises(gpu_kit.KitError, match="no step matches"):
        gpu_kit.build_plan(["esrfr"])


def test_a_missing_kit_function_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "kit_nomethod.py").write_text("def bench(device):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert gpu_kit._kit_function("nomethod", "bench")(None) == {}
    with pytest.raises(gpu_kit.KitError, match=r"kit_nomethod\.py has no exercise\(device\)"):
        gpu_kit._kit_function("nomethod", "exercise")
    with pytest.raises(gpu_kit.KitError, match=r"kit_absent\.py does not exist"):
        gpu_kit._kit_function("absent", "profile")
    with pytest.raises(gpu_kit.KitError, match="no registered op belongs"):
        gpu_kit._prepare_method("absent", None)


def test_the_batch_step_is_skipped_without_wheels(tmp_path):
    assert gpu_kit.batch(tmp_path, tmp_path / "no-wheels", 10) == gpu_kit.SKIPPED_EXIT
    assert json.loads((tmp_path / "batch.json").read_text())["status"] == "skipped"


def _wheel(folder: Path) -> Path:
    """A minimal valid wheel: one module, one file under .data/purelib."""
    path = folder / "kitprobe-1.0-py3-none-any.whl"
    files = {
        "kitprobe.py": "VALUE = 42\n",
        "kitprobe-1.0.data/purelib/kitprobe_extra.py": "EXTRA = 1\n",
        "kitprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: kitprobe\nVersion: 1.0\n",
        "kitprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "kitprobe-1.0.dist-info/RECORD,,\n"
    files["kitprobe-1.0.dist-info/RECORD"] = record
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.mark.parametrize("how", ["pip", "unzip"])
def test_wheels_install_into_a_folder_that_imports(tmp_path, how):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    target = tmp_path / "site"
    target.mkdir()
    python = sys.executable if how == "pip" else "false"  # `false -m pip` fails: no pip
    said = gpu_kit.install_wheels(wheels, target, python=python)
    assert ("pip install" in said) == (how == "pip")
    code = "import kitprobe, kitprobe_extra; print(kitprobe.VALUE + kitprobe_extra.EXTRA)"
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "43"


NCU_LOG = """\
==PROF== Connected to process 804 (/usr/bin/python3.12)
==PROF== Profiling "fgp_step_3d_u32": 0%....50%....100% - 10 passes
[804] python3.12@127.0.0.1
  fgp_step_3d_u32 (262140, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    DRAM Throughput                   %        80.71
    Duration                         ms         1.77
    Compute (SM) Throughput           %        39.06
    Registers Per Thread             register/thread              32
    Theoretical Occupancy                     %          100
    Achieved Occupancy                        %        90.66
"""

SANITIZER_LOG = """\
self-tests: {"axpby": "fused kernel (verified against the twin)"}
========= Invalid __global__ write of size 4 bytes
=========     at axpby+0x1b0 in /tmp/x.cu:12
=========     by thread (0,0,0) in block (0,0,0)
========= ERROR SUMMARY: 1 error
"""

PYTEST_LOG = """\
FAILED tests/gpu/test_gpu_esrrf.py::test_a - AssertionError
ERROR tests/gpu/test_gpu_kernels.py::test_b[esrrf_rgc] - Failed: fused kernels
2 failed, 5 passed, 1 error in 3.20s
"""


def test_report_reads_every_step_and_survives_missing_pieces(tmp_path):
    assert "Not run" not in gpu_kit.report(tmp_path)  # an empty folder: a report all the same
    plan = gpu_kit.build_plan(["twin-esrrf", "memcheck-tv", "ncu-tv", "bench-tv", "batch"])
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "twin-esrrf.log").write_text(PYTEST_LOG)
    (tmp_path / "steps" / "memcheck-tv.log").write_text(SANITIZER_LOG)
    (tmp_path / "steps" / "ncu-tv.log").write_text(NCU_LOG)
    rows = [
        "name\tkind\tmethod\tstatus\trc\tseconds\tlimit_s",
        "twin-esrrf\ttwin\tesrrf\tfailed\t1\t12\t45",
        "memcheck-tv\tmemcheck\ttv\tfailed\t9\t20\t25",
        "ncu-tv\tncu\ttv\tpassed\t0\t25\t30",
    ]
    (tmp_path / "status.tsv").write_text("\n".join(rows) + "\n")
    bench = {"seconds": 3.0, "result": {"copy_gbps": 2984.0, "kernels": [{"op": "x", "ms": 1}]}}
    (tmp_path / "bench-tv.json").write_text(json.dumps(bench))
    (tmp_path / "records-twin-esrrf.json").write_text(json.dumps({"cupy_status": "ok"}))
    text = gpu_kit.report(tmp_path)
    assert "| twin-esrrf | twin | failed | 1 | 12 / 45 |" in text
    assert "2 failed, 5 passed, 1 error" in text
    assert "FAILED tests/gpu/test_gpu_esrrf.py::test_a" in text
    assert "ERROR SUMMARY: 1 error" in text and '"axpby": 1' in text
    assert "| ncu-tv | fgp_step_3d_u32 | 262140x1x1 | 256x1x1 | 1.77 ms | 80.71 |" in text
    assert "ops not profiled: ['axpby', 'fgp_primal', 'tv_gap_partials']" in text
    assert "Bench: tv (3.0 s)" in text and "| copy_gbps | 2984 |" in text
    assert "| cupy_status | ok |" in text
    assert "Not run: batch, bench-tv." in text  # batch runs before TV
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["sanitizers"]["memcheck-tv"]["our_kernels_reported"] == ["axpby"]
