"""The demo fused op: ``out = a * x + b * y`` (kernel ``axpby.cu``).

It exists to exercise the kernel machinery end to end (dispatch, self-test, host emulation,
nvcc check) with the simplest possible kernel, and as a template for real ops.
"""

from __future__ import annotations

import numpy as np
import torch

from . import Backend, FusedOp, KernelSource

__all__ = ["SOURCE", "axpby", "axpby_twin"]

SOURCE = KernelSource("axpby.cu")


def _check(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if not x.shape == y.shape == out.shape:
        raise ValueError(
            f"shapes differ: x {tuple(x.shape)}, y {tuple(y.shape)}, out {tuple(out.shape)}"
        )


def _launch(
    backend: Backend, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, a: float, b: float
) -> None:
    _check(x, y, out)
    kernel = backend.function(SOURCE, "axpby")
    n = out.numel()
    backend.launch(
        kernel,
        n,
        [
            backend.array(x),
            backend.array(y),
            backend.array(out),
            np.float32(a),
            np.float32(b),
            np.int64(n),
        ],
    )


def axpby_twin(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, a: float, b: float) -> None:
    """Torch twin of the kernel: ``out[...] = a * x + b * y`` (any device and dtype)."""
    _check(x, y, out)
    torch.add(x * a, y, alpha=b, out=out)


def _example(
    device: torch.device, generator: torch.Generator
) -> tuple[tuple[object, ...], dict[str, object]]:
    # 1000 elements: not a multiple of the block size, so the bounds check is exercised too.
    x = torch.randn(1000, generator=generator).to(device)
    y = torch.randn(1000, generator=generator).to(device)
    out = torch.empty(1000, device=device)
    return (x, y, out, 1.5, -0.25), {}


axpby = FusedOp(
    name="axpby",
    launch=_launch,
    twin=axpby_twin,
    example=_example,
    outputs=(2,),
)
"""``axpby(x, y, out, a, b)`` writes ``a * x + b * y`` into ``out`` (kernel or twin)."""
