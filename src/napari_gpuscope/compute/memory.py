"""Chunk planning from free device memory, and out-of-memory retries.

Methods describe their memory needs as ``fixed_bytes + n * bytes_per_item`` (an *item* is a
frame, a plane, a tile or a small problem of a batch). :func:`plan_chunk` turns free device
memory into the largest ``n`` that fits; :func:`run_in_chunks` processes items chunk by chunk
and, when the device runs out of memory anyway (fragmentation, another process), frees the
failed attempt's memory, halves the chunk and retries the same items. When even the smallest
chunk does not fit, :class:`DeviceMemoryError` says how many bytes were needed and how many were
available. Every chunked loop (:func:`run_in_chunks`, and the split volumes of
:mod:`~napari_gpuscope.compute.chunking`) recovers and gives up through one
:class:`MemoryRetry`, so they free the same way and give the same advice.

A *budget* (argument or the ``NAPARI_GPUSCOPE_MEMORY_BUDGET`` environment variable, in bytes,
with optional K/M/G suffix) overrides the free memory reported by the device; tests use it to
exercise chunking on the CPU. The budget and the planning are in :mod:`._memory_budget`; this
module is their public home and adds the retries.
"""

from __future__ import annotations

import gc
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ._memory_budget import (
    BUDGET_ENV,
    DeviceMemoryError,
    _explicit_budget,
    _usable_bytes,
    available_bytes,
    check_budget,
    format_bytes,
    plan_chunk,
)
from .job_parts import scaled
from .jobs import Job, Progress

__all__ = [
    "BUDGET_ENV",
    "DeviceMemoryError",
    "MemoryRetry",
    "available_bytes",
    "check_budget",
    "format_bytes",
    "free_cached",
    "is_out_of_memory",
    "plan_chunk",
    "release_frames",
    "run_in_chunks",
]


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` reports device memory exhaustion (torch, CuPy or our own budget)."""
    if isinstance(exc, torch.OutOfMemoryError | DeviceMemoryError):
        return True
    if type(exc).__name__ == "OutOfMemoryError" and type(exc).__module__.startswith("cupy"):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def release_frames(exc: BaseException) -> None:
    """Drop the local variables of the frames an exception's traceback keeps alive.

    A failed chunk's tensors live on in those frames (and in the exceptions chained to it), so
    without this :func:`free_cached` frees nothing and free memory is under-reported.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending.extend([current.__cause__, current.__context__])


def free_cached(device: str | torch.device) -> None:
    """Return cached device blocks (torch and CuPy pools) so a retry starts from a clean slate.

    Never raises for CuPy: it runs inside an out-of-memory handler, where a CuPy that imports
    but cannot start on this device (e.g. a CUDA 13 build on a 12.x driver) would otherwise
    replace the memory error with its own. CuPy's pool is only touched where
    :func:`~napari_gpuscope.compute.devices.cupy_status` says CuPy runs.
    """
    gc.collect()
    dev = torch.device(device)
    if dev.type != "cuda":
        return
    torch.cuda.empty_cache()
    from .devices import cupy_status

    try:
        usable, _ = cupy_status(dev)
        if not usable:
            return
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    except Exception:  # freeing a cache is best effort; the caller's error is what matters
        pass


@dataclass(frozen=True)
class MemoryRetry:
    """How a chunked loop survives an out-of-memory error, and how it gives up.

    Attributes
    ----------
    device : str or torch.device
        Where the chunks run.
    budget : int, optional
        The explicit budget the chunks were planned with (see :func:`available_bytes`).
    what : str
        Name used in the error message.

    Examples
    --------
    >>> retry = MemoryRetry("cpu", budget=1000, what="one chunk")
    >>> retry.recover(ValueError("a bug"))
    False
    >>> error = retry.error(4096)
    >>> error.needed_bytes, error.available_bytes, error.budget
    (4096, 1000, True)
    """

    device: str | torch.device
    budget: int | None = None
    what: str = "this job"

    def recover(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an out-of-memory error; if so, the memory of the failed attempt
        is freed (the tensors its traceback keeps alive, then the device caches), so that a
        smaller retry starts from a clean slate. Call it in the ``except`` block."""
        if not is_out_of_memory(exc):
            return False
        release_frames(exc)
        free_cached(self.device)
        return True

    def error(self, needed_bytes: int) -> DeviceMemoryError:
        """The error for a smallest chunk of ``needed_bytes`` that still does not fit: the
        usable memory measured now (after :meth:`recover`), the device, and whether a budget
        applies (which changes the advice)."""
        return DeviceMemoryError(
            needed_bytes,
            _usable_bytes(self.device, self.budget),
            self.what,
            device=self.device,
            budget=_explicit_budget(self.budget),
        )


def run_in_chunks(
    n_items: int,
    chunk: int,
    process: Callable[[int, int], Job[None]],
    *,
    device: str | torch.device,
    bytes_per_item: int,
    fixed_bytes: int = 0,
    min_chunk: int = 1,
    budget: int | None = None,
    what: str = "this job",
    ready: Callable[[int], int] | None = None,
) -> Job[int]:
    """Process ``range(n_items)`` in chunks, shrinking the chunk on out-of-memory errors.

    Parameters
    ----------
    n_items : int
        Items to process.
    chunk : int
        Initial chunk size (usually from :func:`plan_chunk`).
    process : callable
        ``process(start, stop)`` returns a job that handles items ``start:stop`` and stores its
        results itself. It may be restarted for the same items with a smaller chunk.
    device : str or torch.device
        Device whose cache is freed between retries.
    bytes_per_item, fixed_bytes : int
        Memory model, used only to state the need in the final error.
    min_chunk : int
        Smallest chunk to try before giving up.
    budget : int, optional
        The budget the chunk was planned with (for the final error).
    what : str
        Name used in messages.
    ready : callable, optional
        ``ready(start)``: items from ``start`` that may go into one chunk now (an input that
        grows while it is processed, e.g. a live session's frames: the chunk ends where the
        items in hand end, or where the caller must see an update). A chunk holds at least one
        item, and at most ``chunk``.

    Returns
    -------
    int
        Number of chunks that were processed.

    Raises
    ------
    DeviceMemoryError
        When a chunk of ``min_chunk`` items still runs out of memory.
    """
    retry = MemoryRetry(device, budget, what)
    start = 0
    chunks = 0
    while start < n_items:
        stop = min(n_items, start + chunk)
        if ready is not None:
            stop = min(stop, start + max(1, ready(start)))
        total = chunks + math.ceil((n_items - start) / chunk)
        label = f"chunk {chunks + 1} of {total}: " if total > 1 else ""
        try:
            yield from scaled(process(start, stop), start / n_items, stop / n_items, label)
        except Exception as exc:
            if not retry.recover(exc):
                raise
            if chunk <= min_chunk:
                raise retry.error(fixed_bytes + min_chunk * bytes_per_item) from exc
            chunk = max(min_chunk, chunk // 2)
            yield Progress(
                start / n_items,
                f"out of device memory; retrying with chunks of {chunk} item(s)",
            )
            continue
        chunks += 1
        start = stop
    return chunks
