"""Hold a CUDA stream until the host says go: the self-test's guard against wrong-stream kernels.

The first-use self-test must prove that a kernel runs on torch's current stream. It queues, on a
fresh stream, *hold -> write the inputs -> the kernel -> compare*, and releases the hold only
after the host has launched the kernel. A kernel launched on any other stream therefore runs
while its inputs are still poison, whatever the host's timing (an NVRTC compile, the GIL held by
napari's main thread). A fixed sleep cannot promise that: the first H100 run of the kit saw a
wrong-stream launch pass the self-test because the host took longer than the 10 ms sleep.

The hold is one thread spinning on a flag in pinned host memory (mapped into the device's address
space under unified addressing), so releasing it is a plain host store and needs no CUDA call
that could queue behind the spinning kernel. It gives up after :data:`HOLD_LIMIT_CYCLES`, so a
host that blocks on the device before releasing (a synchronising allocation) costs a short stall
instead of a deadlock; the self-test stays correct either way, only its guarantee weakens.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from ._backends import _StreamHandle

HOLD_LIMIT_CYCLES = 400_000_000
"""GPU clock cycles a hold waits at most for its release (~0.2 s at 2 GHz: after the warm
launch the host needs well under a millisecond; under compute-sanitizer, which serialises
kernels, every self-test pays this once)."""

_GATE_SOURCE = r"""
extern "C" __global__ void stream_hold(const volatile int* flag, const long long limit) {
    const long long start = clock64();
    while (*flag == 0 && clock64() - start < limit) {
    }
}
"""

_lock = threading.Lock()
_kernels: dict[int, Any] = {}


def _hold_kernel(index: int) -> Any:
    import cupy

    with _lock:
        kernel = _kernels.get(index)
        if kernel is None:
            with cupy.cuda.Device(index):
                kernel = cupy.RawKernel(_GATE_SOURCE, "stream_hold")
                kernel.compile()
            _kernels[index] = kernel
        return kernel


class StreamHold:
    """Hold torch's current stream of a CUDA device until :meth:`release`.

    Use as ``hold = StreamHold(device); ...launch...; hold.release()`` inside
    ``torch.cuda.stream(stream)``: work queued on that stream after the hold waits for it.

    Parameters
    ----------
    device : torch.device
        A CUDA device; the hold goes onto its current stream.
    limit_cycles : int
        GPU cycles after which the hold lets go by itself.

    Attributes
    ----------
    method : str
        ``"flag"`` (held until released) or ``"sleep"`` (CuPy could not build the hold: a
        fixed ~10 ms spin, the weaker guarantee).
    """

    def __init__(self, device: torch.device, limit_cycles: int = HOLD_LIMIT_CYCLES) -> None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        # Pinned (page-locked) host memory is mapped into the device's address space under
        # unified addressing: the kernel reads the host's store without a copy.
        self._flag = torch.zeros(1, dtype=torch.int32).pin_memory()
        stream = torch.cuda.current_stream(index)
        try:
            kernel = _hold_kernel(index)
            import cupy

            with cupy.cuda.Device(index):
                # The driver-level function takes any object with the stream's ``ptr``, as
                # CupyBackend's launches do (CuPy 14 deprecates ExternalStream).
                getattr(kernel, "kernel", kernel)(
                    (1,),
                    (1,),
                    (np.uint64(self._flag.data_ptr()), np.int64(limit_cycles)),
                    stream=_StreamHandle(stream.cuda_stream),
                )
            self.method = "flag"
        except Exception:  # no NVRTC for the hold: fall back to a fixed spin
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(20_000_000)
            self.method = "sleep"

    def release(self) -> None:
        """Let the held stream go on (a host store; no CUDA call)."""
        self._flag[0] = 1
