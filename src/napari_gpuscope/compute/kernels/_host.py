"""Host emulation of the ``.cu`` kernels: g++ with ``host_shim.h``, loaded through ctypes, with
every argument checked against the kernel's C parameter types (verification only: the threads
run one after another)."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._protocol import BLOCK_SIZE, MAX_BLOCKS, KernelCompileError, grid_size
from ._source import KERNEL_DIR, KernelSource

__all__ = ["HostBackend", "HostFunction", "host_emulation_available"]

HOST_SHIM = KERNEL_DIR / "host_shim.h"
_HOST_CXX_FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC")


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("g++")


def host_emulation_available() -> bool:
    """Whether a C++ compiler (``$CXX`` or ``g++``) is on PATH to emulate kernels on the CPU."""
    return _compiler() is not None


@functools.cache
def _compiler_version(compiler: str) -> str:
    result = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    return result.stdout


def _cache_dir() -> Path:
    """Where compiled host libraries live: ``$NAPARI_GPUSCOPE_CACHE_DIR`` or the user cache."""
    override = os.environ.get("NAPARI_GPUSCOPE_CACHE_DIR")
    if override:
        base = Path(override)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "napari-gpuscope"
    candidates = [base / "host-kernels", Path(tempfile.gettempdir()) / "napari-gpuscope-kernels"]
    for directory in candidates:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    raise KernelCompileError("no writable cache directory for host-compiled kernels")


def _host_translation_unit(source: KernelSource) -> str:
    """The kernel source followed by one ctypes entry point per kernel (see host_shim.h)."""
    launchers = "".join(f"GPUSCOPE_HOST_LAUNCHER({name})\n" for name in source.kernel_names)
    return (
        f'#line 1 "{source.path}"\n{source.text}\n'
        f'#line 1 "<napari-gpuscope host launchers>"\n{launchers}'
    )


_host_lock = threading.Lock()
_host_libraries: dict[str, ctypes.CDLL] = {}


def _build_host_library(source: KernelSource) -> ctypes.CDLL:
    compiler = _compiler()
    if compiler is None:
        raise KernelCompileError("no C++ compiler (g++) on PATH for host emulation")
    unit = _host_translation_unit(source)
    shim = HOST_SHIM.read_text(encoding="utf-8")
    key_text = "\0".join([unit, shim, *_HOST_CXX_FLAGS, _compiler_version(compiler)])
    key = hashlib.sha256(key_text.encode("utf-8")).hexdigest()[:24]
    with _host_lock:
        if key in _host_libraries:
            return _host_libraries[key]
        directory = _cache_dir()
        library = directory / f"{source.path.stem}-{key}.so"
        if not library.exists():
            # Build under unique names, then rename: concurrent processes never see half a file.
            with tempfile.TemporaryDirectory(dir=directory) as work:
                unit_path = Path(work) / f"{source.path.stem}.cpp"
                unit_path.write_text(unit, encoding="utf-8")
                built = Path(work) / library.name
                command = [
                    compiler,
                    *_HOST_CXX_FLAGS,
                    "-include",
                    str(HOST_SHIM),
                    str(unit_path),
                    "-o",
                    str(built),
                ]
                result = subprocess.run(
                    command, capture_output=True, text=True, check=False, timeout=300
                )
                if result.returncode != 0:
                    raise KernelCompileError(
                        f"host compile of {source.name} failed:\n{' '.join(command)}\n"
                        f"{result.stderr}"
                    )
                os.replace(built, library)
        handle = ctypes.CDLL(str(library))
        _host_libraries[key] = handle
        return handle


@dataclass(frozen=True)
class HostFunction:
    """A host-compiled kernel: its ctypes launcher and its C parameter type codes."""

    name: str
    launcher: Any
    signature: tuple[str, ...]


# numpy dtype -> (type code used by host_shim.h, ctypes type for a by-value scalar)
_CTYPES: dict[np.dtype, tuple[str, Any]] = {
    np.dtype(np.float32): ("f32", ctypes.c_float),
    np.dtype(np.float64): ("f64", ctypes.c_double),
    np.dtype(np.int8): ("i8", ctypes.c_int8),
    np.dtype(np.uint8): ("u8", ctypes.c_uint8),
    np.dtype(np.int16): ("i16", ctypes.c_int16),
    np.dtype(np.uint16): ("u16", ctypes.c_uint16),
    np.dtype(np.int32): ("i32", ctypes.c_int32),
    np.dtype(np.uint32): ("u32", ctypes.c_uint32),
    np.dtype(np.int64): ("i64", ctypes.c_int64),
    np.dtype(np.uint64): ("u64", ctypes.c_uint64),
    np.dtype(np.bool_): ("bool", ctypes.c_bool),
}


class HostBackend:
    """Run the ``.cu`` kernels on the CPU: g++ with ``host_shim.h``, loaded through ctypes.

    Verification only (threads run one after another). Besides emulating CUDA it checks every
    argument against the kernel's C parameter types, which CUDA itself does not do.

    Parameters
    ----------
    block : int
        Threads per block.
    max_blocks : int
        Grid cap; tests lower it to exercise grid-stride loops on small inputs.
    reverse : bool
        Run the emulated threads last-to-first. A kernel whose result depends on the order is
        reading values that other threads write (a race on a GPU).
    """

    kind = "host"

    def __init__(
        self, *, block: int = BLOCK_SIZE, max_blocks: int = MAX_BLOCKS, reverse: bool = False
    ) -> None:
        self.block = block
        self.max_blocks = max_blocks
        self.reverse = reverse
        self._functions: dict[tuple[str, str], HostFunction] = {}

    def on_current_stream(self) -> HostBackend:
        """The host has no streams: the backend itself."""
        return self

    def function(self, source: KernelSource, name: str) -> HostFunction:
        cached = self._functions.get((source.digest, name))
        if cached is not None:
            return cached
        if name not in source.kernel_names:
            raise KeyError(f"{source.name} defines no kernel {name!r}: {source.kernel_names}")
        library = _build_host_library(source)
        launcher = getattr(library, f"gpuscope_launch_{name}")
        launcher.argtypes = [
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
        ]
        launcher.restype = None
        describe = getattr(library, f"gpuscope_signature_{name}")
        describe.restype = ctypes.c_char_p
        signature = describe().decode("ascii")
        function = HostFunction(name, launcher, tuple(signature.split(",")) if signature else ())
        self._functions[(source.digest, name)] = function
        return function

    def array(self, tensor: torch.Tensor) -> np.ndarray:
        if tensor.device.type != "cpu":
            raise ValueError(f"HostBackend needs CPU tensors, got one on {tensor.device}")
        if not tensor.is_contiguous():
            raise ValueError("kernels need contiguous tensors")
        return tensor.detach().numpy()

    def launch(self, function: HostFunction, n_threads: int, args: Sequence[Any]) -> None:
        if len(args) != len(function.signature):
            raise TypeError(
                f"kernel {function.name} takes {len(function.signature)} arguments "
                f"({','.join(function.signature)}), got {len(args)}"
            )
        holders = []
        pointers = (ctypes.c_void_p * max(1, len(args)))()
        for index, (value, expected) in enumerate(zip(args, function.signature, strict=True)):
            holder = self._argument(function.name, index, value, expected)
            holders.append(holder)  # keeps the ctypes values alive during the call
            pointers[index] = ctypes.addressof(holder)
        grid = grid_size(n_threads, self.block, self.max_blocks)
        if grid:
            function.launcher(grid, self.block, pointers, int(self.reverse))

    @staticmethod
    def _argument(kernel: str, index: int, value: Any, expected: str) -> Any:
        where = f"kernel {kernel}, argument {index}"
        if isinstance(value, np.ndarray):
            code = _CTYPES.get(value.dtype, (str(value.dtype), None))[0] + "*"
            if code != expected:
                raise TypeError(f"{where}: a {value.dtype} array does not match C type {expected}")
            if not value.flags.c_contiguous:
                raise ValueError(f"{where}: array is not C-contiguous")
            return ctypes.c_void_p(value.ctypes.data)
        if isinstance(value, np.generic):
            code, ctype = _CTYPES.get(value.dtype, (str(value.dtype), None))
            if code != expected or ctype is None:
                raise TypeError(f"{where}: a {value.dtype} scalar does not match C type {expected}")
            return ctype(value.item())
        raise TypeError(
            f"{where}: pass backend arrays or NumPy scalars (np.float32, np.int64, ...) so the C "
            f"type is explicit, got {type(value).__name__}"
        )
