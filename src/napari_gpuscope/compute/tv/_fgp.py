"""FGP (Beck & Teboulle 2009) on the ROF dual, with a certified duality-gap stopping rule."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..jobs import is_stop
from . import _ops as ops
from ._solvers import CHECK_EVERY, Solver, SolveResult, Tick, per_problem_sum, relative_gaps

__all__ = ["solve_fgp"]


def solve_fgp(
    f: torch.Tensor,
    weight: float,
    spacing: Sequence[float],
    *,
    lo: float = -math.inf,
    hi: float = math.inf,
    max_iterations: int = 200,
    tolerance: float = 1e-3,
    check_every: int = CHECK_EVERY,
    y0: torch.Tensor | None = None,
) -> Solver:
    """FGP on the ROF dual with an optional box ``[lo, hi]``.

    Step ``1/L^2`` with ``L^2 = 4 sum(s_a^2)``; stops when the relative duality gap of every
    problem is ``<= tolerance`` (checked every ``check_every`` iterations and at the end) or at
    ``max_iterations``. ``weight`` must be > 0 and at least one ``s_a`` > 0. ``y0`` (shape
    ``(d, *f.shape)``, ``|y0_i| <= weight``) warm-starts the dual.
    """
    spacing = [float(s) for s in spacing]
    l2 = 4.0 * sum(s * s for s in spacing)
    inv_l2 = 1.0 / l2
    y = f.new_zeros((len(spacing), *f.shape)) if y0 is None else y0.clone()
    z = y.clone()
    u = torch.empty_like(f)
    primal = torch.empty_like(f)
    gap = torch.empty_like(f)
    t = 1.0
    relative_gap = math.inf
    iteration = 0
    stopped = False
    for iteration in range(1, max_iterations + 1):
        ops.fgp_primal(f, z, u, spacing=spacing, lo=lo, hi=hi)
        t_next = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        momentum = (t - 1.0) / t_next
        t = t_next
        ops.fgp_dual(u, z, y, spacing=spacing, inv_l2=inv_l2, weight=weight, momentum=momentum)
        if iteration % check_every == 0 or iteration == max_iterations:
            # The certified estimate comes from the dual iterate y, not the extrapolated z.
            ops.fgp_primal(f, y, u, spacing=spacing, lo=lo, hi=hi)
            ops.tv_gap_terms(f, y, u, primal, gap, spacing=spacing, weight=weight)
            rel = relative_gaps(per_problem_sum(gap), per_problem_sum(primal))
            relative_gap = float(rel.max())
            command = yield Tick(iteration, relative_gap, u)
            if relative_gap <= tolerance:
                break
            if is_stop(command):
                stopped = True
                break
    return SolveResult(u, iteration, relative_gap, relative_gap <= tolerance, stopped, y)
