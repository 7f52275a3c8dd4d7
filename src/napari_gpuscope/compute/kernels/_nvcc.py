"""The offline compile check of a ``.cu`` source with ``nvcc`` (to PTX; no GPU needed)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ._source import KernelSource

__all__ = ["nvcc_available", "nvcc_compile_check"]

_NVCC_ARCH = "compute_75"  # the oldest architecture CUDA 13 still supports


def nvcc_available() -> bool:
    """Whether ``nvcc`` is on PATH."""
    return shutil.which("nvcc") is not None


def nvcc_compile_check(source: KernelSource, arch: str = _NVCC_ARCH) -> tuple[bool, str]:
    """Compile ``source`` to PTX with ``nvcc`` (no GPU needed).

    Parameters
    ----------
    source : KernelSource
        The file to check.
    arch : str
        Virtual architecture, default ``"compute_75"``.

    Returns
    -------
    ok : bool
        Whether nvcc succeeded.
    log : str
        The command line and nvcc's output.

    Raises
    ------
    FileNotFoundError
        ``nvcc`` is not on PATH.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as work:
        command = [
            nvcc,
            "-ptx",
            f"-arch={arch}",
            "-std=c++14",
            str(source.path),
            "-o",
            str(Path(work) / f"{source.path.stem}.ptx"),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    log = " ".join(command) + "\n" + result.stdout + result.stderr
    return result.returncode == 0, log
