"""What a GPU would notice, counted on the CPU: host round trips and peak allocated bytes.

:class:`HostTransfers` follows which memory would live on the compute device: what the job
uploads (:func:`~napari_gpuscope.compute.arrays.to_device`, ``.to(device)`` of host data), what
the test declares (:meth:`HostTransfers.on_device`) and everything computed from it (a
``TorchDispatchMode`` tags the storages of every op's outputs when an input is tagged). It then
counts every crossing between that memory and the host:

- reads of a device value (``.item()``, ``float()``, ``bool()``: ``aten._local_scalar_dense``),
- copies to the host (``Tensor.cpu``, ``.numpy``, ``.tolist``, ``.to("cpu")`` and ``copy_`` into
  host memory; a ``.numpy()`` of what ``.cpu()`` returned is the same copy),
- uploads (``.to(device)`` of host data, ``to_device``, ``copy_`` of host data into the device).

Each one waits for the device on a GPU (or is a separate copy). A factory (``torch.zeros``,
``torch.arange``, ``torch.fft.fftfreq``...) called with ``device=`` makes device memory, one
called without makes host memory (``torch.tensor(..., device=d)`` of host data is an upload):
on the CPU the two cannot be told apart otherwise. The GPU kit counts synchronisations with
``torch.cuda.set_sync_debug_mode`` for the real thing.

:func:`peak_allocated` replays the CPU allocator's events (``torch.profiler`` with
``profile_memory``) and returns the largest number of bytes live above the starting level:
what ``torch.cuda.max_memory_allocated`` measures on a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

FACTORIES = (
    (torch, ("arange", "empty", "zeros", "ones", "full", "linspace", "tensor", "as_tensor")),
    (torch.fft, ("fftfreq", "rfftfreq")),
)
"""Tensor factories whose ``device=`` argument says "made on the compute device"."""
_SCALAR_READ = torch.ops.aten._local_scalar_dense.default
_COPY = torch.ops.aten.copy_.default


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class _Tagger(TorchDispatchMode):
    def __init__(self, probe: HostTransfers) -> None:
        super().__init__()
        self.probe = probe

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        probe = self.probe
        if func is _COPY:
            dst, src = args[0], args[1]
            if probe.is_device(src) and not probe.is_device(dst):
                probe.counts["copy to host"] += 1
            elif probe.is_device(dst) and not probe.is_device(src):
                probe.counts["copy to device"] += 1
        elif func is _SCALAR_READ and probe.is_device(args[0]):
            probe.counts["scalar read"] += 1
        out = func(*args, **kwargs)
        if func is not _COPY and any(probe.is_device(t) for t in _tensors((args, kwargs))):
            for t in _tensors(out):
                probe.tag(t)
        return out


def _import_compute() -> None:
    """Import every module of ``napari_gpuscope.compute`` (once), so that :class:`HostTransfers`
    patches each module's ``to_device``. Without it the counts depended on what earlier tests
    had imported: run alone, a module imported during the count uploaded uncounted (seen as
    'upload' and 'Tensor.tolist' missing, and ADMM's host path at 2 crossings an iteration
    instead of 3)."""
    import importlib
    import pkgutil

    import napari_gpuscope.compute as compute

    for module in pkgutil.walk_packages(compute.__path__, compute.__name__ + "."):
        importlib.import_module(module.name)


class HostTransfers:
    """Context manager counting host <-> device crossings by kind (see the module notes).

    Examples
    --------
    >>> with HostTransfers() as transfers:
    ...     x = transfers.on_device(torch.ones(3))
    ...     y = (2 * x).sum()
    ...     host = torch.ones(3).sum().item()  # a host value: not a crossing
    ...     _ = float(y)
    >>> dict(transfers.counts)
    {'scalar read': 1}
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._device: weakref.WeakSet = weakref.WeakSet()
        self._fetched: set[int] = set()  # ids of host copies (tensors compare elementwise)
        self._stack = contextlib.ExitStack()

    @property
    def total(self) -> int:
        """All crossings counted."""
        return sum(self.counts.values())

    def tag(self, tensor: torch.Tensor) -> None:
        self._device.add(tensor.untyped_storage())

    def is_device(self, tensor: Any) -> bool:
        return isinstance(tensor, torch.Tensor) and tensor.untyped_storage() in self._device

    def _fetch(self, tensor: torch.Tensor) -> None:
        self._fetched.add(id(tensor))
        weakref.finalize(tensor, self._fetched.discard, id(tensor))

    def on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """Declare ``tensor`` device memory (e.g. a stack a test passes as a device tensor)."""
        self.tag(tensor)
        return tensor

    def _patch(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def patched(*args: Any, **kwargs: Any) -> Any:  # a function: binds as a method
            return wrapper(original, *args, **kwargs)

        setattr(owner, name, patched)
        self._stack.callback(setattr, owner, name, original)

    def __enter__(self) -> HostTransfers:
        def download(original, tensor, *args, **kwargs):
            if self.is_device(tensor) and id(tensor) not in self._fetched:
                self.counts[f"Tensor.{original.__name__}"] += 1
            out = original(tensor, *args, **kwargs)
            if original.__name__ == "cpu" and isinstance(out, torch.Tensor):
                self._fetch(out)  # its .numpy() is this same copy
            return out

        for name in ("cpu", "numpy", "tolist"):
            self._patch(torch.Tensor, name, download)

        def to(original, tensor, *args, **kwargs):
            target = kwargs.get("device", args[0] if args else None)
            moves = isinstance(target, str | torch.device)
            out = original(tensor, *args, **kwargs)
            if moves and torch.device(target).type == "cpu" and self.is_device(tensor):
                self.counts["Tensor.to(host)"] += 1
                self._fetch(out)
            elif moves and not self.is_device(tensor):
                self.counts["upload"] += 1  # on the CPU the target is the compute device
                self.tag(out)
            return out

        self._patch(torch.Tensor, "to", to)

        def factory(original, *args, **kwargs):
            out = original(*args, **kwargs)
            if kwargs.get("device") is not None:  # made for the compute device
                data = args[0] if args else kwargs.get("data")
                if original.__name__ in ("tensor", "as_tensor") and not self.is_device(data):
                    self.counts["upload"] += 1
                for t in _tensors(out):
                    self.tag(t)
            return out

        for owner, names in FACTORIES:
            for name in names:
                self._patch(owner, name, factory)

        def loaded(original, data, *args, **kwargs):
            out = original(data, *args, **kwargs)
            if not self.is_device(data):
                self.counts["upload"] += 1
            self.tag(out)
            return out

        from napari_gpuscope.compute import arrays

        _import_compute()  # a module a job imports lazily would keep the unpatched function
        to_device = arrays.to_device
        for module in list(sys.modules.values()):
            if module.__name__.startswith("napari_gpuscope") and (
                getattr(module, "to_device", None) is to_device
            ):
                self._patch(module, "to_device", loaded)
        self._stack.enter_context(_Tagger(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()


def peak_allocated(run: Callable[[], Any]) -> tuple[Any, int]:
    """``run()``'s result and the most CPU-allocator bytes live at once above the start."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return result, peak
