"""The CUDA backend: ``.cu`` sources compiled with NVRTC through ``cupy.RawModule`` (once per
device and process) and launched on torch's current stream. CuPy is imported only when a kernel
is compiled or launched on another device than the current one."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._protocol import BLOCK_SIZE, MAX_BLOCKS, KernelCompileError, grid_size
from ._source import KernelSource

__all__ = ["CupyBackend", "is_compile_log"]

_cupy_lock = threading.Lock()
_cupy_modules: dict[tuple[str, str, int], Any] = {}


class _StreamHandle:
    """What CuPy's kernel launch reads from its ``stream=`` argument: the raw pointer."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def _compile_module(source: KernelSource, index: int) -> Any:
    """The loaded NVRTC module of ``source`` on device ``index`` (compiled once per process)."""
    import cupy

    key = (str(source.path), source.digest, index)
    with _cupy_lock:
        module = _cupy_modules.get(key)
        if module is not None:
            return module
        with cupy.cuda.Device(index):
            module = cupy.RawModule(code=source.text, options=("--std=c++14",))
            try:
                module.compile()
            except Exception as exc:
                if is_compile_log(exc):
                    raise KernelCompileError(
                        f"NVRTC compile of {source.name} failed: {exc}"
                    ) from exc
                raise
        _cupy_modules[key] = module
        return module


def is_compile_log(exc: BaseException) -> bool:
    """Whether ``exc`` is NVRTC rejecting a source (as opposed to NVRTC or CUDA missing)."""
    return type(exc).__name__ == "CompileException"


class CupyBackend:
    """Compile with ``cupy.RawModule`` (NVRTC, cached per device) and launch on torch's stream.

    Launches pass raw device pointers (no DLPack exchange per call) and cached kernel handles.
    :meth:`on_current_stream` returns a view bound to torch's current stream at that moment,
    so a solver fetches the stream once per block of launches rather than once per launch.

    Parameters
    ----------
    device : str or torch.device
        A CUDA device, e.g. ``"cuda:0"``.
    block, max_blocks : int
        Launch geometry, as for :class:`HostBackend`.
    """

    kind = "cuda"

    def __init__(
        self,
        device: str | torch.device,
        *,
        block: int = BLOCK_SIZE,
        max_blocks: int = MAX_BLOCKS,
    ) -> None:
        dev = torch.device(device)
        if dev.type != "cuda":
            raise ValueError(f"CupyBackend needs a CUDA device, got {dev}")
        self.index = dev.index if dev.index is not None else torch.cuda.current_device()
        self.block = block
        self.max_blocks = max_blocks
        self._functions: dict[tuple[str, str], Any] = {}
        self._stream: _StreamHandle | None = None
        self._other_device = False

    def on_current_stream(self) -> CupyBackend:
        """A view of this backend that launches on torch's current stream of its device now.

        The view shares the compiled kernels. Use it for launches that follow one another
        without yielding control (a stream change in between would not be seen).
        """
        view = copy.copy(self)
        view._stream = _StreamHandle(torch.cuda.current_stream(self.index).cuda_stream)
        view._other_device = torch.cuda.current_device() != self.index
        return view

    def function(self, source: KernelSource, name: str) -> Any:
        key = (source.digest, name)
        function = self._functions.get(key)
        if function is None:
            import cupy

            module = _compile_module(source, self.index)
            with cupy.cuda.Device(self.index):
                kernel = module.get_function(name)
                # The driver-level function of this device: calling it skips the RawKernel
                # wrapper's per-call device lookup.
                function = getattr(kernel, "kernel", kernel)
            self._functions[key] = function
        return function

    def array(self, tensor: torch.Tensor) -> np.uint64:
        """The tensor's device pointer (the kernel parameter of a ``float*``)."""
        if not tensor.is_cuda or tensor.get_device() != self.index:
            raise ValueError(f"tensor on {tensor.device}, backend on cuda:{self.index}")
        if not tensor.is_contiguous():
            raise ValueError("kernels need contiguous tensors")
        return np.uint64(tensor.data_ptr())

    def launch(self, function: Any, n_threads: int, args: Sequence[Any]) -> None:
        grid = grid_size(n_threads, self.block, self.max_blocks)
        if not grid:
            return
        stream = self._stream
        other_device = self._other_device
        if stream is None:
            stream = _StreamHandle(torch.cuda.current_stream(self.index).cuda_stream)
            other_device = torch.cuda.current_device() != self.index
        if other_device:
            import cupy

            with cupy.cuda.Device(self.index):
                function((grid,), (self.block,), tuple(args), stream=stream)
        else:
            function((grid,), (self.block,), tuple(args), stream=stream)
