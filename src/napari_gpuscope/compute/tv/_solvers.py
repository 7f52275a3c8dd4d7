"""What the ROF solvers share: their ticks, their result, and the per-problem reductions.

The solvers work on a batch of independent problems ``f`` of shape ``(B, n_0, ..., n_{d-1})``.
Both are generators: they yield a :class:`Tick` regularly (the caller turns it into a progress
update whose preview reads ``Tick.estimate``) and return a :class:`SolveResult`. Sending
:data:`~napari_gpuscope.compute.jobs.STOP` into a solver makes it return its current estimate
(with its certificate) at once. Stopping is decided per problem of the batch: the reported
relative gap is the largest over the batch, so every problem meets the tolerance.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import torch

__all__ = ["CHECK_EVERY", "SolveResult", "Solver", "Tick", "per_problem_sum", "relative_gaps"]

CHECK_EVERY = 10


@dataclass
class Tick:
    """Solver state at a yield (``estimate`` is live solver memory: copy it before resuming)."""

    iteration: int
    relative_gap: float
    estimate: torch.Tensor


@dataclass
class SolveResult:
    """Final estimate and convergence facts of one solve.

    ``dual`` is Chambolle's final dual field ``y = -p`` (None for FGP), which certifies the
    estimate and lets the next chunk of a split volume start next to it. ``stopped`` is True
    when a STOP command ended the solve.
    """

    image: torch.Tensor
    iterations: int
    relative_gap: float
    converged: bool
    stopped: bool = False
    dual: torch.Tensor | None = None


Solver = Generator[Tick, object, SolveResult]


def per_problem_sum(values: torch.Tensor) -> torch.Tensor:
    """float64 sum over everything but the batch axis (axis 0)."""
    return values.reshape(values.shape[0], -1).sum(1, dtype=torch.float64)


def relative_gaps(gap: torch.Tensor, primal: torch.Tensor) -> torch.Tensor:
    """Per-problem gap / primal energy.

    A problem with zero energy and zero gap is solved exactly (0); a zero energy with a positive
    gap is infinitely far (inf), and NaN stays NaN, so that no comparison with a tolerance can
    mistake a broken solve for a converged one.
    """
    gap = gap.clamp_min(0.0)  # the exact gap is >= 0; float32 rounding can dip below (NaN stays)
    rel = gap / primal
    return torch.where((gap == 0) & (primal == 0), torch.zeros_like(rel), rel)
