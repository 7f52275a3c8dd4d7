"""FusedOp: run a fused kernel when it can and is verified, its torch twin otherwise."""

from __future__ import annotations

import importlib
import os
import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..devices import cupy_status
from ..jobs import Job, Progress
from ..memory import is_out_of_memory
from ._backends import (
    Backend,
    CupyBackend,
    HostBackend,
    KernelCompileError,
    host_emulation_available,
)
from ._gate import StreamHold
from ._source import kernels_named_in, op_modules

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
    "ops_under",
    "path_report",
    "registered_ops",
    "warm_up",
]

KILL_SWITCH_ENV = "NAPARI_GPUSCOPE_NO_FUSED"
HOST_KERNELS_ENV = "NAPARI_GPUSCOPE_HOST_KERNELS"

SELF_TEST_DELAY_CYCLES = 20_000_000
"""GPU clock cycles the self-test's stream spins before its inputs are written (~10 ms)."""

Example = Callable[[torch.device, torch.Generator], tuple[tuple[Any, ...], dict[str, Any]]]


_LIVE: weakref.WeakSet[FusedOp] = weakref.WeakSet()
"""Every live FusedOp, registered or not (what :func:`path_report` reports on)."""

_REGISTERED: weakref.WeakSet[FusedOp] = weakref.WeakSet()
"""Ops built with ``register=True`` outside the compute package's modules (a plug-in's)."""


def registered_ops() -> tuple[FusedOp, ...]:
    """Every fused operation of every method, by name, whichever modules were imported so far.

    Imports the compute modules that define ops at module level
    (:func:`~napari_gpuscope.compute.kernels.op_modules`, found by reading the sources;
    importing them touches neither CUDA nor CuPy) and returns their ops, plus any op built with
    ``register=True``. Ops built elsewhere (tests' throw-away ops) are not included, so a
    deliberately broken one never reaches a warm-up or the GPU kit's checks.

    Examples
    --------
    >>> names = [op.name for op in registered_ops()]
    >>> "axpby" in names and "fgp_step" in names
    True
    """
    ops = {id(op): op for op in _REGISTERED}
    for name in op_modules():
        module = importlib.import_module(name)
        ops.update((id(v), v) for v in vars(module).values() if isinstance(v, FusedOp))
    return tuple(sorted(ops.values(), key=lambda op: op.name))


def warm_up(
    device: str | torch.device, packages: Sequence[str] | None = None
) -> Job[dict[str, bool]]:
    """Compile and self-test the registered kernels on ``device``, as a job.

    A dock runs it when a device is selected, so the first preview does not pay the NVRTC
    compile (0.3-1.5 s per ``.cu`` file, one compile covering its variants; an H100 took 7.3 s
    for all five files with an empty CuPy cache, 2.5 s with it). The job's result maps each op
    name to whether its fused kernel will run.

    Parameters
    ----------
    device : str or torch.device
        Where to prepare the kernels.
    packages : sequence of str, optional
        Only the ops defined under these module prefixes (a dock passes its method's compute
        package and the platform's ``napari_gpuscope.compute.kernels``); default: every op.

    Examples
    --------
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> isinstance(run_job(warm_up("cpu")), dict)
    True
    """
    ops = ops_under(packages)
    ready: dict[str, bool] = {}
    for index, op in enumerate(ops):
        yield Progress(index / max(1, len(ops)), f"preparing GPU kernel {op.name}")
        ready[op.name] = op.prepare(torch.device(device))
    return ready


def ops_under(packages: Sequence[str] | None = None) -> tuple[FusedOp, ...]:
    """The registered ops whose launcher's module starts with one of ``packages`` (all: None).

    Examples
    --------
    >>> [op.name for op in ops_under(["napari_gpuscope.compute.kernels"])]
    ['axpby']
    """
    ops = registered_ops()
    if packages is None:
        return ops
    prefixes = tuple(packages)
    return tuple(op for op in ops if op.module.startswith(prefixes))


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


def _poisoned_like(value: Any) -> Any:
    """Same structure, every tensor replaced by a NaN-filled one of its shape and device."""
    if isinstance(value, torch.Tensor):
        return torch.full_like(value, float("nan"))
    if isinstance(value, list | tuple):
        return type(value)(_poisoned_like(item) for item in value)
    if isinstance(value, Mapping):
        return {key: _poisoned_like(item) for key, item in value.items()}
    return value


def _copy_into(target: Any, source: Any) -> None:
    """Copy every tensor of ``source`` into the matching tensor of ``target``."""
    for got, want in zip(_tensors(target), _tensors(source), strict=True):
        got.copy_(want)


class BoundOp:
    """An op with its path decided for one set of tensors: calling it skips the dispatch.

    Returned by :meth:`FusedOp.bind`. On CUDA it launches on the stream that was current when
    it was bound; bind again after anything that may change torch's current stream (a solver
    binds once per block of iterations, between its yields).

    Attributes
    ----------
    op : FusedOp
    path : KernelPath
    """

    __slots__ = ("_run", "op", "path")

    def __init__(self, op: FusedOp, path: KernelPath, run: Callable[..., None]) -> None:
        self.op = op
        self.path = path
        self._run = run

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.op.calls[self.path.path] += 1
        self._run(*args, **kwargs)

    def __repr__(self) -> str:
        return f"BoundOp({self.op.name!r}, {self.path.describe()})"


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
        launch: Callable[..., None],
        twin: Callable[..., None],
        example: Example,
        outputs: Sequence[int | str],
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
        self.outputs = tuple(outputs)
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

    def select_device(self, *args: Any, **kwargs: Any) -> torch.device | None:
        """The device whose fused path ``op(*args, **kwargs)`` would try, or None for the twin.

        Rules 1-4 of the class notes, without the self-test.
        """
        return self._candidate(list(_tensors((args, kwargs))))[0]

    def path(self, device: str | torch.device) -> KernelPath:
        """What a call with float32 contiguous tensors on ``device`` runs, and why.

        Runs the self-test first if it has not run on ``device`` yet.
        """
        return self._decide([_placeholder(torch.device(device))])[0]

    def bind(self, *tensors: torch.Tensor) -> BoundOp:
        """Decide the path for calls on ``tensors`` (and tensors like them) once.

        Parameters
        ----------
        *tensors : torch.Tensor
            The tensors the calls will pass (their device, dtype and layout decide).

        Returns
        -------
        BoundOp
            Callable like the op itself, without the per-call dispatch.
        """
        path, backend = self._decide(tensors)
        if backend is None:
            return BoundOp(self, path, self.twin)
        bound = getattr(backend, "on_current_stream", None)
        backend = bound() if bound is not None else backend
        launch = self.launch

        def run(*args: Any, **kwargs: Any) -> None:
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

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.bind(*_tensors((args, kwargs)))(*args, **kwargs)

    def run_on(self, backend: Backend, *args: Any, **kwargs: Any) -> None:
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
        """Compare the kernel on ``backend`` with the twin on the op's example inputs.

        Outputs whose initial values the twin does not read (pure outputs) start as NaN on both
        sides, so an element the kernel never writes shows as a mismatch, and so does a kernel
        that did not run at all (an uninitialised example output may hold the right answer
        from an earlier test: the first H100 run passed a wrong-stream kernel that way).

        On CUDA the kernel is launched once beforehand (the NVRTC compile stays out of the
        test), then the test runs on a fresh stream held by a :class:`StreamHold` until the
        host has launched the kernel: the stream writes the inputs, runs the kernel and
        compares, so a kernel launched on any other stream than torch's current one runs on
        poisoned inputs and fails. Nothing is synchronised between the launch and the
        comparison (which runs on that stream too).

        Returns
        -------
        ok : bool
            Whether every output matched within ``rtol``/``atol``.
        detail : str
            ``"max abs diff X vs twin"`` or what differs.

        Raises
        ------
        Exception
            Whatever the kernel raised (e.g. :class:`KernelCompileError`).
        """
        # A CPU generator on every device: examples draw on the host and move to ``device``, so
        # the same seed gives the same inputs everywhere.
        generator = torch.Generator().manual_seed(0)
        args, kwargs = self.example(device, generator)
        args, kwargs = self._poison_pure_outputs(args, kwargs)
        twin_args, twin_kwargs = _clone(args), _clone(kwargs)
        self.twin(*twin_args, **twin_kwargs)
        kernel_args, kernel_kwargs = _poisoned_like(args), _poisoned_like(kwargs)
        if device.type == "cuda":
            scratch_args, scratch_kwargs = _clone(args), _clone(kwargs)
            with torch.cuda.device(device):
                bound = getattr(backend, "on_current_stream", None)
                self.launch(
                    bound() if bound is not None else backend, *scratch_args, **scratch_kwargs
                )
                torch.cuda.synchronize(device)
            del scratch_args, scratch_kwargs
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))  # the example's copies
            with torch.cuda.device(device), torch.cuda.stream(stream):
                hold = StreamHold(device)
                _copy_into((kernel_args, kernel_kwargs), (args, kwargs))
                bound = getattr(backend, "on_current_stream", None)
                self.launch(
                    bound() if bound is not None else backend, *kernel_args, **kernel_kwargs
                )
                hold.release()
                result = self._compare(twin_args, twin_kwargs, kernel_args, kernel_kwargs)
            return result
        _copy_into((kernel_args, kernel_kwargs), (args, kwargs))
        self.launch(backend, *kernel_args, **kernel_kwargs)
        return self._compare(twin_args, twin_kwargs, kernel_args, kernel_kwargs)

    def _output(self, args: Any, kwargs: Any, output: int | str) -> torch.Tensor:
        return kwargs[output] if isinstance(output, str) else args[output]

    def _poison_pure_outputs(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The example with every output the twin only writes (never reads) set to NaN.

        An output is pure when NaN in it before the call changes none of the twin's outputs;
        in-out arguments (a dual variable updated in place) keep their values. The probe runs
        never read the example's outputs (fresh filled tensors stand in for all of them): a
        pure output is often ``torch.empty``, and copying it would read uninitialised device
        memory (compute-sanitizer's initcheck flags that).
        """

        def trial(nan_output: int | str | None) -> tuple[torch.Tensor, ...]:
            trial_args, trial_kwargs = list(args), dict(kwargs)
            for output in self.outputs:
                like = self._output(args, kwargs, output)
                value = float("nan") if output == nan_output else 0.5
                if isinstance(output, str):
                    trial_kwargs[output] = torch.full_like(like, value)
                else:
                    trial_args[output] = torch.full_like(like, value)
            self.twin(*trial_args, **trial_kwargs)
            return tuple(self._output(trial_args, trial_kwargs, o) for o in self.outputs)

        reference = trial(None)
        args, kwargs = list(args), dict(kwargs)
        for output in self.outputs:
            probed = trial(output)
            if all(
                torch.equal(got.isnan(), want.isnan())
                and torch.allclose(got, want, rtol=0, atol=0, equal_nan=True)
                for got, want in zip(probed, reference, strict=True)
            ):
                poisoned = torch.full_like(self._output(args, kwargs, output), float("nan"))
                if isinstance(output, str):
                    kwargs[output] = poisoned
                else:
                    args[output] = poisoned
        return tuple(args), kwargs

    def _compare(
        self,
        twin_args: tuple[Any, ...],
        twin_kwargs: dict[str, Any],
        kernel_args: tuple[Any, ...],
        kernel_kwargs: dict[str, Any],
    ) -> tuple[bool, str]:
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
        detail = f"max abs diff {worst:.3g} vs twin"
        if worst != worst:
            detail = "NaN where the twin has a number (or the reverse) vs twin"
        return ok, detail


def _placeholder(device: torch.device) -> torch.Tensor:
    """A zero-size float32 tensor standing for "tensors on ``device``" in a path decision."""
    return torch.empty(0, device=device)


def path_report(device: str | torch.device | None = None) -> dict[str, dict[str, str]]:
    """Which implementation each fused op used, and why, for provenance.

    Parameters
    ----------
    device : str or torch.device, optional
        Only this device (e.g. the device a job ran on); default: every device an op was used
        on.

    Returns
    -------
    dict
        ``{op name: {device: "fused kernel (verified against the twin)" | "torch twin
        (<reason>)" | ...}}`` for the ops used so far (per :attr:`FusedOp.last_paths`).

    Examples
    --------
    >>> isinstance(path_report("cpu"), dict)
    True
    """
    wanted = None if device is None else str(torch.device(device))
    report: dict[str, dict[str, str]] = {}
    for op in sorted(_LIVE, key=lambda op: op.name):
        paths = {
            where: path.describe()
            for where, path in sorted(op.last_paths.items())
            if wanted is None or where == wanted
        }
        if paths:
            report[op.name] = paths
    return report
