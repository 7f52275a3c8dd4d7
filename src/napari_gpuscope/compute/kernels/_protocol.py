"""What every kernel backend shares: the :class:`Backend` protocol an op's launcher calls, the
1-D launch geometry, and the error a failed compile raises. The backends themselves are
:mod:`._host` (g++ emulation) and :mod:`._cupy` (CUDA); :mod:`._backends` gathers them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from ._source import KernelSource

__all__ = ["BLOCK_SIZE", "MAX_BLOCKS", "Backend", "KernelCompileError", "grid_size"]

BLOCK_SIZE = 256
"""Threads per block of every 1-D launch."""

MAX_BLOCKS = 65535 * 4
"""Upper bound on the 1-D grid; kernels cover larger inputs with a grid-stride loop."""


class KernelCompileError(RuntimeError):
    """A kernel source failed to compile; the message carries the compiler log."""


@runtime_checkable
class Backend(Protocol):
    """What an op's launcher needs: compiled functions, array views and a 1-D launch."""

    def function(self, source: KernelSource, name: str) -> Any:
        """Return the compiled kernel ``name`` of ``source`` (compiled once, then cached)."""
        ...

    def array(self, tensor: torch.Tensor) -> Any:
        """Return a zero-copy view of a contiguous tensor the kernel can read and write."""
        ...

    def launch(self, function: Any, n_threads: int, args: Sequence[Any]) -> None:
        """Launch ``function`` with up to ``n_threads`` threads; grid-stride loops do the rest.

        ``args`` are arrays from :meth:`array` and NumPy scalars (``np.float32``, ``np.int32``,
        ``np.int64``, ...) whose dtype matches the C parameter type exactly.
        """
        ...


def grid_size(n_threads: int, block: int = BLOCK_SIZE, max_blocks: int = MAX_BLOCKS) -> int:
    """Number of blocks of a 1-D launch: enough for ``n_threads``, capped at ``max_blocks``."""
    return max(0, min(-(-n_threads // block), max_blocks))
