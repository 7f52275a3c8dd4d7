"""Chambolle's (2004) projection, operation for operation as scikit-image implements it."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..jobs import is_stop
from . import _ops as ops
from ._solvers import CHECK_EVERY, Solver, SolveResult, Tick, per_problem_sum, relative_gaps

__all__ = ["solve_chambolle"]


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
        data_term = per_problem_sum(torch.mul(d, d, out=product))
        tv_term = per_problem_sum(norm)
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
            gap = per_problem_sum(weight * norm + (p * g).sum(0))
            primal = 0.5 * data_term + weight * tv_term
            rel = relative_gaps(gap, primal)
        if new.any():
            result[new] = out[new]
            final_gap[new] = rel[new]
            done |= new
        iterations = i + 1
        if bool(done.all()):
            break
        if (i + 1) % check_every == 0:
            command = yield Tick(iterations, float(rel[~done].max()), out)
            if is_stop(command):  # keep the current estimate of every unfinished problem
                result[~done] = out[~done]
                final_gap[~done] = rel[~done]
                return SolveResult(result, iterations, float(final_gap.max()), False, True)
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
