"""Device resolution: GPUs only by default, the CPU only when named, actionable errors."""

import pytest
import torch

from napari_gpuscope.compute import devices


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_no_gpu_means_error_not_fallback(no_gpu):
    assert devices.list_gpus() == []
    with pytest.raises(devices.NoGPUError) as info:
        devices.resolve_device(None)
    message = str(info.value)
    assert "NVIDIA GPU" in message and "CUDA" in message
    assert "cuda12" in message  # which cupy extra to install


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
