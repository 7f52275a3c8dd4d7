"""CUDA source files shipped as package data."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["KERNEL_DIR", "KernelSource", "kernel_files"]

KERNEL_DIR = Path(__file__).resolve().parent
"""The folder of the kernel machinery: ``host_shim.h`` and the platform's own ``axpby.cu``."""

COMPUTE_DIR = KERNEL_DIR.parent
"""The compute package; each method keeps its ``.cu`` files in its own folder below it."""

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_KERNEL_DECL = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?([A-Za-z_]\w*)\s*\('
)
_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.MULTILINE)


def kernel_files() -> list[Path]:
    """All ``.cu`` files shipped in the compute package (every method's folder), sorted."""
    return sorted(COMPUTE_DIR.rglob("*.cu"), key=lambda path: (path.name, str(path)))


class KernelSource:
    """One ``.cu`` file, read once.

    Parameters
    ----------
    filename : str or pathlib.Path
        A file name relative to the folder of ``beside`` (or of the kernels machinery when
        ``beside`` is None), or an absolute path (tests use this for deliberately broken
        kernels).
    beside : str or pathlib.Path, optional
        A module's ``__file__``: method packages keep their ``.cu`` files next to the torch twins,
        ``KernelSource("tv_fgp.cu", beside=__file__)``.

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

    def __init__(self, filename: str | Path, *, beside: str | Path | None = None) -> None:
        path = Path(filename)
        folder = KERNEL_DIR if beside is None else Path(beside).resolve().parent
        self.path = path if path.is_absolute() else folder / path
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
