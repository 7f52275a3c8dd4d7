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
exercise chunking on the CPU.
"""

from __future__ import annotations

import gc
import math
import numbers
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .jobs import Job, Progress, scaled
from .params import ParameterError

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

BUDGET_ENV = "NAPARI_GPUSCOPE_MEMORY_BUDGET"
# Headroom for the caching allocator's fragmentation, cuFFT/cuBLAS workspaces and the display.
SAFETY_FRACTION = 0.8
_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


class DeviceMemoryError(MemoryError):
    """Not even the smallest chunk of a job fits in device memory.

    Attributes
    ----------
    needed_bytes : int
        Memory the smallest chunk needs.
    available_bytes : int
        Memory that was available for it (the configured budget, or the measured free memory
        less the headroom kept for fragmentation and other programs).
    device : str or None
        The device (``"cuda:0"``, ``"cpu"``), when known; the advice depends on it.
    budget : bool
        Whether ``available_bytes`` is a configured budget rather than measured free memory.
    """

    def __init__(
        self,
        needed_bytes: int,
        available_bytes: int,
        what: str = "this job",
        *,
        device: str | torch.device | None = None,
        budget: bool = False,
    ):
        self.needed_bytes = int(needed_bytes)
        self.available_bytes = int(available_bytes)
        self.device = None if device is None else str(torch.device(device))
        self.budget = bool(budget)
        on = f" on {self.device}" if self.device else ""
        if self.budget:
            where = "within the memory budget"
            advice = (
                f"Raise the budget (memory_budget, or the {BUDGET_ENV} environment variable) or "
                "crop the input."
            )
        elif self.device == "cpu":
            where = "of free RAM"
            advice = "Close other programs or crop the input."
        else:
            where = "of free device memory"
            advice = (
                "Close other GPU programs, pick a GPU with more free memory, or crop the input."
            )
        super().__init__(
            f"Not enough memory{on} for {what}: the smallest chunk needs "
            f"{format_bytes(self.needed_bytes)} but only {format_bytes(self.available_bytes)} "
            f"{where} can be used. {advice}"
        )


def format_bytes(n: float) -> str:
    """Format a byte count for people, e.g. ``"1.50 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _parse_budget(text: str) -> int:
    text = text.strip().lower().removesuffix("b").removesuffix("i")
    factor = _SUFFIXES.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in _SUFFIXES else text
    try:
        value = float(number) * factor
    except ValueError:
        raise ValueError(
            f"{BUDGET_ENV}={text!r} is not a byte count (examples: 500000000, 512M, 2G)"
        ) from None
    if value <= 0:
        raise ValueError(f"{BUDGET_ENV} must be positive, got {text!r}")
    return int(value)


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def available_bytes(device: str | torch.device, budget: int | None = None) -> int:
    """Memory a job may plan with on ``device``.

    Parameters
    ----------
    device : str or torch.device
        The compute device.
    budget : int, optional
        Explicit budget in bytes; overrides the environment variable and the device's free memory.

    Returns
    -------
    int
        ``budget`` if given, else the ``NAPARI_GPUSCOPE_MEMORY_BUDGET`` value, else free memory
        (CUDA: driver free memory plus torch's cached-but-unused blocks; CPU: available RAM).
    """
    if budget is not None:
        if budget <= 0:
            raise ValueError(f"memory budget must be positive, got {budget}")
        return int(budget)
    env = os.environ.get(BUDGET_ENV, "").strip()
    if env:
        return _parse_budget(env)
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        reusable = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return int(free + max(0, reusable))
    return _host_available_bytes()


def plan_chunk(
    n_items: int,
    bytes_per_item: int,
    device: str | torch.device,
    *,
    fixed_bytes: int = 0,
    budget: int | None = None,
    min_items: int = 1,
    what: str = "this job",
) -> int:
    """Largest number of items (at most ``n_items``) whose working set fits in memory.

    Parameters
    ----------
    n_items : int
        Items to process in total.
    bytes_per_item : int
        Device bytes one more item costs (inputs, outputs, solver state, temporaries).
    device : str or torch.device
        The compute device.
    fixed_bytes : int
        Bytes needed regardless of the chunk size (e.g. halos, per-job tables).
    budget : int, optional
        Overrides the free memory (see :func:`available_bytes`).
    min_items : int
        Smallest chunk that makes sense.
    what : str
        Name used in the error message.

    Returns
    -------
    int
        Chunk size, between ``min(min_items, n_items)`` and ``n_items``.

    Raises
    ------
    DeviceMemoryError
        When even ``min_items`` items do not fit.
    """
    if n_items < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items}")
    explicit = _explicit_budget(budget)
    usable = _usable_bytes(device, budget)
    smallest = min(min_items, n_items)
    needed = fixed_bytes + smallest * bytes_per_item
    if needed > usable:
        raise DeviceMemoryError(needed, usable, what, device=device, budget=explicit)
    fits = (usable - fixed_bytes) // max(1, bytes_per_item)
    return int(max(smallest, min(n_items, fits)))


def _explicit_budget(budget: int | None) -> bool:
    return budget is not None or bool(os.environ.get(BUDGET_ENV, "").strip())


def _usable_bytes(device: str | torch.device, budget: int | None) -> int:
    """An explicit budget taken literally; measured free memory less the safety headroom."""
    factor = 1.0 if _explicit_budget(budget) else SAFETY_FRACTION
    return int(available_bytes(device, budget) * factor)


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


def check_budget(memory_budget: object) -> int | None:
    """A job's ``memory_budget`` argument as bytes, or a :class:`ParameterError` naming it.

    Examples
    --------
    >>> check_budget(2**30), check_budget(None)
    (1073741824, None)
    >>> check_budget(float("nan"))
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: memory_budget must be a positive whole ...
    """
    if memory_budget is None:
        return None
    integral = isinstance(memory_budget, numbers.Integral) and not isinstance(memory_budget, bool)
    if not integral or memory_budget <= 0:  # type: ignore[operator]
        raise ParameterError(
            "memory_budget must be a positive whole number of bytes (or None: the free device "
            f"memory), got {memory_budget!r}"
        )
    return int(memory_budget)  # type: ignore[call-overload]
