"""ROF solvers on a batch of independent problems ``f`` of shape ``(B, n_0, ..., n_{d-1})``.

Both solvers are generators: they yield a :class:`Tick` every ``check_every`` iterations (the
caller turns it into a progress update, possibly with a preview of ``Tick.estimate``) and return
a :class:`SolveResult`. Stopping is decided per problem of the batch: the reported relative gap
is the largest over the batch, so every problem meets the tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import torch

from . import _tv_ops as ops

__all__ = ["SolveResult", "Tick", "solve_chambolle", "solve_fgp"]

CHECK_EVERY = 10


@dataclass
class Tick:
    """Solver state at a convergence check (``estimate`` is live solver memory: copy it now)."""

    iteration: int
    relative_gap: float
    estimate: torch.Tensor


@dataclass
class SolveResult:
    """Final estimate and convergence facts of one solve."""

    image: torch.Tensor
    iterations: int
    relative_gap: float
    converged: bool


Solver = Generator[Tick, None, SolveResult]


def _per_problem_sum(values: torch.Tensor) -> torch.Tensor:
    """float64 sum over everything but the batch axis (axis 0)."""
    return values.reshape(values.shape[0], -1).sum(1, dtype=torch.float64)


def _relative_gaps(gap: torch.Tensor, primal: torch.Tensor) -> torch.Tensor:
    """Per-problem gap / primal energy; a problem with zero energy is solved exactly (0)."""
    gap = gap.clamp_min(0.0)  # the exact gap is >= 0; float32 rounding can dip below
    return torch.where(primal > 0, gap / primal.clamp_min(1e-300), torch.zeros_like(gap))


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
) -> Solver:
    """FGP (Beck & Teboulle 2009) on the ROF dual with an optional box ``[lo, hi]``.

    Step ``1/L^2`` with ``L^2 = 4 sum(s_a^2)``; stops when the relative duality gap of every
    problem is ``<= tolerance`` (checked every ``check_every`` iterations and at the end) or at
    ``max_iterations``. ``weight`` must be > 0 and at least one ``s_a`` > 0.
    """
    spacing = [float(s) for s in spacing]
    l2 = 4.0 * sum(s * s for s in spacing)
    inv_l2 = 1.0 / l2
    y = f.new_zeros((len(spacing), *f.shape))
    z = torch.zeros_like(y)
    u = torch.empty_like(f)
    primal = torch.empty_like(f)
    gap = torch.empty_like(f)
    t = 1.0
    relative_gap = math.inf
    iteration = 0
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
            rel = _relative_gaps(_per_problem_sum(gap), _per_problem_sum(primal))
            relative_gap = float(rel.max())
            yield Tick(iteration, relative_gap, u)
            if relative_gap <= tolerance:
                break
    return SolveResult(u, iteration, relative_gap, relative_gap <= tolerance)


def solve_chambolle(
    f: torch.Tensor,
    weight: float,
    spacing: Sequence[float],
    *,
    max_iterations: int = 200,
    eps: float = 2e-4,
    check_every: int = CHECK_EVERY,
) -> Solver:
    """Chambolle's (2004) projection exactly as ``skimage.restoration.denoise_tv_chambolle``.

    Same step ``tau = 1 / (2 sum(s_a^2))`` (``1/(2 ndim)`` for unit weights), same stopping rule
    ``|E_{n-1} - E_n| < eps * E_0`` with ``E = (|u - f|^2 + weight * TV(u)) / N`` evaluated per
    problem of the batch, and the same output: ``u`` of the last iteration, computed before that
    iteration's dual update. The relative duality gap of the returned ``u`` (with ``y = -p``) is
    reported for information.
    """
    spacing = [float(s) for s in spacing]
    tau = 1.0 / (2.0 * sum(s * s for s in spacing))
    batch = f.shape[0]
    per_problem = f[0].numel()
    p = f.new_zeros((len(spacing), *f.shape))
    result = torch.empty_like(f)
    done = torch.zeros(batch, dtype=torch.bool, device=f.device)
    final_gap = torch.zeros(batch, dtype=torch.float64, device=f.device)
    iterations = 0
    e_init = e_previous = None
    d = torch.empty_like(f)
    product = torch.empty_like(f)  # work buffer for rounded products, reused every iteration
    for i in range(max_iterations):
        # d = -div_skimage(p): same operations and roundings as skimage: the sum over axes of
        # s_a * p_a (each product rounded, added in axis order), negated, then shifted adds.
        torch.mul(p[0], spacing[0], out=d)
        for a in range(1, len(spacing)):
            d.add_(_scaled(p[a], spacing[a], product))
        d.neg_()
        for a, s in enumerate(spacing):
            dim = a + 1
            n = d.shape[dim]
            if n > 1:
                shifted = p[a].narrow(dim, 0, n - 1)
                d.narrow(dim, 1, n - 1).add_(_scaled(shifted, s, product))
        out = f + d
        g = ops.gradient(out, spacing)
        norm = torch.mul(g[0], g[0])
        for a in range(1, len(spacing)):  # not addcmul_, which fuses into one rounding
            norm.add_(torch.mul(g[a], g[a], out=product))
        norm.sqrt_()
        data_term = _per_problem_sum(torch.mul(d, d, out=product))
        tv_term = _per_problem_sum(norm)
        energy = (data_term + weight * tv_term) / per_problem
        last = i == max_iterations - 1
        if i == 0:
            e_init = energy
            e_previous = energy
            stop = torch.zeros_like(done)
        else:
            stop = (e_previous - energy).abs() < eps * e_init
            e_previous = torch.where(stop, e_previous, energy)
        if last:
            stop = torch.ones_like(done)
        new = stop & ~done
        report = new.any() or (i + 1) % check_every == 0
        if report:
            # gap = sum(w |g| - <y, g>) with y = -p (the p that produced `out`).
            gap = _per_problem_sum(weight * norm + (p * g).sum(0))
            primal = 0.5 * data_term + weight * tv_term
            rel = _relative_gaps(gap, primal)
        if new.any():
            result[new] = out[new]
            final_gap[new] = rel[new]
            done |= new
        iterations = i + 1
        if bool(done.all()):
            break
        if (i + 1) % check_every == 0:
            yield Tick(iterations, float(rel[~done].max()), out)
        norm.mul_(tau / weight).add_(1.0)
        p.sub_(g.mul_(tau)).div_(norm)  # g is not needed any more
    relative_gap = float(final_gap.max())
    return SolveResult(result, iterations, relative_gap, iterations < max_iterations)


def _scaled(values: torch.Tensor, s: float, buffer: torch.Tensor) -> torch.Tensor:
    """``values * s`` rounded to the tensor's dtype (``values`` itself when ``s == 1``), written
    to the front of the contiguous ``buffer``."""
    if s == 1.0:
        return values
    return torch.mul(values, s, out=buffer.view(-1)[: values.numel()].view(values.shape))
