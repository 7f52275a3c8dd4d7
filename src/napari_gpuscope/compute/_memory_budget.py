"""How much device memory a job may plan with: budgets, free memory, :func:`plan_chunk`, and
the :class:`DeviceMemoryError` when not even the smallest chunk fits.

:mod:`.memory` is the public home of these names (and adds the out-of-memory retries).
"""

from __future__ import annotations

import numbers
import os

import torch

from .params import ParameterError

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

    __module__ = "napari_gpuscope.compute.memory"  # its public home (tracebacks, pickles)

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
