"""What the launchers and torch twins of ``basic_alm.cu`` share: the source file and the twins'
elementwise rules (the shrink as the kernels round it, the update of the active problems only).

The ops are in :mod:`._ops` (the flatfield, sparse and dual steps), :mod:`._ops_status` (the end
of an iteration, one thread per problem) and :mod:`._ops_dark` (the darkfield step).
"""

from __future__ import annotations

import torch

from ..kernels import KernelSource
from ._geometry import dc_scale

__all__ = ["SOURCE"]

SOURCE = KernelSource("basic_alm.cu", beside=__file__)


def _flat_mean(flat_hat: torch.Tensor) -> torch.Tensor:
    p = flat_hat.shape[0]
    return flat_hat.reshape(p, -1)[:, 0] * dc_scale(flat_hat[0].numel())


def _shrink(x: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """``sign(x) max(|x| - threshold, 0)`` as the kernels round it (copysign; NaN stays)."""
    return torch.copysign((x.abs() - threshold).clamp_(min=0), x)


def _where_active(active: torch.Tensor, new: torch.Tensor, out: torch.Tensor) -> None:
    """``out[p] = new[p]`` for the active problems (frozen ones keep their values).

    On the CPU the flags are host memory: with every problem active this is a plain copy (read
    through NumPy, no torch call); on a GPU it never reads them (no sync).
    """
    if out.device.type == "cpu" and active.numpy().all():
        out.copy_(new)
        return
    flags = (active != 0).reshape(-1, *([1] * (out.ndim - 1)))
    torch.where(flags, new, out, out=out)
