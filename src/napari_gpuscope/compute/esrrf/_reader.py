"""Frames from host memory, read one chunk ahead in a background thread.

NumPy arrays, dask and zarr arrays, memory-mapped TIFFs and torch tensors are read chunk by
chunk; while the device works on one chunk, the next one is read (a dask compute, a zarr or
disk read) so that slow storage and compute overlap. Only the frames of two chunks are ever held
on the host.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from .._types import ArrayLike

__all__ = ["FrameReader"]


def _read(stack: ArrayLike, start: int, stop: int) -> Any:
    part = stack[start:stop]
    return part if isinstance(part, torch.Tensor) else np.asarray(part)


class FrameReader:
    """Read ``stack[start:stop]`` with the next chunk prefetched.

    Parameters
    ----------
    stack : array-like
        ``(T, H, W)`` frames (never modified).

    Examples
    --------
    >>> with FrameReader(np.arange(12).reshape(3, 2, 2)) as reader:
    ...     reader.read(0, 2, prefetch_until=3).shape
    (2, 2, 2)
    """

    def __init__(self, stack: ArrayLike) -> None:
        self.stack = stack
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="esrrf-reader")
        self._pending: tuple[int, int, Future[Any]] | None = None

    def read(self, start: int, stop: int, *, prefetch_until: int) -> Any:
        """Frames ``start:stop``; starts reading the next ``stop - start`` frames (not past
        ``prefetch_until``) in the background."""
        pending, self._pending = self._pending, None
        if pending is not None and pending[:2] == (start, stop):
            frames = pending[2].result()
        else:
            if pending is not None:
                pending[2].cancel()
            frames = _read(self.stack, start, stop)
        following = min(prefetch_until, stop + (stop - start))
        if following > stop:
            future = self._pool.submit(_read, self.stack, stop, following)
            self._pending = (stop, following, future)
        return frames

    def close(self) -> None:
        """Stop the background thread (a pending read is abandoned)."""
        if self._pending is not None:
            self._pending[2].cancel()
            self._pending = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> FrameReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
