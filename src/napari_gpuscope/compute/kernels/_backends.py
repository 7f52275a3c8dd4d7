"""Backends that compile and launch a :class:`KernelSource`: CuPy on a GPU, g++ on the host.

Gathered here from their modules: the protocol, launch geometry and compile error
(:mod:`._protocol`), host emulation (:mod:`._host`), CUDA through CuPy (:mod:`._cupy`) and the
``nvcc`` compile check (:mod:`._nvcc`).
"""

from __future__ import annotations

from ._cupy import CupyBackend, is_compile_log
from ._cupy import _compile_module as _compile_module  # the GPU kit's benchmark imports it here
from ._cupy import _StreamHandle as _StreamHandle  # _gate imports it from here
from ._host import HOST_SHIM, HostBackend, HostFunction, host_emulation_available
from ._nvcc import nvcc_available, nvcc_compile_check
from ._protocol import BLOCK_SIZE, MAX_BLOCKS, Backend, KernelCompileError, grid_size

__all__ = [
    "BLOCK_SIZE",
    "HOST_SHIM",
    "MAX_BLOCKS",
    "Backend",
    "CupyBackend",
    "HostBackend",
    "HostFunction",
    "KernelCompileError",
    "grid_size",
    "host_emulation_available",
    "is_compile_log",
    "nvcc_available",
    "nvcc_compile_check",
]
