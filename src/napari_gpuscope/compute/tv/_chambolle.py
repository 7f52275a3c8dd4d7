"""Chambolle's (2004) projection, operation for operation as scikit-image implements it.

Parity is bitwise on float32 data (checked against ``skimage.restoration.denoise_tv_chambolle``
0.26): the same expressions in the same order, each rounded to float32 where NumPy rounds it,
a correctly rounded square root (torch's CPU ``sqrt`` is a vectorised approximation that is
off by one unit in the last place on ~20 % of inputs, enough to drift by 2e-4 over 100
iterations on a noisy image), and the stopping energies summed in float32 in NumPy's pairwise
order (:mod:`._numpy_sum`).

Independent problems of a batch stop on their own: a finished problem is *frozen* (its step
factors become 0, so ``p`` and therefore its output stay exactly those of its stopping
iteration) while the others go on, and the stop masks stay on the device. The host learns that
every problem has finished at a check (every ``CHECK_EVERY`` iterations, one transfer) or,
on CUDA, from a flag copied asynchronously after every iteration; neither changes the result.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..jobs import is_stop
from ._numpy_sum import PairwiseSum
from ._ops import gradient
from ._solvers import CHECK_EVERY, Solver, SolveResult, Tick, per_problem_sum, relative_gaps

__all__ = ["solve_chambolle", "sqrt_rounded_"]

# Elements per float64 block when the device's float32 sqrt is not correctly rounded.
_SQRT_BLOCK = 1 << 18
_SQRT_EXACT: dict[str, bool] = {}


def _sqrt_is_correctly_rounded(device: torch.device) -> bool:
    """Whether torch's float32 ``sqrt`` on this device type rounds like IEEE (cached)."""
    key = device.type
    if key not in _SQRT_EXACT:
        generator = torch.Generator().manual_seed(0)
        probe = torch.rand(1 << 16, generator=generator) * torch.logspace(-6, 6, 1 << 16)
        probe = probe.to(device)
        exact = probe.double().sqrt().float()
        _SQRT_EXACT[key] = bool(torch.equal(probe.sqrt(), exact))
    return _SQRT_EXACT[key]


def sqrt_rounded_(values: torch.Tensor) -> torch.Tensor:
    """In-place float32 square root rounded as IEEE 754 (and NumPy) round it.

    The square root of a float32 computed in float64 and rounded to float32 is correctly
    rounded (float64 has more than twice float32's precision), so devices whose float32 sqrt is
    approximate go through float64 block by block.
    """
    if _sqrt_is_correctly_rounded(values.device):
        return values.sqrt_()
    flat = values.view(-1)
    for block in flat.split(_SQRT_BLOCK):
        block.copy_(block.double().sqrt_())
    return values


class _AllDoneFlag:
    """Whether every problem has finished, learned without stalling the device.

    On CUDA the flag is copied into pinned host memory after each iteration and read once the
    copy has landed (an event query, not a synchronisation). Elsewhere it is read directly.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.host = torch.zeros(1, dtype=torch.bool, pin_memory=True)
            self.event = torch.cuda.Event()
            self.pending = False

    def finished(self, active: torch.Tensor) -> bool:
        """Post the current state; True once a posted state says nothing is active."""
        if not self.cuda:
            return not bool(active.any())
        if self.pending:
            if not self.event.query():
                return False
            self.pending = False
            if bool(self.host[0]):
                return True
        self.host.copy_((~active.any()).view(1), non_blocking=True)
        self.event.record()
        self.pending = True
        return False


def solve_chambolle(
    f: torch.Tensor,
    weight: float,
    spacing: Sequence[float],
    *,
    max_iterations: int,
    eps: float = 2e-4,
) -> Solver:
    """Chambolle's (2004) projection exactly as ``skimage.restoration.denoise_tv_chambolle``.

    Same step ``tau = 1 / (2 sum(s_a^2))`` (``1/(2 ndim)`` for unit weights), same stopping rule
    ``|E_{n-1} - E_n| < eps * E_0`` with ``E = (|u - f|^2 + weight * TV(u)) / N`` in float32
    (NumPy's pairwise sums), evaluated per problem of the batch, and the same output: ``u`` of
    the stopping iteration, computed before that iteration's dual update.

    A problem whose initial energy is 0 (constant along every coupled axis) is solved by ``f``
    itself: scikit-image's rule can never fire there (``eps * E_0 = 0``) and it returns ``f``
    after ``max_iterations``; here it stops at once with the same output.

    The result's ``relative_gap`` is the duality gap of the returned ``u`` with ``y = -p``, for
    information; ``converged`` means the rule fired for every problem (or it was constant);
    ``dual`` is ``y = -p``, which satisfies ``u = f + div y`` and ``|y_i| <= weight``.
    """
    spacing = [float(s) for s in spacing]
    tau = 1.0 / (2.0 * sum(s * s for s in spacing))
    if not (weight > 0 and np.isfinite(np.float32(tau / weight))):
        raise ValueError(
            f"solve_chambolle needs 0 < weight with tau / weight finite in float32, got weight "
            f"{weight!r} and tau {tau!r}"
        )
    batch = f.shape[0]
    per_problem = f[0].numel()
    device = f.device
    total = PairwiseSum(per_problem, device)
    factor_shape = (batch,) + (1,) * len(spacing)
    # Per-problem step factors, float32 like NumPy's scalars; 0 freezes a finished problem
    # (p - 0 * g = p and p / (1 + 0 * norm) = p exactly).
    step = f.new_full(factor_shape, tau)
    shrink = f.new_full(factor_shape, tau / weight)
    weight32 = f.new_tensor(np.float32(weight))
    eps32 = f.new_tensor(np.float32(eps))
    count32 = f.new_tensor(np.float32(per_problem))

    p = f.new_zeros((len(spacing), *f.shape))
    g = torch.empty_like(p)
    d = torch.empty_like(f)
    out = torch.empty_like(f)
    norm = torch.empty_like(f)
    product = torch.empty_like(f)  # rounded products, reused every iteration
    active = torch.ones(batch, dtype=torch.bool, device=device)
    fired = torch.zeros(batch, dtype=torch.bool, device=device)
    stopped_at = torch.zeros(batch, dtype=torch.int64, device=device)
    flag = _AllDoneFlag(device)
    e_init = e_previous = None
    iterations = 0
    stopped = False
    for i in range(max_iterations):
        # d = -div_skimage(p): the sum over axes of s_a * p_a (each product rounded, added in
        # axis order), negated, then the shifted p_a added: NumPy's operations and roundings.
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
        torch.add(f, d, out=out)
        gradient(out, spacing, out=g)
        torch.mul(g[0], g[0], out=norm)
        for a in range(1, len(spacing)):  # not addcmul_, which fuses into one rounding
            norm.add_(torch.mul(g[a], g[a], out=product))
        sqrt_rounded_(norm)
        torch.mul(d, d, out=product)
        energy = total(product.view(batch, -1))
        energy = (energy + weight32 * total(norm.view(batch, -1))) / count32
        if i == 0:
            e_init = energy
            e_previous = energy
            rule = energy == 0  # constant problems: f is the solution (see the docstring)
        else:
            rule = (e_previous - energy).abs() < eps32 * e_init
            e_previous = torch.where(rule, e_previous, energy)
        finishing = rule | (i == max_iterations - 1)
        new = finishing & active
        fired |= rule & active
        stopped_at = torch.where(new, i + 1, stopped_at)
        active &= ~finishing
        iterations = i + 1
        last = i == max_iterations - 1
        if (i + 1) % CHECK_EVERY == 0 or last:
            gaps = _relative_gaps(f, out, p, g, norm, weight, batch)
            pending = torch.where(active, gaps, torch.zeros_like(gaps))
            largest, all_done = torch.stack([pending.max(), (~active.any()).double()]).tolist()
            if all_done:
                break
            command = yield Tick(iterations, largest, out)
            if is_stop(command):  # keep the current estimate of every unfinished problem
                stopped = True
                stopped_at = torch.where(active, i + 1, stopped_at)
                break
        elif flag.finished(active):
            break
        step.masked_fill_(~active.view(factor_shape), 0.0)
        shrink.masked_fill_(~active.view(factor_shape), 0.0)
        norm.mul_(shrink).add_(1.0)
        p.sub_(g.mul_(step)).div_(norm)
    # Frozen problems kept their p, so out and the gap are those of their stopping iteration.
    gaps = _relative_gaps(f, out, p, g, norm, weight, batch)
    largest, used, all_fired = torch.stack(
        [gaps.max(), stopped_at.max().double(), fired.all().double()]
    ).tolist()
    iterations = int(used) if not stopped else iterations
    converged = bool(all_fired) and not stopped
    return SolveResult(out, iterations, largest, converged, stopped, p.neg_())


def _relative_gaps(
    f: torch.Tensor,
    out: torch.Tensor,
    p: torch.Tensor,
    g: torch.Tensor,
    norm: torch.Tensor,
    weight: float,
    batch: int,
) -> torch.Tensor:
    """Per-problem relative duality gap of ``out = f + div y`` with ``y = -p`` (``g`` = grad
    out and ``norm`` = |g|, both from the current iteration, before the dual update), with one
    image-sized temporary."""
    terms = torch.mul(p[0], g[0])
    for a in range(1, p.shape[0]):
        terms.addcmul_(p[a], g[a])
    terms.add_(norm, alpha=weight)  # weight |g| - <y, g>
    gap = per_problem_sum(terms)
    torch.sub(out, f, out=terms)
    data = per_problem_sum(terms.square_())
    primal = 0.5 * data + weight * per_problem_sum(norm)
    return relative_gaps(gap, primal)


def _scaled(values: torch.Tensor, s: float, buffer: torch.Tensor) -> torch.Tensor:
    """``values * s`` rounded to the tensor's dtype (``values`` itself when ``s == 1``), written
    to the front of the contiguous ``buffer``."""
    if s == 1.0:
        return values
    return torch.mul(values, s, out=buffer.view(-1)[: values.numel()].view(values.shape))
