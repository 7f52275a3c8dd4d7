"""Every registered fused op on a real GPU (compiled, self-tested, reported), TV's kernels against
their twins in detail, and the self-test's guarantees.

The generic tests are parametrized by :func:`~napari_gpuscope.compute.kernels.registered_ops`
(op names) and :func:`~napari_gpuscope.compute.kernels.kernel_files` (file names): the GPU kit's
plan (``benchmarks/gpu_kit.py plan``) runs each method's cases in that method's ``twin`` step.
That no registered op ends up disabled or unavailable during any GPU test is checked by the
autouse fixture of ``tests/gpu/conftest.py``.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from napari_gpuscope.compute.devices import cupy_status
from napari_gpuscope.compute.kernels import (
    CupyBackend,
    FusedOp,
    KernelSource,
    kernel_files,
    path_report,
    registered_ops,
)
from napari_gpuscope.compute.kernels import axpby as axpby_module
from napari_gpuscope.compute.tv import _ops as ops

pytestmark = pytest.mark.gpu

TV_OPS = (ops.fgp_primal, ops.fgp_step, ops.tv_gap_partials)
SRC = Path(__file__).resolve().parents[2] / "src"

# (batch, coupled shape, spacing): 1-4 coupled axes, odd sizes, size-1 axes, batches.
CASES = [
    (3, (1001,), (0.7,)),
    (2, (37, 53), (1.0, 0.3)),
    (1, (1, 129), (1.0, 1.0)),
    (2, (7, 13, 17), (0.2, 1.0, 1.0)),
    (1, (5, 1, 33), (1.0, 2.0, 0.5)),
    (2, (3, 5, 7, 9), (0.5, 0.25, 1.0, 2.0)),
    (1, (2, 1, 3, 1), (1.0, 1.0, 1.0, 1.0)),
]


def _case_id(case) -> str:
    batch, shape, _ = case
    return f"b{batch}-" + "x".join(map(str, shape))


def _inputs(batch, shape, spacing, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    d = len(spacing)
    f = torch.randn((batch, *shape), generator=gen).to(device)
    z = (0.4 * torch.randn((d, batch, *shape), generator=gen)).to(device)
    y = (0.4 * torch.randn((d, batch, *shape), generator=gen)).to(device)
    return f, z, y


def compare_all(f, z, y, spacing, *, lo=-math.inf, hi=math.inf, rtol=1e-5, atol=1e-5):
    """Run each kernel (through bind: the real dispatch) and its twin; return the worst diffs."""
    worst = {}
    kwargs = {"spacing": list(spacing), "lo": lo, "hi": hi}
    u_twin, u_kernel = torch.empty_like(f), torch.full_like(f, math.nan)
    ops._twin_primal(f, z, u_twin, **kwargs)
    bound = ops.fgp_primal.bind(f, z, u_kernel)
    assert bound.path.path == "kernel", bound.path
    bound(f, z, u_kernel, **kwargs)
    torch.testing.assert_close(u_kernel, u_twin, rtol=rtol, atol=atol)
    worst["fgp_primal"] = float((u_kernel - u_twin).abs().max())

    step = {**kwargs, "inv_l2": 1 / (4 * sum(s * s for s in spacing)), "weight": 0.3}
    step["momentum"] = 0.45
    y_twin, zn_twin = y.clone(), torch.full_like(z, math.nan)
    ops._twin_step(f, z, y_twin, zn_twin, **step)
    y_kernel, zn_kernel = y.clone(), torch.full_like(z, math.nan)
    bound = ops.fgp_step.bind(f, z, y_kernel, zn_kernel)
    assert bound.path.path == "kernel", bound.path
    bound(f, z, y_kernel, zn_kernel, **step)
    torch.testing.assert_close(y_kernel, y_twin, rtol=rtol, atol=atol)
    torch.testing.assert_close(zn_kernel, zn_twin, rtol=rtol, atol=atol)
    worst["fgp_step"] = float(
        max((y_kernel - y_twin).abs().max(), (zn_kernel - zn_twin).abs().max())
    )

    batch, per_problem = f.shape[0], f[0].numel()
    threads = ops.gap_threads(batch, per_problem)
    parts_twin = [torch.full((batch, threads), math.nan, device=f.device) for _ in range(2)]
    parts_kernel = [torch.full((batch, threads), math.nan, device=f.device) for _ in range(2)]
    ops._twin_gap_partials(f, y_kernel, u_twin, *parts_twin, spacing=list(spacing), weight=0.3)
    bound = ops.tv_gap_partials.bind(f, y_kernel, u_twin, *parts_kernel)
    assert bound.path.path == "kernel", bound.path
    bound(f, y_kernel, u_twin, *parts_kernel, spacing=list(spacing), weight=0.3)
    for got, want in zip(parts_kernel, parts_twin, strict=True):
        # Partial sums of up to a few hundred terms, summed in a different order.
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        totals = got.double().sum(1), want.double().sum(1)
        torch.testing.assert_close(totals[0], totals[1], rtol=1e-5, atol=1e-6)
    worst["tv_gap_partials"] = float(
        max((g - w).abs().max() for g, w in zip(parts_kernel, parts_twin, strict=True))
    )
    torch.cuda.synchronize()
    return worst


def test_cupy_runs_on_the_gpu(gpu, kit_record):
    usable, detail = cupy_status(gpu)
    kit_record("cupy_status", detail)
    assert usable, detail


@pytest.mark.parametrize("op", registered_ops(), ids=lambda op: op.name)
def test_registered_op_runs_its_verified_kernel(gpu, op, kit_record):
    """Each op compiles and passes its first-use self-test on this GPU, a fresh self-test on
    its own backend agrees, and the provenance report names the fused kernel."""
    assert op.prepare(gpu), op.path(gpu).describe()
    path = op.path(gpu)
    assert (path.path, path.reason) == ("kernel", "verified against the twin"), path
    ok, detail = op.self_test(CupyBackend(gpu), gpu)
    kit_record(f"self_test {op.name}", detail)
    assert ok, detail
    assert path_report(gpu)[op.name][str(gpu)] == "fused kernel (verified against the twin)"


@pytest.mark.parametrize("path", kernel_files(), ids=lambda path: path.name)
def test_kernel_source_compiles_for_this_gpu(gpu, path):
    """NVRTC compiles every kernel of every .cu file for this GPU: each entry point loads,
    including variants no test launches (e.g. 64-bit index kernels of small shapes)."""
    backend = CupyBackend(gpu)
    source = KernelSource(path)
    assert source.kernel_names, path
    for name in source.kernel_names:
        assert backend.function(source, name) is not None


@pytest.mark.parametrize("stream_kind", ["default", "side"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize(("lo", "hi"), [(-math.inf, math.inf), (0.0, 0.6)], ids=["free", "box"])
def test_kernels_match_twins(gpu, case, stream_kind, lo, hi):
    batch, shape, spacing = case
    f, z, y = _inputs(batch, shape, spacing, gpu, seed=len(shape))
    stream = torch.cuda.Stream(gpu) if stream_kind == "side" else None
    context = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream(gpu))
    with context:
        compare_all(f, z, y, spacing, lo=lo, hi=hi)


@pytest.mark.parametrize("case", CASES[::2], ids=_case_id)
def test_64_bit_index_kernels_match_twins(gpu, case, monkeypatch):
    monkeypatch.setattr(ops, "NARROW_INDEX_LIMIT", 0)
    batch, shape, spacing = case
    f, z, y = _inputs(batch, shape, spacing, gpu, seed=3)
    assert ops._launch_geometry(f, spacing)[0].endswith("i64")
    compare_all(f, z, y, spacing, lo=-0.2, hi=0.9)


def test_large_volume_64x1024x1024(gpu, kit_record):
    f, z, y = _inputs(1, (64, 1024, 1024), (1.0, 1.0, 1.0), gpu, seed=1)
    worst = compare_all(f, z, y, (1.0, 1.0, 1.0), lo=0.0, hi=math.inf)
    kit_record("kernel_vs_twin_max_abs_diff_64x1024x1024", worst)


def test_kernels_agree_with_twins_on_nan(gpu):
    f, z, _y = _inputs(2, (9, 11), (1.0, 0.5), gpu, seed=7)
    f[1, 4, 5] = math.nan
    for lo, hi in [(0.0, 1.0), (-math.inf, math.inf)]:
        u_twin, u_kernel = torch.empty_like(f), torch.empty_like(f)
        ops._twin_primal(f, z, u_twin, spacing=[1.0, 0.5], lo=lo, hi=hi)
        ops.fgp_primal.bind(f, z, u_kernel)(f, z, u_kernel, spacing=[1.0, 0.5], lo=lo, hi=hi)
        assert torch.equal(u_kernel.isnan(), u_twin.isnan())
        assert bool(u_kernel[1, 4, 5].isnan())


def test_deterministic_reruns_are_byte_identical(gpu):
    f, z, y = _inputs(2, (33, 65, 129), (0.5, 1.0, 1.0), gpu, seed=2)
    runs = []
    for _ in range(2):
        y_run, zn = y.clone(), torch.empty_like(z)
        ops.fgp_step(f, z, y_run, zn, spacing=[0.5, 1.0, 1.0], inv_l2=0.1, weight=0.2, momentum=0.5)
        parts = [torch.empty((2, ops.gap_threads(2, f[0].numel())), device=gpu) for _ in range(2)]
        ops.tv_gap_partials(f, y_run, f, *parts, spacing=[0.5, 1.0, 1.0], weight=0.2)
        runs.append([t.cpu().numpy().tobytes() for t in (y_run, zn, *parts)])
    assert runs[0] == runs[1]


def test_self_test_catches_a_kernel_on_the_wrong_stream(gpu):
    """A launcher that ignores torch's current stream must fail the first-use self-test."""
    other = torch.cuda.Stream(gpu)
    with torch.cuda.stream(other):
        wrong = CupyBackend(gpu).on_current_stream()

    def launch_on_other_stream(backend, *args, **kwargs):
        axpby_module._launch(wrong, *args, **kwargs)

    op = FusedOp(
        "axpby-wrong-stream",
        launch=launch_on_other_stream,
        twin=axpby_module.axpby_twin,
        example=axpby_module._example,
        outputs=(2,),
    )
    with pytest.warns(RuntimeWarning, match="disabled on cuda:0"):
        assert not op.prepare(gpu)
    assert op.disabled_devices == {"cuda:0"}
    # The same kernel launched on the right stream passes.
    right = FusedOp(
        "axpby-right-stream",
        launch=axpby_module._launch,
        twin=axpby_module.axpby_twin,
        example=axpby_module._example,
        outputs=(2,),
    )
    assert right.prepare(gpu)


FAULT_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    from pathlib import Path
    from napari_gpuscope.compute.kernels import FusedOp, KernelSource, CudaFaultError
    from napari_gpuscope.compute.kernels import axpby as m
    import numpy as np
    path = Path(sys.argv[1])
    path.write_text('extern "C" __global__ void axpby(const float* x, const float* y, float* out,'
                    ' const float a, const float b, const long long n) {'
                    ' out[(long long)threadIdx.x << 40] = a; }')
    source = KernelSource(path)
    def launch(backend, x, y, out, a, b):
        n = out.numel()
        backend.launch(backend.function(source, "axpby"), n, (backend.array(x),
                       backend.array(y), backend.array(out), np.float32(a), np.float32(b),
                       np.int64(n)))
    op = FusedOp("faulty", launch=launch, twin=m.axpby_twin, example=m._example, outputs=(2,))
    x = torch.ones(1000, device="cuda")
    try:
        op(x, x, torch.empty_like(x), 1.0, 1.0)
    except CudaFaultError as exc:
        print("FAULT-REPORTED:", exc)
        try:
            m.axpby(x, x, torch.empty_like(x), 1.0, 1.0)
        except CudaFaultError:
            print("LATER-CALLS-FAIL")
        sys.exit(3)
    print("NO-FAULT-REPORTED", op.calls)
    """
)


def test_an_illegal_address_fails_the_job_with_a_clear_message(tmp_path, kit_record):
    """Run in a child process: the fault breaks that process's CUDA context for good."""
    # Keep the parent's path after src: the GPU kit puts its pydantic there (H200 run, 2026-11-29:
    # the child, given src alone, failed importing pydantic before reaching the kernel).
    inherited = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), inherited]))}
    result = subprocess.run(
        [sys.executable, "-c", FAULT_SCRIPT, str(tmp_path / "faulty.cu")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    kit_record("illegal_address_child_output", output[-2000:])
    assert result.returncode == 3, output
    assert "FAULT-REPORTED" in output and "CUDA context unusable" in output
    assert "LATER-CALLS-FAIL" in output


def test_path_report_names_the_kernels(gpu):
    f, z, y = _inputs(1, (16, 16), (1.0, 1.0), gpu)
    compare_all(f, z, y, (1.0, 1.0))
    report = path_report(gpu)
    for op in TV_OPS:
        assert report[op.name]["cuda:0"] == "fused kernel (verified against the twin)"
