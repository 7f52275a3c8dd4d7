"""FusedOp: run a fused kernel when it can and is verified, its torch twin otherwise."""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from ..devices import cupy_available
from ..jobs import Job, Progress
from ._backends import Backend, CupyBackend, HostBackend, host_emulation_available

__all__ = [
    "HOST_KERNELS_ENV",
    "KILL_SWITCH_ENV",
    "FusedKernelWarning",
    "FusedOp",
    "default_backend_factory",
    "host_kernels_requested",
    "kill_switch_active",
    "registered_ops",
    "warm_up",
]

KILL_SWITCH_ENV = "NAPARI_GPUSCOPE_NO_FUSED"
HOST_KERNELS_ENV = "NAPARI_GPUSCOPE_HOST_KERNELS"

Example = Callable[[torch.device, torch.Generator], tuple[tuple[Any, ...], dict[str, Any]]]


_REGISTERED: weakref.WeakSet[FusedOp] = weakref.WeakSet()
"""Every live FusedOp (ops register themselves when their module is imported; throw-away ops
built by tests disappear with their last reference)."""


def registered_ops() -> tuple[FusedOp, ...]:
    """The fused operations defined by the compute modules imported so far, by name."""
    return tuple(sorted(_REGISTERED, key=lambda op: op.name))


def warm_up(device: str | torch.device) -> Job[dict[str, bool]]:
    """Compile and self-test every registered kernel on ``device``, as a job.

    A dock runs it when a device is selected, so the first preview does not pay the NVRTC
    compile (1-3 s). The job's result maps each op name to whether its fused kernel will run.

    Examples
    --------
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> isinstance(run_job(warm_up("cpu")), dict)
    True
    """
    ops = registered_ops()
    ready: dict[str, bool] = {}
    for index, op in enumerate(ops):
        yield Progress(index / max(1, len(ops)), f"preparing GPU kernel {op.name}")
        ready[op.name] = op.prepare(torch.device(device))
    return ready


class FusedKernelWarning(RuntimeWarning):
    """A fused kernel failed its self-test on a device and was replaced by its torch twin."""


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


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list | tuple):
        return type(value)(_clone(item) for item in value)
    if isinstance(value, Mapping):
        return {key: _clone(item) for key, item in value.items()}
    return value


class FusedOp:
    """A fused kernel launcher paired with a pure-torch twin that has the same semantics.

    Parameters
    ----------
    name : str
        Used in warnings, e.g. ``"axpby"``.
    launch : callable
        ``launch(backend, *args, **kwargs) -> None``: fetches the kernel with
        ``backend.function(source, name)`` and launches it; writes the outputs in place.
    twin : callable
        ``twin(*args, **kwargs) -> None``: pure torch, same in-place semantics. It runs on
        any device and is the reference the kernel is checked against.
    example : callable
        ``example(device, generator) -> (args, kwargs)``: small random inputs for the self-test,
        drawn on the CPU with ``generator`` (a CPU generator) and moved to ``device``.
    outputs : sequence of int or str
        The arguments that hold outputs: positional indices, or keyword names.
    rtol, atol : float
        Tolerances of the self-test comparison (``torch.allclose``).
    backend_factory : callable, optional
        ``factory(device) -> Backend``; defaults to :func:`default_backend_factory`. Tests
        replace it to exercise the self-test failure path.

    Notes
    -----
    ``op(*args, **kwargs)`` picks a path from the tensors among the arguments:

    1. the kill switch ``NAPARI_GPUSCOPE_NO_FUSED`` is set -> twin;
    2. all tensors CUDA, float32, contiguous, on one device and CuPy importable -> kernel;
    3. ``NAPARI_GPUSCOPE_HOST_KERNELS`` is set, all tensors CPU float32 contiguous and g++ on
       PATH -> the same kernel source emulated on the CPU ("host");
    4. otherwise -> twin.

    Paths 2 and 3 run a self-test against the twin at first use per device; on failure (or a
    compile error) the kernel is disabled on that device with one :class:`FusedKernelWarning`.
    """

    def __init__(
        self,
        name: str,
        launch: Callable[..., None],
        twin: Callable[..., None],
        example: Example,
        outputs: Sequence[int | str],
        rtol: float = 1e-5,
        atol: float = 1e-6,
        backend_factory: Callable[[torch.device], Backend] | None = None,
    ) -> None:
        self.name = name
        self.launch = launch
        self.twin = twin
        self.example = example
        self.outputs = tuple(outputs)
        self.rtol = rtol
        self.atol = atol
        self.backend_factory = backend_factory or default_backend_factory
        self.calls: Counter[str] = Counter()
        self.disabled_devices: set[str] = set()
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        _REGISTERED.add(self)

    def __repr__(self) -> str:
        return f"FusedOp({self.name!r})"

    def reset(self) -> None:
        """Forget self-test results, cached backends and call counts (for tests)."""
        with self._lock:
            self._backends.clear()
            self.disabled_devices.clear()
            self.calls.clear()

    # ---- dispatch ---------------------------------------------------------------------------

    def select_device(self, *args: Any, **kwargs: Any) -> torch.device | None:
        """The device whose fused path ``op(*args, **kwargs)`` would try, or None for the twin.

        Rules 1-4 of the class notes, without the self-test.
        """
        if kill_switch_active():
            return None
        tensors = list(_tensors((args, kwargs)))
        if not tensors:
            return None
        device = tensors[0].device
        if not all(
            t.device == device and t.dtype == torch.float32 and t.is_contiguous() for t in tensors
        ):
            return None
        if device.type == "cuda":
            return device if cupy_available() else None
        if device.type == "cpu" and host_kernels_requested() and host_emulation_available():
            return device
        return None

    def prepare(self, device: torch.device) -> bool:
        """Compile and self-test the kernel on ``device`` now (no-op for the twin path).

        Returns
        -------
        bool
            Whether the fused kernel will run on ``device``.
        """
        device = torch.device(device)
        wanted = (device.type == "cuda" and cupy_available()) or (
            device.type == "cpu" and host_kernels_requested() and host_emulation_available()
        )
        if kill_switch_active() or not wanted:
            return False
        return self._verified_backend(device) is not None

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        device = self.select_device(*args, **kwargs)
        backend = self._verified_backend(device) if device is not None else None
        if backend is None:
            self.calls["twin"] += 1
            self.twin(*args, **kwargs)
            return
        self.calls["kernel" if device.type == "cuda" else "host"] += 1
        self.launch(backend, *args, **kwargs)

    def run_on(self, backend: Backend, *args: Any, **kwargs: Any) -> None:
        """Launch the kernel on ``backend`` with no dispatch and no self-test (tests)."""
        self.calls["host" if isinstance(backend, HostBackend) else "kernel"] += 1
        self.launch(backend, *args, **kwargs)

    # ---- self-test --------------------------------------------------------------------------

    def _verified_backend(self, device: torch.device) -> Backend | None:
        key = str(device)
        with self._lock:  # one self-test per device, even with several worker threads
            if key in self.disabled_devices:
                return None
            backend = self._backends.get(key)
            if backend is not None:
                return backend
            try:
                backend = self.backend_factory(device)
                ok, detail = self.self_test(backend, device)
            except Exception as exc:  # a backend that cannot even be built counts as failure
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            if not ok:
                self.disabled_devices.add(key)
                warnings.warn(
                    f"fused kernel {self.name!r} disabled on {key}: {detail}; using the torch twin",
                    FusedKernelWarning,
                    stacklevel=3,  # the caller of op(...),
                )
                return None
            self._backends[key] = backend
            return backend

    def self_test(self, backend: Backend, device: torch.device) -> tuple[bool, str]:
        """Compare the kernel on ``backend`` with the twin on the op's example inputs.

        Returns
        -------
        ok : bool
            Whether every output matched within ``rtol``/``atol``.
        detail : str
            ``"max abs diff X vs twin"``, or the exception the kernel raised (e.g. a compile
            error).
        """
        # A CPU generator on every device: examples draw on the host and move to ``device``, so
        # the same seed gives the same inputs everywhere (a CUDA generator cannot fill CPU
        # tensors, and CUDA tensors need no generator of their own).
        generator = torch.Generator().manual_seed(0)
        args, kwargs = self.example(device, generator)
        twin_args, twin_kwargs = _clone(args), _clone(kwargs)
        kernel_args, kernel_kwargs = _clone(args), _clone(kwargs)
        self.twin(*twin_args, **twin_kwargs)
        try:
            self.launch(backend, *kernel_args, **kernel_kwargs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as exc:
            return False, f"self-test raised {type(exc).__name__}: {exc}"
        worst = 0.0
        ok = True
        for output in self.outputs:
            expected, got = (
                (twin_kwargs[output], kernel_kwargs[output])
                if isinstance(output, str)
                else (twin_args[output], kernel_args[output])
            )
            if expected.shape != got.shape:
                shapes = f"{tuple(got.shape)} vs twin {tuple(expected.shape)}"
                return False, f"output {output!r} has shape {shapes}"
            if expected.numel() == 0:
                continue
            if not torch.allclose(got, expected, rtol=self.rtol, atol=self.atol, equal_nan=True):
                ok = False
            if bool((got.isnan() != expected.isnan()).any()):
                worst = float("nan")
            elif worst == worst:  # not already NaN
                worst = max(
                    worst, float((got.double() - expected.double()).abs().nan_to_num(0).max())
                )
        return ok, f"max abs diff {worst:.3g} vs twin"
