"""Which implementation of a fused op runs, and what decides it besides the op: the path a
decision names (:class:`KernelPath`), the environment's switches, the default backends, the
warning and error a decision can end in, and an op bound to its decided path (:class:`BoundOp`).
The decision itself is :meth:`~._dispatch.FusedOp.bind` (:mod:`._dispatch`)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from ._backends import Backend, CupyBackend, HostBackend

__all__ = [
    "HOST_KERNELS_ENV",
    "KILL_SWITCH_ENV",
    "BoundOp",
    "CudaFaultError",
    "FusedKernelWarning",
    "KernelPath",
    "default_backend_factory",
    "host_kernels_requested",
    "kill_switch_active",
]

KILL_SWITCH_ENV = "NAPARI_GPUSCOPE_NO_FUSED"
HOST_KERNELS_ENV = "NAPARI_GPUSCOPE_HOST_KERNELS"


class FusedKernelWarning(RuntimeWarning):
    """A fused kernel cannot run on a device (or failed its self-test): its torch twin runs."""


class CudaFaultError(RuntimeError):
    """A kernel faulted (e.g. an illegal address) and left the device's CUDA context unusable.

    Nothing can run on that device any more in this process, neither the kernel nor its twin;
    the only remedy is to restart the program.
    """


@dataclass(frozen=True)
class KernelPath:
    """Which implementation of an op runs on a device, and why.

    Attributes
    ----------
    path : str
        ``"kernel"`` (CUDA), ``"host"`` (g++ emulation) or ``"twin"`` (torch).
    reason : str
        Plain words, e.g. ``"verified against the twin"`` or ``"CuPy is not installed ..."``.
    """

    path: str
    reason: str

    def describe(self) -> str:
        """E.g. ``"fused kernel (verified against the twin)"``."""
        name = {"kernel": "fused kernel", "host": "host-emulated kernel", "twin": "torch twin"}
        return f"{name.get(self.path, self.path)} ({self.reason})"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip() not in ("", "0")


def kill_switch_active() -> bool:
    """Whether ``NAPARI_GPUSCOPE_NO_FUSED`` is set (to anything but ``""`` or ``"0"``)."""
    return _flag(KILL_SWITCH_ENV)


def host_kernels_requested() -> bool:
    """Whether ``NAPARI_GPUSCOPE_HOST_KERNELS`` asks to emulate kernels on CPU tensors."""
    return _flag(HOST_KERNELS_ENV)


def default_backend_factory(device: torch.device) -> Backend:
    """CuPy for CUDA devices, g++ host emulation for the CPU."""
    if device.type == "cuda":
        return CupyBackend(device)
    return HostBackend()


class CountedOp(Protocol):
    """What a bound op needs of its :class:`~._dispatch.FusedOp` (a protocol, so this module
    does not import the dispatch that imports it)."""

    name: str
    calls: Counter[str]


class BoundOp:
    """An op with its path decided for one set of tensors: calling it skips the dispatch.

    Returned by :meth:`FusedOp.bind`. On CUDA it launches on the stream that was current when
    it was bound; bind again after anything that may change torch's current stream (a solver
    binds once per block of iterations, between its yields).

    Attributes
    ----------
    op : FusedOp
        The op (typed by the :class:`CountedOp` part of it used here).
    path : KernelPath
    """

    __slots__ = ("_run", "op", "path")

    def __init__(self, op: CountedOp, path: KernelPath, run: Callable[..., None]) -> None:
        self.op = op
        self.path = path
        self._run = run

    def __call__(self, *args: object, **kwargs: object) -> None:
        self.op.calls[self.path.path] += 1
        self._run(*args, **kwargs)

    def __repr__(self) -> str:
        return f"BoundOp({self.op.name!r}, {self.path.describe()})"
