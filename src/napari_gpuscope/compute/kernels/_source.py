"""CUDA source files shipped as package data."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["KERNEL_DIR", "KernelSource", "kernel_files"]

KERNEL_DIR = Path(__file__).resolve().parent
"""The folder holding the ``.cu`` files and ``host_shim.h``."""

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_KERNEL_DECL = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?([A-Za-z_]\w*)\s*\('
)
_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.MULTILINE)


def kernel_files() -> list[Path]:
    """All ``.cu`` files shipped in the kernels folder, sorted by name."""
    return sorted(KERNEL_DIR.glob("*.cu"))


class KernelSource:
    """One ``.cu`` file, read once.

    Parameters
    ----------
    filename : str or pathlib.Path
        A file name relative to the kernels folder (``"tv_fgp.cu"``), or an absolute path
        (tests use this for deliberately broken kernels).

    Attributes
    ----------
    path : pathlib.Path
        Absolute path of the file.
    text : str
        Its content.
    kernel_names : tuple of str
        Names of the ``extern "C" __global__ void NAME(`` kernels it defines, in order.
    digest : str
        SHA-256 of ``text``; compiled modules are cached under it.
    includes : tuple of str
        Any ``#include`` lines (outside comments). NVRTC has no standard headers, so the
        kernels in this folder have none; a test checks it.
    """

    def __init__(self, filename: str | Path) -> None:
        path = Path(filename)
        self.path = path if path.is_absolute() else KERNEL_DIR / path
        self.text = self.path.read_text(encoding="utf-8")
        self.digest = hashlib.sha256(self.text.encode("utf-8")).hexdigest()
        code = _COMMENTS.sub("", self.text)
        self.kernel_names = tuple(_KERNEL_DECL.findall(code))
        self.includes = tuple(line.strip() for line in _INCLUDE.findall(code))

    @property
    def name(self) -> str:
        """The file name, e.g. ``"axpby.cu"``."""
        return self.path.name

    def __repr__(self) -> str:
        return f"KernelSource({self.name!r}, kernels={list(self.kernel_names)})"
