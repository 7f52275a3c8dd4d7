"""Which compute device a job runs on.

The plugin is a GPU tool: there is no silent CPU fallback. :func:`resolve_device` returns the
first CUDA GPU when no device is named and raises :class:`NoGPUError` when there is none. The
CPU is used only when ``"cpu"`` is named explicitly (tests, reference runs).

CUDA's *current device* is a per-thread setting, so workers enter :func:`device_context`
inside their own thread rather than relying on a call made in the GUI thread.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch

__all__ = [
    "GPUInfo",
    "NoGPUError",
    "cupy_available",
    "device_context",
    "device_label",
    "list_gpus",
    "resolve_device",
]

_GB = 1024**3


class NoGPUError(RuntimeError):
    """No usable CUDA GPU was found (or the named one does not exist)."""


@dataclass(frozen=True)
class GPUInfo:
    """A CUDA GPU that passed a probe allocation.

    Attributes
    ----------
    index : int
        CUDA ordinal (as seen through ``CUDA_VISIBLE_DEVICES``).
    name : str
        Marketing name, e.g. ``"NVIDIA RTX 4090"``.
    total_bytes, free_bytes : int
        Device memory, as reported by the driver at probe time.
    compute_capability : tuple of int
        ``(major, minor)``.
    """

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    compute_capability: tuple[int, int]

    @property
    def device(self) -> str:
        """The torch device string, e.g. ``"cuda:0"``."""
        return f"cuda:{self.index}"

    @property
    def label(self) -> str:
        """Human-readable label, e.g. ``"cuda:0 - NVIDIA RTX 4090 - 21.3 / 24.0 GB free"``."""
        return (
            f"{self.device} - {self.name} - "
            f"{self.free_bytes / _GB:.1f} / {self.total_bytes / _GB:.1f} GB free"
        )


def cupy_available() -> bool:
    """Whether CuPy can be imported (it imports without a GPU; kernels still need one)."""
    return importlib.util.find_spec("cupy") is not None


def _probe(index: int) -> GPUInfo | None:
    """Allocate a tiny tensor on a GPU; return its description, or None if it is unusable."""
    try:
        with torch.cuda.device(index):
            probe = torch.ones(16, device=f"cuda:{index}")
            float(probe.sum())  # forces the allocation and a kernel launch
            free, total = torch.cuda.mem_get_info(index)
            props = torch.cuda.get_device_properties(index)
        return GPUInfo(index, props.name, int(total), int(free), (props.major, props.minor))
    except Exception:  # a broken driver or a busy exclusive-mode GPU: not usable
        return None


def list_gpus() -> list[GPUInfo]:
    """List the CUDA GPUs that can actually run work.

    Each GPU is probed with a tiny allocation: ``torch.cuda.is_available()`` alone can be True
    while the driver is unusable.

    Returns
    -------
    list of GPUInfo
        Empty when torch is a CPU build, no driver is installed or no GPU passed the probe.
    """
    if not torch.cuda.is_available():
        return []
    found = (_probe(i) for i in range(torch.cuda.device_count()))
    return [info for info in found if info is not None]


@functools.cache
def _cupy_hint() -> str:
    cuda = torch.version.cuda
    if cuda and cuda.startswith("13"):
        return "pip install 'napari-gpuscope[cuda13]'"
    return "pip install 'napari-gpuscope[cuda12]'  (or [cuda13] for CUDA 13 drivers)"


def no_gpu_message() -> str:
    """Explain, in plain words, why no GPU is usable and how to fix it."""
    build = torch.version.cuda
    if build is None:
        found = f"the installed torch {torch.__version__} is a CPU-only build"
        fix = (
            "install a CUDA build of torch (see https://pytorch.org/get-started/locally/, e.g. "
            "pip install torch --index-url https://download.pytorch.org/whl/cu128)"
        )
    elif not torch.cuda.is_available():
        found = f"torch {torch.__version__} (CUDA {build}) sees no NVIDIA GPU or driver"
        fix = "install or update the NVIDIA driver, and check CUDA_VISIBLE_DEVICES"
    else:
        found = f"torch sees {torch.cuda.device_count()} GPU(s) but none accepted an allocation"
        fix = "check that the GPU is not in exclusive mode or out of memory"
    return (
        "napari-gpuscope needs an NVIDIA GPU with CUDA, and none is usable: "
        f"{found}. To fix it, {fix}. For the fused kernels also install CuPy: {_cupy_hint()}."
    )


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Turn a device request into a :class:`torch.device`, never silently falling back.

    Parameters
    ----------
    device : str or torch.device or None
        ``None`` selects the first usable GPU; ``"cuda"``/``"cuda:N"`` a specific one; ``"cpu"``
        the CPU -- only when asked for by name (tests, reference runs).

    Returns
    -------
    torch.device

    Raises
    ------
    NoGPUError
        No GPU is usable, or the named GPU does not exist.
    ValueError
        ``device`` is not a CUDA or CPU device string.
    """
    if isinstance(device, torch.device):
        device = str(device)
    if device is None:
        gpus = list_gpus()
        if not gpus:
            raise NoGPUError(no_gpu_message())
        return torch.device(gpus[0].device)
    text = device.strip().lower()
    if text == "cpu":
        return torch.device("cpu")
    if text == "cuda":
        text = "cuda:0"
    if not text.startswith("cuda:") or not text[5:].isdigit():
        raise ValueError(f"device must be 'cuda', 'cuda:N' or 'cpu', got {device!r}")
    gpus = list_gpus()
    index = int(text[5:])
    if not gpus:
        raise NoGPUError(no_gpu_message())
    if index not in {g.index for g in gpus}:
        usable = ", ".join(g.device for g in gpus)
        raise NoGPUError(f"{device!r} is not a usable GPU; usable GPUs: {usable}")
    return torch.device(text)


def device_label(device: str | torch.device) -> str:
    """Name of the hardware behind ``device``, for provenance and status lines."""
    dev = torch.device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else 0
        return f"{dev} ({torch.cuda.get_device_name(index)})"
    return f"cpu ({os.cpu_count()} cores, reference path)"


@contextlib.contextmanager
def device_context(device: str | torch.device | None) -> Iterator[torch.device]:
    """Resolve ``device`` and make it current for torch and CuPy in *this* thread.

    Parameters
    ----------
    device : str or torch.device or None
        As for :func:`resolve_device`.

    Yields
    ------
    torch.device
        The resolved device.
    """
    dev = resolve_device(device)
    if dev.type != "cuda":
        yield dev
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.cuda.device(dev))
        if cupy_available():
            import cupy

            stack.enter_context(cupy.cuda.Device(dev.index or 0))
        yield dev
