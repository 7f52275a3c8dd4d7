"""Which compute device a job runs on.

The plugin is a GPU tool: there is no silent CPU fallback. :func:`resolve_device` returns the
first CUDA GPU when no device is named and raises :class:`NoGPUError` when there is none. The
CPU is used only when ``"cpu"`` is named explicitly (tests, reference runs).

GPUs are probed (a tiny allocation and a synchronisation) once per process, and only the ones a
caller asks about: a job on ``cuda:1`` probes ``cuda:1``, not every GPU in the machine.
:func:`list_gpus` probes them all once and caches the list; :func:`forget_gpus` (the docks'
Refresh button) makes the next call probe again.

CuPy (the fused kernels) is optional and probed once per device (:func:`cupy_status`): a CuPy
that imports but whose CUDA runtime cannot start (e.g. the ``cuda13`` build on a CUDA 12 driver)
only turns the fused kernels off; jobs still run on torch.

CUDA's *current device* is a per-thread setting, so workers enter :func:`device_context`
inside their own thread rather than relying on a call made in the GUI thread.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import numbers
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

__all__ = [
    "GPUInfo",
    "NoGPUError",
    "count_host_syncs",
    "cupy_available",
    "cupy_status",
    "device_context",
    "device_label",
    "forget_gpus",
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
    """Whether CuPy is installed (it imports without a GPU; see :func:`cupy_status`)."""
    return importlib.util.find_spec("cupy") is not None


_cupy_lock = threading.Lock()
_cupy_status: dict[int, tuple[bool, str]] = {}


def _probe_cupy(index: int) -> tuple[bool, str]:
    if not cupy_available():
        return False, f"CuPy is not installed ({_cupy_hint()})"
    try:
        import cupy

        with cupy.cuda.Device(index):
            # A real runtime call on the device: it starts the CUDA runtime CuPy was built for
            # (cudaErrorInsufficientDriver surfaces here) in the context torch uses too.
            cupy.cuda.runtime.memGetInfo()
        version = cupy.__version__
    except Exception as exc:
        return False, (
            f"CuPy cannot use cuda:{index} ({type(exc).__name__}: {exc}); check that the CuPy "
            f"build matches the driver's CUDA version ({_cupy_hint()})"
        )
    return True, f"CuPy {version}"


def cupy_status(device: int | str | torch.device) -> tuple[bool, str]:
    """Whether CuPy can run kernels on a CUDA device, and why not; probed once per device.

    Parameters
    ----------
    device : int or str or torch.device
        A CUDA ordinal or device.

    Returns
    -------
    usable : bool
        CuPy imports and its CUDA runtime works on that device.
    detail : str
        ``"CuPy 14.2.0"``, or the reason it cannot be used and how to fix it.

    Examples
    --------
    >>> usable, detail = cupy_status(0)
    >>> isinstance(usable, bool) and isinstance(detail, str)
    True
    """
    if isinstance(device, numbers.Integral):
        index = int(device)
    else:
        dev = torch.device(device)
        index = dev.index if dev.index is not None else 0
    with _cupy_lock:
        status = _cupy_status.get(index)
        if status is None:
            status = _cupy_status[index] = _probe_cupy(index)
        return status


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


_probe_lock = threading.Lock()
_probed: dict[int, GPUInfo | None] = {}


def _probed_gpu(index: int) -> GPUInfo | None:
    """The cached probe of GPU ``index``; a GPU that failed is probed again when asked."""
    with _probe_lock:
        info = _probed.get(index)
        if info is None:
            info = _probed[index] = _probe(index)
        return info


def forget_gpus() -> None:
    """Forget every cached GPU probe and CuPy probe, so the next call probes again.

    The docks' Refresh button calls it (e.g. after another program freed a GPU).
    """
    with _probe_lock:
        _probed.clear()
    with _cupy_lock:
        _cupy_status.clear()


def list_gpus() -> list[GPUInfo]:
    """List the CUDA GPUs that can actually run work.

    Each GPU is probed with a tiny allocation (``torch.cuda.is_available()`` alone can be True
    while the driver is unusable), once per process: the result, free memory included, is
    cached until :func:`forget_gpus`.

    Returns
    -------
    list of GPUInfo
        Empty when torch is a CPU build, no driver is installed or no GPU passed the probe.
    """
    if not torch.cuda.is_available():
        return []
    found = (_probed_gpu(i) for i in range(torch.cuda.device_count()))
    return [info for info in found if info is not None]


def _first_gpu() -> GPUInfo | None:
    """The first GPU that passes a probe; the ones after it are not probed."""
    if not torch.cuda.is_available():
        return None
    for index in range(torch.cuda.device_count()):
        info = _probed_gpu(index)
        if info is not None:
            return info
    return None


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


_VALID_DEVICES = "'cuda', 'cuda:N', a GPU ordinal N >= 0, a torch.device or 'cpu'"


def resolve_device(device: str | int | torch.device | None = None) -> torch.device:
    """Turn a device request into a :class:`torch.device`, never silently falling back.

    Only the requested GPU is probed (once per process, see :func:`list_gpus`).

    Parameters
    ----------
    device : str or int or torch.device or None
        ``None`` selects the first usable GPU; ``"cuda"``/``"cuda:N"`` or the ordinal ``N`` a
        specific one; ``"cpu"`` the CPU -- only when asked for by name (tests, reference runs).

    Returns
    -------
    torch.device

    Raises
    ------
    NoGPUError
        No GPU is usable, or the named GPU does not exist or failed its probe.
    ValueError
        ``device`` is none of the accepted forms.

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if isinstance(device, torch.device):
        device = str(device)
    if isinstance(device, numbers.Integral) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"device must be {_VALID_DEVICES}; got the negative ordinal {device}")
        device = f"cuda:{int(device)}"
    if device is None:
        first = _first_gpu()
        if first is None:
            raise NoGPUError(no_gpu_message())
        return torch.device(first.device)
    if not isinstance(device, str):
        raise ValueError(f"device must be {_VALID_DEVICES}; got {device!r}")
    text = device.strip().lower()
    if text == "cpu":
        return torch.device("cpu")
    if text == "cuda":
        text = "cuda:0"
    if not text.startswith("cuda:") or not text[5:].isdigit():
        raise ValueError(f"device must be {_VALID_DEVICES}; got {device!r}")
    index = int(text[5:])
    if not torch.cuda.is_available():
        raise NoGPUError(no_gpu_message())
    if index >= torch.cuda.device_count() or _probed_gpu(index) is None:
        gpus = list_gpus()  # only to name the alternatives in the message
        if not gpus:
            raise NoGPUError(no_gpu_message())
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
def device_context(device: str | int | torch.device | None) -> Iterator[torch.device]:
    """Resolve ``device`` and make it current for torch and CuPy in *this* thread.

    CuPy is entered only when it can run on the device (:func:`cupy_status`); otherwise the job
    runs on torch alone and the fused kernels report why they are off.

    Parameters
    ----------
    device : str or int or torch.device or None
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
        index = dev.index if dev.index is not None else 0
        if cupy_status(index)[0]:
            import cupy

            stack.enter_context(cupy.cuda.Device(index))
        yield dev


SYNC_WARNING = "called a synchronizing cuda operation"
"""What torch's warning says, lower-cased, for each call that makes the host wait for a GPU."""


def count_host_syncs(run: Callable[[], object]) -> tuple[object, int]:
    """``run()``'s result and how many times it made the host wait for a CUDA device.

    Counted with ``torch.cuda.set_sync_debug_mode("warn")``: only torch's per-call warnings
    count, not the one-off notice that the debug mode is a prototype (the first count in a
    process used to include it: one phantom sync in the kit's first H100 run). torch sees its
    own synchronising calls (``.item()``, ``.cpu()``, ``nonzero``, event and stream waits), not
    CuPy's.

    Examples
    --------
    >>> count_host_syncs(lambda: 2 + 2)
    (4, 0)
    """
    import warnings

    if not torch.cuda.is_available():
        return run(), 0
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = run()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return result, sum(SYNC_WARNING in str(w.message).lower() for w in caught)
