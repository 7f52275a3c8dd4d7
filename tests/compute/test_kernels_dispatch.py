"""FusedOp dispatch: kill switch, host emulation, twin fallback and the first-use self-test."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    KILL_SWITCH_ENV,
    Backend,
    CudaFaultError,
    FusedKernelWarning,
    FusedOp,
    HostBackend,
    KernelSource,
    _dispatch,
    _selftest,
    host_emulation_available,
    kill_switch_active,
    path_report,
    warm_up,
)
from napari_gpuscope.compute.kernels import axpby as axpby_module
from napari_gpuscope.compute.kernels.axpby import axpby

needs_gxx = pytest.mark.skipif(not host_emulation_available(), reason="g++ not on PATH")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(KILL_SWITCH_ENV, raising=False)
    monkeypatch.delenv(HOST_KERNELS_ENV, raising=False)
    axpby.reset()
    yield
    axpby.reset()


def _inputs(n: int = 777) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(n)
    return torch.randn(n, generator=generator), torch.randn(n, generator=generator), torch.empty(n)


def _expected(x: torch.Tensor, y: torch.Tensor, a: float, b: float) -> np.ndarray:
    return np.float32(a) * x.numpy() + np.float32(b) * y.numpy()


def _op_with_source(source: KernelSource, **overrides) -> FusedOp:
    """An axpby op whose launcher uses another kernel file (same kernel name and signature)."""

    def launch(backend: Backend, x, y, out, a, b) -> None:
        n = out.numel()
        args = [backend.array(x), backend.array(y), backend.array(out)]
        backend.launch(
            backend.function(source, "axpby"),
            n,
            [*args, np.float32(a), np.float32(b), np.int64(n)],
        )

    settings = {
        "name": "axpby-variant",
        "launch": launch,
        "twin": axpby_module.axpby_twin,
        "example": axpby_module._example,
        "outputs": (2,),
    }
    settings.update(overrides)
    return FusedOp(**settings)


def _write_kernel(tmp_path: Path, expression: str) -> KernelSource:
    path = tmp_path / "variant.cu"
    path.write_text(
        'extern "C" __global__ void axpby(const float* x, const float* y, float* out,\n'
        "                                 const float a, const float b, const long long n) {\n"
        "    const long long stride = (long long)blockDim.x * gridDim.x;\n"
        "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
        f"         i += stride) out[i] = {expression};\n"
        "}\n"
    )
    return KernelSource(path)


@pytest.mark.parametrize(
    ("value", "active"), [("", False), ("0", False), ("1", True), ("yes", True)]
)
def test_kill_switch_values(monkeypatch: pytest.MonkeyPatch, value: str, active: bool) -> None:
    monkeypatch.setenv(KILL_SWITCH_ENV, value)
    assert kill_switch_active() is active


def test_cpu_tensors_use_the_twin_by_default() -> None:
    x, y, out = _inputs()
    axpby(x, y, out, 2.0, -1.0)
    assert axpby.calls == {"twin": 1}
    np.testing.assert_allclose(out.numpy(), _expected(x, y, 2.0, -1.0), rtol=1e-6)


@needs_gxx
def test_host_emulation_runs_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    x, y, out = _inputs()
    axpby(x, y, out, 2.0, -1.0)
    axpby(x, y, out, 2.0, -1.0)
    assert axpby.calls == {"host": 2}
    assert not axpby.disabled_devices
    twin_out = torch.empty_like(out)
    axpby_module.axpby_twin(x, y, twin_out, 2.0, -1.0)
    torch.testing.assert_close(out, twin_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), _expected(x, y, 2.0, -1.0), rtol=1e-6)


@needs_gxx
def test_kill_switch_beats_host_emulation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    monkeypatch.setenv(KILL_SWITCH_ENV, "1")
    x, y, out = _inputs()
    axpby(x, y, out, 2.0, -1.0)
    assert axpby.calls == {"twin": 1}


@needs_gxx
@pytest.mark.parametrize("case", ["float64", "non-contiguous", "no-tensors"])
def test_ineligible_tensors_use_the_twin(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    x, y, out = _inputs(64)
    if case == "float64":
        x, y, out = x.double(), y.double(), out.double()
    elif case == "non-contiguous":
        x, y, out = (t.reshape(8, 8).T for t in (x, y, out))
    if case == "no-tensors":
        assert axpby.select_device(1.0, 2.0) is None
        return
    axpby(x, y, out, 0.5, 0.5)
    assert axpby.calls == {"twin": 1}
    expected = 0.5 * x.numpy() + 0.5 * y.numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


@needs_gxx
def test_wrong_kernel_is_disabled_once_and_twin_keeps_results_right(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    op = _op_with_source(_write_kernel(tmp_path, "a * x[i] - b * y[i]"))  # sign error
    x, y, out = _inputs()
    with pytest.warns(FusedKernelWarning) as record:
        for _ in range(3):
            op(x, y, out, 2.0, -1.0)
    messages = [str(w.message) for w in record if issubclass(w.category, FusedKernelWarning)]
    assert len(messages) == 1
    assert "disabled on cpu: max abs diff" in messages[0]
    assert "using the torch twin" in messages[0]
    assert op.disabled_devices == {"cpu"}
    assert op.calls == {"twin": 3}
    np.testing.assert_allclose(out.numpy(), _expected(x, y, 2.0, -1.0), rtol=1e-6)


@needs_gxx
def test_compile_error_makes_the_kernel_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    op = _op_with_source(_write_kernel(tmp_path, "a * x[i] + b * y[i] +"))  # syntax error
    x, y, out = _inputs()
    with pytest.warns(FusedKernelWarning, match="unavailable on cpu: the kernel does not compile"):
        op(x, y, out, 2.0, -1.0)
    assert op.calls == {"twin": 1}
    assert "does not compile" in op.unavailable["cpu"]
    assert not op.disabled_devices  # disabled means a numerical mismatch, which this is not
    assert "torch twin (the kernel does not compile" in path_report("cpu")[op.name]["cpu"]
    np.testing.assert_allclose(out.numpy(), _expected(x, y, 2.0, -1.0), rtol=1e-6)


@needs_gxx
def test_broken_twin_disables_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")

    def off_by_one_twin(x, y, out, a, b) -> None:
        axpby_module.axpby_twin(x, y, out, a, b)
        out += 1.0

    op = _op_with_source(axpby_module.SOURCE, twin=off_by_one_twin)
    with pytest.warns(FusedKernelWarning, match=r"max abs diff 1 vs twin"):
        op(*_inputs(), 1.0, 1.0)
    assert op.disabled_devices == {"cpu"}
    assert op.calls == {"twin": 1}


def test_backend_factory_is_replaceable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "napari_gpuscope.compute.kernels._dispatch.host_emulation_available", lambda: True
    )
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    built: list[torch.device] = []

    def no_backend(device: torch.device) -> Backend:
        built.append(device)
        raise RuntimeError("no backend here")

    op = _op_with_source(axpby_module.SOURCE, backend_factory=no_backend)
    x, y, out = _inputs()
    with pytest.warns(FusedKernelWarning, match=r"no kernel backend \(RuntimeError: no backend"):
        op(x, y, out, 1.0, 2.0)
    op(x, y, out, 1.0, 2.0)
    assert built == [torch.device("cpu")]  # tried once, then remembered as disabled
    assert op.calls == {"twin": 2}
    np.testing.assert_allclose(out.numpy(), _expected(x, y, 1.0, 2.0), rtol=1e-6)


@needs_gxx
def test_self_test_passes_for_the_shipped_kernel() -> None:
    ok, detail = axpby.self_test(HostBackend(), torch.device("cpu"))
    assert ok, detail
    assert detail.startswith("max abs diff")


def _example_holding_the_answer(device, generator):
    """axpby's example, with ``out`` already holding the right answer: what an uninitialised
    tensor can contain when the allocator hands back the block of an earlier self-test."""
    (x, y, out, a, b), kwargs = axpby_module._example(device, generator)
    axpby_module.axpby_twin(x, y, out, a, b)
    return (x, y, out, a, b), kwargs


def test_self_test_fails_a_kernel_that_never_writes_its_output() -> None:
    """A launch that writes nothing (e.g. on another stream, before the inputs exist) must not
    pass because the output memory happened to hold the answer already."""
    lazy = FusedOp(
        "axpby-writes-nothing",
        launch=lambda backend, *args: None,
        twin=axpby_module.axpby_twin,
        example=_example_holding_the_answer,
        outputs=(2,),
    )
    ok, detail = lazy.self_test(HostBackend(), torch.device("cpu"))
    assert not ok
    assert "NaN" in detail


def test_self_test_keeps_in_out_arguments() -> None:
    """An output the twin also reads (updated in place) keeps its example values."""

    def accumulate_twin(x, acc):
        acc.add_(x)

    op = FusedOp(
        "accumulate",
        launch=lambda backend, x, acc: accumulate_twin(x, acc),
        twin=accumulate_twin,
        example=lambda device, gen: ((torch.rand(5, generator=gen), torch.ones(5)), {}),
        outputs=(1,),
    )
    cpu, generator = torch.device("cpu"), torch.Generator()
    args, _ = _selftest._poison_pure_outputs(op, *op.example(cpu, generator))
    assert not bool(args[1].isnan().any())
    args, _ = _selftest._poison_pure_outputs(axpby, *axpby.example(cpu, generator))
    assert isinstance(args[2], torch.Tensor) and args[2].isnan().all()


@dataclass
class _Pair:
    x: torch.Tensor
    acc: torch.Tensor
    out: torch.Tensor


def test_outputs_may_be_fields_of_a_state_object() -> None:
    """An op that takes one state dataclass (the flat-field ALM's): the dispatch decides on
    its tensors, the self-test poisons the pure output field only (a copy of the state, the
    example's own is left alone) and compares the output fields."""

    def twin(state: _Pair) -> None:
        state.acc.add_(state.x)
        state.out.copy_(2 * state.x)

    def example(device, gen):
        x = torch.rand(5, generator=gen).to(device)
        return (_Pair(x, torch.ones(5, device=device), torch.zeros(5, device=device)),), {}

    op = FusedOp("pair", launch=lambda backend, s: twin(s), twin=twin, example=example,
                 outputs=((0, "acc"), (0, "out")))
    cpu, generator = torch.device("cpu"), torch.Generator()
    original = example(cpu, generator)[0]
    (state,), _ = _selftest._poison_pure_outputs(op, original, {})
    assert state.out.isnan().all() and not state.acc.isnan().any()
    assert not original[0].out.isnan().any()
    assert op.self_test(HostBackend(), cpu) == (True, "max abs diff 0 vs twin")
    assert op.select_device(state) is None  # CPU: the twin (no host kernels asked for)
    acc, out = op.outputs_of((state,), {})
    assert acc is state.acc and out is state.out


class _FailingBackend(HostBackend):
    """A host backend whose launches raise ``error`` the first ``times`` times."""

    def __init__(self, error: Exception, times: int = 1) -> None:
        super().__init__()
        self.error = error
        self.times = times

    def launch(self, function, n_threads, args) -> None:
        if self.times > 0:
            self.times -= 1
            raise self.error
        super().launch(function, n_threads, args)


@pytest.fixture
def host_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dispatch, "host_emulation_available", lambda: True)
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")


@needs_gxx
@pytest.mark.parametrize(
    "error",
    [torch.OutOfMemoryError("CUDA out of memory (simulated)"), ValueError("a bug in a launcher")],
    ids=["out-of-memory", "other-error"],
)
def test_first_use_errors_propagate_and_are_not_remembered(host_kernels, error) -> None:
    backend = _FailingBackend(error)
    op = _op_with_source(axpby_module.SOURCE, backend_factory=lambda device: backend)
    x, y, out = _inputs()
    with pytest.raises(type(error)):
        op(x, y, out, 1.0, 2.0)
    assert not op.disabled_devices and not op.unavailable
    op(x, y, out, 1.0, 2.0)  # the next call runs the self-test again, and it passes
    assert op.calls == {"host": 1}
    assert path_report("cpu")[op.name]["cpu"] == "host-emulated kernel (verified against the twin)"
    np.testing.assert_allclose(out.numpy(), _expected(x, y, 1.0, 2.0), rtol=1e-6)


@needs_gxx
def test_a_fault_that_breaks_the_context_fails_every_later_call(
    host_kernels, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_dispatch, "_context_is_broken", lambda device: True)
    monkeypatch.setattr(_dispatch, "_broken_devices", {})
    fault = RuntimeError("CUDA error: an illegal memory access was encountered")
    op = _op_with_source(axpby_module.SOURCE, backend_factory=lambda d: _FailingBackend(fault))
    x, y, out = _inputs()
    with pytest.raises(CudaFaultError, match="left the GPU's CUDA context unusable") as info:
        op(x, y, out, 1.0, 2.0)
    assert "illegal memory access" in str(info.value) and "Restart" in str(info.value)
    # Neither this op nor any other silently falls back to its twin on that device.
    with pytest.raises(CudaFaultError):
        op(x, y, out, 1.0, 2.0)
    other = _op_with_source(axpby_module.SOURCE, name="another-op")
    try:
        with pytest.raises(CudaFaultError):
            other(x, y, out, 1.0, 2.0)
        assert op.calls == {} and other.calls == {}
    finally:  # throw-away ops must not reach later warm-ups (the traceback keeps them alive)
        _dispatch._REGISTERED.discard(op)
        _dispatch._REGISTERED.discard(other)


class _FakeCudaTensor:
    """Just enough of a CUDA tensor for the path decision, on a machine without CUDA."""

    device = torch.device("cuda", 0)
    dtype = torch.float32

    def is_contiguous(self) -> bool:
        return True


def test_cuda_tensors_without_usable_cupy_warn_once_and_say_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = "CuPy is not installed (pip install 'napari-gpuscope[cuda13]')"
    monkeypatch.setattr(_dispatch, "cupy_status", lambda device: (False, reason))
    monkeypatch.setattr(_dispatch, "_warned", set())
    with pytest.warns(FusedKernelWarning, match=r"fused CUDA kernels are off.*not installed"):
        bound = axpby.bind(_FakeCudaTensor(), _FakeCudaTensor())
    assert bound.path.path == "twin" and bound.path.reason == reason
    assert axpby.last_paths["cuda:0"].describe() == f"torch twin ({reason})"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process, not once per call
        axpby.bind(_FakeCudaTensor())


def test_bound_op_skips_the_dispatch_and_counts_calls() -> None:
    x, y, out = _inputs()
    bound = axpby.bind(x, y, out)
    assert bound.path.path == "twin" and bound.path.reason == "CPU reference path"
    for _ in range(3):
        bound(x, y, out, 2.0, -1.0)
    assert axpby.calls == {"twin": 3}
    np.testing.assert_allclose(out.numpy(), _expected(x, y, 2.0, -1.0), rtol=1e-6)


@needs_gxx
def test_warm_up_prepares_every_registered_op(monkeypatch: pytest.MonkeyPatch) -> None:
    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.compute.tv import _ops as tv_ops

    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    for op in (tv_ops.fgp_step, tv_ops.fgp_primal, tv_ops.tv_gap_partials):
        op.reset()
    ready = run_job(warm_up("cpu"))
    shipped = ("axpby", "fgp_step", "fgp_primal", "tv_gap_partials")
    assert all(ready[name] for name in shipped), ready
    assert tv_ops.fgp_step.last_paths["cpu"].path == "host"


def test_clones_and_poisoned_copies_keep_named_tuples() -> None:
    """The self-test copies an op's arguments: a named tuple (of tensors or scalars) comes back
    as the same type with its fields in place, tensors cloned or poisoned."""
    from typing import NamedTuple

    from napari_gpuscope.compute.kernels._structure import clone, poisoned_like

    class Pair(NamedTuple):
        values: torch.Tensor
        scale: float

    pair = Pair(torch.ones(3), 2.0)
    copied = clone([pair, (pair.values,)])
    assert type(copied[0]) is Pair and copied[0].scale == 2.0
    assert torch.equal(copied[0].values, pair.values)
    assert copied[0].values.data_ptr() != pair.values.data_ptr()
    assert isinstance(copied[1], tuple) and torch.equal(copied[1][0], pair.values)
    assert torch.isnan(poisoned_like(pair).values).all()
