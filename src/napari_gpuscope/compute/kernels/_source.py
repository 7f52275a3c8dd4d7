"""CUDA source files shipped as package data."""

from __future__ import annotations

import functools
import hashlib
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["KERNEL_DIR", "KernelSource", "kernel_files", "kernels_named_in", "op_modules"]

KERNEL_DIR = Path(__file__).resolve().parent
"""The folder of the kernel machinery: ``host_shim.h`` and the platform's own ``axpby.cu``."""

COMPUTE_DIR = KERNEL_DIR.parent
"""The compute package; each method keeps its ``.cu`` files in its own folder below it."""

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_KERNEL_DECL = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?([A-Za-z_]\w*)\s*\('
)
_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.MULTILINE)
_OP_DEFINITION = re.compile(r"^[A-Za-z_]\w*\s*(?::[^=\n]+)?=\s*FusedOp\(", re.MULTILINE)
_COMPUTE_PACKAGE = __name__.rsplit(".", 2)[0]  # napari_gpuscope.compute


def kernel_files() -> list[Path]:
    """All ``.cu`` files shipped in the compute package (every method's folder), sorted."""
    return sorted(COMPUTE_DIR.rglob("*.cu"), key=lambda path: (path.name, str(path)))


@functools.cache
def op_modules() -> tuple[str, ...]:
    """The modules of the compute package that define a :class:`FusedOp` at module level.

    Found by reading the sources (a line ``name = FusedOp(`` at the start of a line), without
    importing anything, so that :func:`registered_ops` can import exactly these. An op built
    anywhere else (inside a function, in a test) is not one of the package's ops.

    Returns
    -------
    tuple of str
        Dotted module names, sorted, e.g. ``"napari_gpuscope.compute.tv._ops"``.
    """
    names = []
    for path in sorted(COMPUTE_DIR.rglob("*.py")):
        if not _OP_DEFINITION.search(path.read_text(encoding="utf-8")):
            continue
        parts = path.relative_to(COMPUTE_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join((_COMPUTE_PACKAGE, *parts)))
    return tuple(names)


def _code_objects(function: Callable[..., Any]) -> tuple[Any, list[types.CodeType]]:
    """The function behind ``function`` (partials and methods unwrapped) and its code objects,
    nested functions included."""
    while isinstance(function, functools.partial):
        function = function.func
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    codes: list[types.CodeType] = []
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        codes.append(current)
        stack += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    return function, codes


def kernels_named_in(launch: Callable[..., Any]) -> tuple[str, ...]:
    """The kernels a launcher can fetch, read from its code without running it.

    A launcher fetches its kernels with ``backend.function(SOURCE, "name")`` or, for families
    of variants, ``backend.function(SOURCE, f"prefix_{suffix}")``. This returns the kernels of
    the :class:`KernelSource` objects the launcher refers to (global names and closure cells)
    whose name is one of the launcher's string constants, or starts with a constant ending in
    ``"_"`` (an f-string's fixed prefix). A launcher that builds its names elsewhere declares
    them instead (``FusedOp(..., kernels=...)``); a test checks that every kernel of every
    ``.cu`` file belongs to some op, and that each op's example launches only its own.

    Parameters
    ----------
    launch : callable
        A launcher, ``launch(backend, *args, **kwargs)``.

    Returns
    -------
    tuple of str
        Kernel names in source order (empty when none is found).
    """
    function, codes = _code_objects(launch)
    strings = {c for code in codes for c in code.co_consts if isinstance(c, str)}
    prefixes = tuple(s for s in strings if len(s) > 1 and s.endswith("_"))
    scope = getattr(function, "__globals__", {})
    candidates = [scope.get(name) for code in codes for name in code.co_names]
    for cell in getattr(function, "__closure__", None) or ():
        try:
            candidates.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    sources = list({id(s): s for s in candidates if isinstance(s, KernelSource)}.values())
    names = [
        kernel
        for source in sources
        for kernel in source.kernel_names
        if kernel in strings or kernel.startswith(prefixes)
    ]
    return tuple(dict.fromkeys(names))


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
