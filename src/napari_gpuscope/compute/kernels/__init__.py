"""Fused CUDA kernels with torch twins, verifiable without a GPU.

Each fused operation is a :class:`FusedOp`: a small *launcher* that runs a kernel from a ``.cu``
file (kept beside its method's torch twins, e.g. ``compute/tv/tv_fgp.cu``), paired with a pure-
torch *twin* with the same in-place semantics. The ``.cu`` files ship as package data and follow
one set of rules: ``extern "C" __global__`` kernels, one thread per output element with a grid-
stride loop (over a ``long long`` count, or a 32-bit one in the ``*_u32`` variants a launcher
picks when every index fits, as in ``tv_fgp.cu``), no ``#include``, no shared memory and no
atomics. That keeps them valid for NVRTC, ``nvcc`` and g++ alike.

Dispatch
--------
``op(*args, **kwargs)`` looks at the tensors among the arguments:

1. ``NAPARI_GPUSCOPE_NO_FUSED`` set (anything but ``""``/``"0"``) -> the torch twin;
2. all tensors CUDA, float32, contiguous, on one device, and CuPy usable there
   (:func:`~napari_gpuscope.compute.devices.cupy_status`) -> the kernel, compiled with
   ``cupy.RawModule`` (NVRTC) once per device, and launched with raw device pointers on torch's
   current stream (:class:`CupyBackend`);
3. ``NAPARI_GPUSCOPE_HOST_KERNELS=1``, all tensors CPU float32 contiguous, and g++ on PATH ->
   the same kernel source emulated on the CPU (:class:`HostBackend`), so tests can run a whole
   solver through the real kernels;
4. otherwise -> the twin.

Paths 2 and 3 first run a self-test on the op's small example inputs, once per device: the
kernel's outputs must match the twin's within the op's tolerances (on CUDA, on a non-default
stream arranged so that a kernel launched on the wrong stream fails). A mismatch disables the
kernel on that device, an environment that cannot build it (no usable CuPy, no NVRTC, a compile
error) makes it unavailable there; either way with one :class:`FusedKernelWarning`, and the twin
runs from then on. Out-of-memory and unexpected errors propagate (nothing is remembered), and a
kernel fault that breaks the CUDA context raises :class:`CudaFaultError`. ``op.calls`` counts
the paths taken; :func:`path_report` says which path each op took on each device and why, for
provenance.

Speed: :meth:`FusedOp.bind` decides the path once for a set of tensors and returns a callable
that launches without the dispatch (a solver binds once per block of iterations); kernels are
cached per device and take raw pointers, so a launch costs ~10-20 us of host time.

Verification on the CPU
-----------------------
No GPU is needed to check a kernel. :class:`HostBackend` compiles the unchanged ``.cu`` file with
``g++ -include host_shim.h``; the shim maps ``__global__``, ``__device__``, ``threadIdx``,
``blockIdx``, ``blockDim``, ``gridDim`` and CUDA math built-ins onto plain C++ and adds a ctypes
entry point per kernel that loops over the grid (optionally in reverse, to expose kernels whose
threads read what other threads write) and checks each argument against the kernel's C
parameter types. Tests compare every kernel with its twin this way and compile every ``.cu``
file with ``nvcc -ptx`` (:func:`nvcc_compile_check`) when nvcc is installed.

Writing an op
-------------
::

    SOURCE = KernelSource("axpby.cu")

    def _launch(backend, x, y, out, a, b):
        fn = backend.function(SOURCE, "axpby")
        backend.launch(fn, out.numel(), (backend.array(x), backend.array(y), backend.array(out),
                                         np.float32(a), np.float32(b), np.int64(out.numel())))

    axpby = FusedOp("axpby", launch=_launch, twin=_twin, example=_example, outputs=(2,))

Define ops at module level (``name = FusedOp(...)`` at the start of a line) in a module under
``compute/``: :func:`registered_ops` finds them by reading the sources (:func:`op_modules`) and
imports those modules, so warm-ups and the GPU kit (``benchmarks/gpu_kit.py plan``) cover every
method's ops without a list to maintain. Each op knows the kernels it can launch
(:attr:`FusedOp.kernel_names`): read from the launcher's ``backend.function(SOURCE, "name")``
calls (a literal name, or an f-string's fixed prefix for families of variants), or declared with
``FusedOp(..., kernels=(...))`` when the launcher builds the names elsewhere. A CPU test checks
that every ``__global__`` kernel of every ``.cu`` file belongs to some registered op and that
each op's example launches only the kernels it names.
"""

from ._backends import (
    BLOCK_SIZE,
    MAX_BLOCKS,
    Backend,
    CupyBackend,
    HostBackend,
    HostFunction,
    KernelCompileError,
    grid_size,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)
from ._dispatch import (
    HOST_KERNELS_ENV,
    KILL_SWITCH_ENV,
    BoundOp,
    CudaFaultError,
    FusedKernelWarning,
    FusedOp,
    KernelPath,
    default_backend_factory,
    host_kernels_requested,
    kill_switch_active,
)
from ._registry import ops_under, path_report, registered_ops, warm_up
from ._source import (
    COMPUTE_DIR,
    KERNEL_DIR,
    KernelSource,
    kernel_files,
    kernels_named_in,
    op_modules,
)

__all__ = [
    "BLOCK_SIZE",
    "COMPUTE_DIR",
    "HOST_KERNELS_ENV",
    "KERNEL_DIR",
    "KILL_SWITCH_ENV",
    "MAX_BLOCKS",
    "Backend",
    "BoundOp",
    "CudaFaultError",
    "CupyBackend",
    "FusedKernelWarning",
    "FusedOp",
    "HostBackend",
    "HostFunction",
    "KernelCompileError",
    "KernelPath",
    "KernelSource",
    "default_backend_factory",
    "grid_size",
    "host_emulation_available",
    "host_kernels_requested",
    "kernel_files",
    "kernels_named_in",
    "kill_switch_active",
    "nvcc_available",
    "nvcc_compile_check",
    "op_modules",
    "ops_under",
    "path_report",
    "registered_ops",
    "warm_up",
]
