"""Device resolution: GPUs only by default, the CPU only when named, actionable errors."""

import contextlib
import importlib.machinery
import sys
import types

import pytest
import torch

from napari_gpuscope.compute import devices


@pytest.fixture(autouse=True)
def _fresh_probes():
    devices.forget_gpus()
    yield
    devices.forget_gpus()


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def three_gpus(monkeypatch):
    """torch sees three GPUs; probing one records it and succeeds except for cuda:0."""
    probed = []

    def probe(index):
        probed.append(index)
        return None if index == 0 else devices.GPUInfo(index, f"GPU{index}", 8, 4, (9, 0))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(devices, "_probe", probe)
    return probed


def test_no_gpu_means_error_not_fallback(no_gpu):
    assert devices.list_gpus() == []
    with pytest.raises(devices.NoGPUError) as info:
        devices.resolve_device(None)
    message = str(info.value)
    assert "NVIDIA GPU" in message and "CUDA" in message
    assert "napari-gpuscope[cuda1" in message  # which cupy extra to install


def test_named_gpu_without_gpu_raises(no_gpu):
    with pytest.raises(devices.NoGPUError):
        devices.resolve_device("cuda:0")


def test_cpu_only_when_named():
    assert devices.resolve_device("cpu") == torch.device("cpu")
    assert devices.resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "mps", ""])
def test_bad_device_strings_are_rejected(bad):
    with pytest.raises(ValueError, match="cuda:N"):
        devices.resolve_device(bad)


def test_gpu_label_format():
    info = devices.GPUInfo(0, "NVIDIA RTX 4090", 24 * 1024**3, int(21.3 * 1024**3), (8, 9))
    assert info.label == "cuda:0 - NVIDIA RTX 4090 - 21.3 / 24.0 GB free"
    assert info.device == "cuda:0"


def test_probe_failure_hides_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(
        devices, "_probe", lambda i: None if i == 0 else devices.GPUInfo(i, "X", 1, 1, (8, 0))
    )
    assert [g.device for g in devices.list_gpus()] == ["cuda:1"]
    with pytest.raises(devices.NoGPUError, match="cuda:1"):
        devices.resolve_device("cuda:0")


def test_device_context_on_cpu_yields_the_device():
    with devices.device_context("cpu") as dev:
        assert dev.type == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not devices.list_gpus(), reason="needs a CUDA GPU")
def test_device_context_sets_current_cuda_device():
    gpu = devices.list_gpus()[-1]
    with devices.device_context(gpu.device):
        assert torch.cuda.current_device() == gpu.index


def test_only_the_requested_gpu_is_probed_and_only_once(three_gpus):
    assert devices.resolve_device("cuda:2") == torch.device("cuda:2")
    assert devices.resolve_device(2) == torch.device("cuda:2")  # an ordinal is accepted
    assert three_gpus == [2]  # no context on the GPUs nobody chose, no second probe
    assert devices.resolve_device(None) == torch.device("cuda:1")  # the first usable one
    assert three_gpus == [2, 0, 1]
    assert [g.device for g in devices.list_gpus()] == ["cuda:1", "cuda:2"]
    assert three_gpus == [2, 0, 1, 0]  # a failed probe is retried when asked again
    devices.forget_gpus()  # the docks' Refresh button
    devices.list_gpus()
    assert three_gpus == [2, 0, 1, 0, 0, 1, 2]


def test_an_unusable_or_missing_gpu_names_the_usable_ones(three_gpus):
    with pytest.raises(devices.NoGPUError, match="usable GPUs: cuda:1, cuda:2"):
        devices.resolve_device("cuda:0")
    with pytest.raises(devices.NoGPUError, match="'cuda:7' is not a usable GPU"):
        devices.resolve_device("cuda:7")


@pytest.mark.parametrize("bad", [-1, True, 1.5, [0]])
def test_bad_device_values_say_what_is_valid(bad):
    with pytest.raises(ValueError, match=r"'cuda', 'cuda:N', a GPU ordinal N >= 0"):
        devices.resolve_device(bad)


def test_an_ordinal_without_a_gpu_is_a_no_gpu_error_not_an_attribute_error(no_gpu):
    with pytest.raises(devices.NoGPUError, match="NVIDIA GPU"):
        devices.resolve_device(0)


def _fake_cupy(error: Exception) -> types.ModuleType:
    """A CuPy that imports but whose CUDA runtime cannot start (e.g. a CUDA 13 build on a
    CUDA 12 driver)."""

    class Device:
        def __init__(self, index):
            raise error

    module = types.ModuleType("cupy")
    module.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    module.__version__ = "14.0.0"
    module.cuda = types.SimpleNamespace(Device=Device)
    return module


def test_a_cupy_whose_runtime_cannot_start_only_turns_the_kernels_off(monkeypatch):
    error = RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(error))
    usable, detail = devices.cupy_status(0)
    assert not usable
    assert "cudaErrorInsufficientDriver" in detail and "napari-gpuscope[cuda" in detail
    # device_context still yields the device (torch's side is faked: no GPU here).
    monkeypatch.setattr(devices, "resolve_device", lambda device: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    with devices.device_context("cuda:0") as dev:
        assert dev == torch.device("cuda", 0)
    # The fused ops take their twins and say why.
    from napari_gpuscope.compute.kernels import _dispatch
    from napari_gpuscope.compute.kernels.axpby import axpby

    class FakeCudaTensor:
        device = torch.device("cuda", 0)
        dtype = torch.float32

        def is_contiguous(self):
            return True

    monkeypatch.setattr(_dispatch, "_warned", set())
    with pytest.warns(_dispatch.FusedKernelWarning, match="cudaErrorInsufficientDriver"):
        bound = axpby.bind(FakeCudaTensor())
    assert bound.path.path == "twin" and "cudaErrorInsufficientDriver" in bound.path.reason
    axpby.reset()
