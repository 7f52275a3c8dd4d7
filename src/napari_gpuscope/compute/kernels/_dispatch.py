"""FusedOp: run a fused kernel when it can and is verified, its torch twin otherwise.

The path decision and its memory per device live here; the paths, the environment's switches
and the op bound to a path are :mod:`._path`, the self-test that verifies a kernel is
:mod:`._selftest`, the walk over an op's (nested) arguments :mod:`._structure`, and the
registry of every op (warm-ups, provenance reports) :mod:`._registry`.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import torch

from ..devices import cupy_status
from ..memory import is_out_of_memory
from ._backends import Backend, HostBackend, KernelCompileError, host_emulation_available
from ._path import (
    HOST_KERNELS_ENV,
    KILL_SWITCH_ENV,
    BoundOp,
    CudaFaultError,
    FusedKernelWarning,
    KernelPath,
    default_backend_factory,
    host_kernels_requested,
    kill_switch_active,
)
from ._selftest import Example, Launch, self_test
from ._source import kernels_named_in
from ._structure import Output, is_structure, output_of, tensors

__all__ = [
    "HOST_KERNELS_ENV",
    "KILL_SWITCH_ENV",
    "BoundOp",
    "CudaFaultError",
    "FusedKernelWarning",
    "FusedOp",
    "KernelPath",
    "default_backend_factory",
    "host_kernels_requested",
    "kill_switch_active",
]


SELF_TEST_DELAY_CYCLES = 20_000_000
"""GPU clock cycles the self-test's stream spins before its inputs are written (~10 ms)."""


_LIVE: weakref.WeakSet[FusedOp] = weakref.WeakSet()
"""Every live FusedOp, registered or not (what :func:`path_report` reports on)."""

_REGISTERED: weakref.WeakSet[FusedOp] = weakref.WeakSet()
"""Ops built with ``register=True`` outside the compute package's modules (a plug-in's)."""


_warned_lock = threading.Lock()
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Warn about the environment once per process (every op and call would repeat it)."""
    with _warned_lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(message, FusedKernelWarning, stacklevel=4)


_broken_devices: dict[str, str] = {}


def _context_is_broken(device: torch.device) -> bool:
    """Whether a CUDA device's context stopped running work (a sticky fault makes every call
    fail); always False for other devices."""
    if device.type != "cuda":
        return False
    try:
        torch.cuda.synchronize(device)
        return float(torch.ones(1, device=device).sum()) != 1.0
    except Exception:
        return True


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
    outputs : sequence of int, str or (int or str, str)
        The arguments that hold outputs: positional indices, keyword names, or a field of
        one (``(0, "sparse")``: field ``sparse`` of a state dataclass passed first).
    rtol, atol : float
        Tolerances of the self-test comparison (``torch.allclose``).
    backend_factory : callable, optional
        ``factory(device) -> Backend``; defaults to :func:`default_backend_factory`. Tests
        replace it to exercise the self-test failure path.
    kernels : sequence of str, optional
        The ``__global__`` kernels ``launch`` can run. Default: read from the launcher's code
        (:func:`~napari_gpuscope.compute.kernels.kernels_named_in`); declare them when the
        launcher builds its kernel names in a helper.
    register : bool
        Add the op to :func:`registered_ops` even though it is not defined at module level in
        the compute package (whose ops are found without this). Default False: ops built in
        functions and tests stay out of warm-ups and the GPU kit.

    Notes
    -----
    ``op(*args, **kwargs)`` picks a path from the tensors among the arguments:

    1. the kill switch ``NAPARI_GPUSCOPE_NO_FUSED`` is set -> twin;
    2. all tensors CUDA, float32, contiguous, on one device and CuPy usable there -> kernel;
    3. ``NAPARI_GPUSCOPE_HOST_KERNELS`` is set, all tensors CPU float32 contiguous and g++ on
       PATH -> the same kernel source emulated on the CPU ("host");
    4. otherwise -> twin.

    Paths 2 and 3 run a self-test against the twin at first use per device. Its outcome:

    - outputs match: the kernel runs from then on;
    - outputs differ: the kernel is *disabled* on that device, with one
      :class:`FusedKernelWarning` giving the largest difference;
    - the kernel cannot be built there (no or unusable CuPy, no NVRTC, a compile error): the
      kernel is *unavailable* there, with one warning saying why and how to fix it;
    - out of memory, or any other error: re-raised, nothing is remembered, the next call tries
      again;
    - the kernel faulted and broke the CUDA context: :class:`CudaFaultError`, and every later
      call on that device raises it too (the twin cannot run on a broken context either).

    Either way the twin keeps results right. :meth:`path` says what runs where and why;
    :func:`path_report` collects it for provenance.
    """

    def __init__(
        self,
        name: str,
        launch: Launch,
        twin: Callable[..., None],
        example: Example,
        outputs: Sequence[Output],
        rtol: float = 1e-5,
        atol: float = 1e-6,
        backend_factory: Callable[[torch.device], Backend] | None = None,
        kernels: Sequence[str] | None = None,
        register: bool = False,
    ) -> None:
        self.name = name
        self.launch = launch
        self.twin = twin
        self.example = example
        self.outputs: tuple[Output, ...] = tuple(outputs)
        self.rtol = rtol
        self.atol = atol
        self.backend_factory = backend_factory or default_backend_factory
        self.calls: Counter[str] = Counter()
        self.disabled_devices: set[str] = set()
        self.unavailable: dict[str, str] = {}
        self.last_paths: dict[str, KernelPath] = {}
        self._backends: dict[str, Backend] = {}
        self._verdicts: dict[str, str] = {}
        self._lock = threading.Lock()
        self._kernels = None if kernels is None else tuple(kernels)
        _LIVE.add(self)
        if register:
            _REGISTERED.add(self)

    def __repr__(self) -> str:
        return f"FusedOp({self.name!r})"

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """The ``__global__`` kernels this op's launcher can run (declared or read from it)."""
        if self._kernels is None:
            self._kernels = kernels_named_in(self.launch)
        return self._kernels

    @property
    def module(self) -> str:
        """The module that defines the op's launcher, e.g. ``"napari_gpuscope.compute.tv._ops"``."""
        return str(getattr(self.launch, "__module__", "") or "")

    def reset(self) -> None:
        """Forget self-test results, cached backends, paths and call counts (for tests)."""
        with self._lock:
            self._backends.clear()
            self._verdicts.clear()
            self.disabled_devices.clear()
            self.unavailable.clear()
            self.last_paths.clear()
            self.calls.clear()

    # ---- dispatch ---------------------------------------------------------------------------

    def _candidate(self, tensors: Sequence[torch.Tensor]) -> tuple[torch.device | None, str]:
        """The device whose fused path the tensors allow, or None and the reason for the twin."""
        if kill_switch_active():
            return None, f"{KILL_SWITCH_ENV} is set"
        if not tensors:
            return None, "no tensor arguments"
        device = tensors[0].device
        for t in tensors:
            if t.device != device:
                return None, "tensors on several devices"
            if t.dtype != torch.float32:
                return None, f"a {t.dtype} tensor (kernels take float32)"
            if not t.is_contiguous():
                return None, "a non-contiguous tensor"
        if device.type == "cuda":
            usable, detail = cupy_status(device)
            if not usable:
                _warn_once(f"fused CUDA kernels are off, the torch twins run: {detail}")
                return None, detail
            return device, ""
        if device.type == "cpu":
            if not host_kernels_requested():
                return None, "CPU reference path"
            if not host_emulation_available():
                return None, f"{HOST_KERNELS_ENV} is set but no C++ compiler is on PATH"
            return device, ""
        return None, f"no kernels for {device.type} devices"

    def select_device(self, *args: object, **kwargs: object) -> torch.device | None:
        """The device whose fused path ``op(*args, **kwargs)`` would try, or None for the twin.

        Rules 1-4 of the class notes, without the self-test.
        """
        return self._candidate(list(tensors((args, kwargs))))[0]

    def path(self, device: str | torch.device) -> KernelPath:
        """What a call with float32 contiguous tensors on ``device`` runs, and why.

        Runs the self-test first if it has not run on ``device`` yet.
        """
        return self._decide([_placeholder(torch.device(device))])[0]

    def bind(self, *args: object, **kwargs: object) -> BoundOp:
        """Decide the path for calls on these arguments (and arguments like them) once.

        Parameters
        ----------
        *args, **kwargs
            The tensors the calls will pass, or structures holding them (a state dataclass,
            tuples, mappings): the device, dtype and layout of every tensor decide. Any other
            argument is taken as a tensor (so pass only tensors and structures).

        Returns
        -------
        BoundOp
            Callable like the op itself, without the per-call dispatch.
        """
        found = [
            item
            for value in (*args, *kwargs.values())
            for item in (tensors(value) if is_structure(value) else (value,))
        ]
        path, backend = self._decide(found)
        if backend is None:
            return BoundOp(self, path, self.twin)
        bound = getattr(backend, "on_current_stream", None)
        backend = bound() if bound is not None else backend
        launch = self.launch

        def run(*args: object, **kwargs: object) -> None:
            launch(backend, *args, **kwargs)

        return BoundOp(self, path, run)

    def _decide(self, tensors: Sequence[torch.Tensor]) -> tuple[KernelPath, Backend | None]:
        device, reason = self._candidate(tensors)
        if device is None:
            where = str(tensors[0].device) if tensors else "none"
            path = KernelPath("twin", reason)
            self.last_paths[where] = path
            return path, None
        key = str(device)
        broken = _broken_devices.get(key)
        if broken is not None:
            raise CudaFaultError(broken)
        backend = self._verified_backend(device)
        if backend is None:
            path = KernelPath("twin", self._verdicts[key])
        else:
            path = KernelPath("kernel" if device.type == "cuda" else "host", self._verdicts[key])
        self.last_paths[key] = path
        return path, backend

    def prepare(self, device: str | torch.device) -> bool:
        """Compile and self-test the kernel on ``device`` now (no-op for the twin path).

        Returns
        -------
        bool
            Whether the fused kernel will run on ``device``.
        """
        return self.path(device).path != "twin"

    def __call__(self, *args: object, **kwargs: object) -> None:
        self.bind(*tensors((args, kwargs)))(*args, **kwargs)

    def run_on(self, backend: Backend, *args: object, **kwargs: object) -> None:
        """Launch the kernel on ``backend`` with no dispatch and no self-test (tests)."""
        self.calls["host" if isinstance(backend, HostBackend) else "kernel"] += 1
        self.launch(backend, *args, **kwargs)

    # ---- self-test --------------------------------------------------------------------------

    def _verified_backend(self, device: torch.device) -> Backend | None:
        key = str(device)
        backend = self._backends.get(key)
        if backend is not None:
            return backend
        with self._lock:  # one self-test per device, even with several worker threads
            if key in self._verdicts:
                return self._backends.get(key)
            try:
                backend = self.backend_factory(device)
            except Exception as exc:
                self._unavailable(key, f"no kernel backend ({type(exc).__name__}: {exc})")
                return None
            try:
                ok, detail = self.self_test(backend, device)
            except KernelCompileError as exc:
                self._unavailable(key, f"the kernel does not compile here: {exc}")
                return None
            except Exception as exc:
                if not is_out_of_memory(exc):
                    self._check_context(device, exc)
                if type(exc).__module__.startswith("cupy") and not is_out_of_memory(exc):
                    # CUDA runtime or NVRTC missing or too old for this driver: not our bug
                    # and not transient.
                    self._unavailable(key, f"CuPy failed ({type(exc).__name__}: {exc})")
                    return None
                raise  # out of memory or a bug: nothing remembered, the next call retries
            if not ok:
                self.disabled_devices.add(key)
                self._verdicts[key] = f"disabled: self-test mismatch, {detail}"
                _warn_once(
                    f"fused kernel {self.name!r} disabled on {key}: {detail}; using the torch twin"
                )
                return None
            self._verdicts[key] = "verified against the twin"
            self._backends[key] = backend
            return backend

    def _unavailable(self, key: str, reason: str) -> None:
        self.unavailable[key] = reason
        self._verdicts[key] = reason
        warnings.warn(
            f"fused kernel {self.name!r} unavailable on {key}: {reason}; using the torch twin",
            FusedKernelWarning,
            stacklevel=5,
        )

    def _check_context(self, device: torch.device, exc: BaseException) -> None:
        if _context_is_broken(device):
            message = (
                f"fused kernel {self.name!r} faulted on {device} ({type(exc).__name__}: {exc}) "
                "and left the GPU's CUDA context unusable; no further work can run on it in "
                "this process. Restart napari (or the script); set NAPARI_GPUSCOPE_NO_FUSED=1 "
                "to use the torch twins, and please report the fault."
            )
            _broken_devices[str(device)] = message
            raise CudaFaultError(message) from exc

    def self_test(self, backend: Backend, device: torch.device) -> tuple[bool, str]:
        """Compare the kernel on ``backend`` with the twin on the op's example inputs
        (:func:`~._selftest.self_test`): ``(ok, detail)``."""
        return self_test(self, backend, device)

    def outputs_of(
        self, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> tuple[torch.Tensor, ...]:
        """The tensors this op writes, among a call's ``args`` and ``kwargs`` (tests)."""
        return tuple(output_of(args, kwargs, output) for output in self.outputs)


def _placeholder(device: torch.device) -> torch.Tensor:
    """A zero-size float32 tensor standing for "tensors on ``device``" in a path decision."""
    return torch.empty(0, device=device)
