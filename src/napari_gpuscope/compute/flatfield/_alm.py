"""The BaSiC fit on the working-size stack: inexact ALM inside a reweighting loop.

BaSiCPy 2.0's approximate mode (the MATLAB ``inexact_alm_rspca_l1``), for a batch of ``P``
independent problems (channels, z-planes, autotune candidates) at once, with its bugs fixed:

- the iteration counter is never overwritten by the darkfield step (BaSiCPy 2.0 returned an
  all-ones flatfield on ~1000-tile stacks with darkfield on);
- reweighting stops on the change of the flatfield *and* of the darkfield (BaSiCPy compared
  the flatfield twice);
- a fit is converged only if the reweighting met its tolerance, the last ALM pass met its
  tolerance and everything is finite;
- the spectral norm comes from a power iteration, not a full SVD.

One ALM pass (:mod:`._alm_loop`) is a generator of its iterations: each is two passes over the
``(P, T, m, n)`` arrays (:mod:`._ops`: ``basic_sparse`` and ``basic_dual``, fused kernels beside
torch twins, ``I_B`` never materialised) and a few small kernels and GEMMs on the ``(P, m, n)``
images: 12 launches (19 with the darkfield) and no host synchronisation; problems that converge
early are frozen inside the kernels. The reweighting loop here (:func:`reweighting_steps`) hands
out a tick between iterations (progress, cancel) and the state after each pass, and can run a
pass's ALM on a few problems at a time (``group_size``: the CPU's autotune), with the same
numbers (bits here; float32 rounding where a CPU sums a smaller batch in another order).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import ParamSpec

import torch

# The pass and its constants live in _alm_loop; tests, the kit and _correct read them here.
from ._alm_loop import (  # noqa: F401
    ENT_DARK,
    MAX_MU_COEF,
    MU_COEF,
    RHO,
    _Dct,
    _StopCheck,
    alm_pass,
    iter_alm_pass,
)
from ._dct import dct2

__all__ = [
    "AlmTick",
    "FitState",
    "auto_smoothness",
    "reweighting_passes",
    "reweighting_steps",
    "spectral_norm",
]

_alm_pass = alm_pass  # the name tests and the kit call one pass by
P = ParamSpec("P")


def auto_smoothness(stack: torch.Tensor) -> torch.Tensor:
    """BaSiCPy's automatic flatfield smoothness: ``sum |DCT(mean image / its mean)| / 800``.

    ``stack`` is ``(P, T, m, n)``; returns ``(P,)``.
    """
    mean_image = stack.mean(dim=1, dtype=torch.float64)
    mean_image = mean_image / mean_image.mean(dim=(-2, -1), keepdim=True)
    return (dct2(mean_image).abs().sum(dim=(-2, -1)) / 800.0).to(stack.dtype)


def spectral_norm(stack: torch.Tensor, iterations: int = 100, rtol: float = 1e-7) -> torch.Tensor:
    """Largest singular value of each problem's ``T x (m n)`` matrix, by power iteration.

    Images of one stack are nearly proportional (rank one plus a little), so the gap between
    the first two singular values is large and a few iterations reach float precision; the
    iteration runs on the small ``T x T`` Gram matrix in float64.
    """
    matrix = stack.reshape(stack.shape[0], stack.shape[1], -1)
    gram = torch.bmm(matrix, matrix.transpose(1, 2)).double()
    vector = torch.ones(gram.shape[0], gram.shape[1], 1, dtype=torch.float64, device=gram.device)
    eigen = torch.zeros(gram.shape[0], dtype=torch.float64, device=gram.device)
    for _ in range(iterations):
        product = torch.bmm(gram, vector)
        norm = torch.linalg.vector_norm(product, dim=(1, 2))
        vector = product / norm.clamp_min(1e-300)[:, None, None]
        converged = bool(((norm - eigen).abs() <= rtol * norm).all())
        eigen = norm
        if converged:
            break
    return eigen.sqrt().to(stack.dtype)


@dataclass
class FitState:
    """What one reweighting pass hands out (all ``P`` problems)."""

    flatfield: torch.Tensor
    """(P, m, n), mean 1."""
    darkfield: torch.Tensor
    """(P, m, n)."""
    baseline: torch.Tensor
    """(P, T): ``B * mean(S)`` in intensity units."""
    offset: torch.Tensor
    """(P,): the flat part ``D_Z`` of the estimated darkfield."""
    alm_iterations: torch.Tensor
    """(P,) inner iterations of this pass."""
    alm_residual: torch.Tensor
    """(P,) ``||residual|| / ||images||`` at the end of this pass."""
    reweight_score: torch.Tensor
    """(P,) change against the previous pass (inf on the first pass)."""
    active: torch.Tensor
    """(P,) bool: still reweighting (False once a problem met the tolerance)."""
    passes: torch.Tensor
    """(P,) reweighting passes run."""


@dataclass(frozen=True)
class AlmTick:
    """Where the reweighting loop is between two ALM iterations (host counts, no sync)."""

    pass_number: int
    """The reweighting pass, from 1 (every problem still reweighting has run this many)."""
    problems: torch.Tensor
    """(K,) int64: the problems of the ALM pass running now (all active ones, or a group)."""
    iteration: int
    """ALM iterations launched so far in this group's pass."""
    group: int
    """Which group of this pass (0-based) runs now."""
    groups: int
    """How many groups this pass runs, one after the other."""


def _ticks(
    steps: Generator[int, None, dict[str, torch.Tensor]], tick: Callable[[int], AlmTick]
) -> Generator[AlmTick, None, dict[str, torch.Tensor]]:
    """An ALM pass's iteration counts as ticks; returns the pass's result."""
    while True:
        try:
            iteration = next(steps)
        except StopIteration as done:
            return done.value
        yield tick(iteration)


def _joined(results: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The groups' results as one pass's, problems in the groups' order."""
    return {key: torch.cat([r[key] for r in results]) for key in results[0]}


def _groups(idx: torch.Tensor, size: int | None) -> list[torch.Tensor]:
    """``idx`` in groups of ``size`` problems, a last group of one joined to the one before
    (a lone problem's reductions split across threads where a batch's do not: same bits)."""
    if size is None or size >= idx.numel():
        return [idx]
    size = max(size, 2)
    bounds = list(range(0, idx.numel(), size))
    if idx.numel() - bounds[-1] == 1:
        bounds.pop()
    return [idx[start:stop] for start, stop in zip(bounds, [*bounds[1:], idx.numel()], strict=True)]


def reweighting_steps(
    stack: torch.Tensor,
    *,
    lam_flat: torch.Tensor,
    lam_dark: torch.Tensor,
    get_darkfield: bool,
    max_iterations: int,
    optimization_tol: float,
    max_reweight_iterations: int,
    reweighting_tol: float,
    epsilon: float,
    fitting_mask: torch.Tensor | None = None,
    group_size: int | None = None,
) -> Iterator[AlmTick | FitState]:
    """Run the reweighting loop on ``stack`` ``(P, T, m, n)``: an :class:`AlmTick` between ALM
    iterations, the :class:`FitState` after each pass.

    Problems that met ``reweighting_tol`` are frozen (their state is carried unchanged).
    ``group_size`` runs each pass's ALM on that many problems at a time (at least 2), one
    group after the other; ``None`` runs every active problem at once. Each problem's ALM is
    independent of the others', so grouping changes the schedule only (on a CPU, a group whose
    stacks fit the caches runs several times faster than the whole batch; on a GPU the whole
    batch fills the device better).

    Examples
    --------
    >>> stack = 100 + 10 * torch.rand(4, 8, 16, 16, generator=torch.Generator().manual_seed(0))
    >>> lam = torch.full((4,), 1.0)
    >>> steps = list(reweighting_steps(
    ...     stack, lam_flat=lam, lam_dark=0.1 * lam, get_darkfield=False, max_iterations=50,
    ...     optimization_tol=1e-4, max_reweight_iterations=2, reweighting_tol=1e-3,
    ...     epsilon=0.1, group_size=2))
    >>> [type(s).__name__ for s in steps if not isinstance(s, AlmTick)]
    ['FitState', 'FitState']
    >>> sorted({tuple(s.problems.tolist()) for s in steps if isinstance(s, AlmTick)})
    [(0, 1), (2, 3)]
    """
    p_count, t_count, m, n = stack.shape
    device, dtype = stack.device, stack.dtype
    mask = torch.ones_like(stack, dtype=torch.bool) if fitting_mask is None else fitting_mask
    weight = torch.where(mask, 1.0, epsilon).to(dtype)
    weight = weight / weight.mean(dim=(1, 2, 3), keepdim=True)
    masked = torch.where(mask, stack, 0.0)
    counts = mask.sum(dim=(-2, -1)).to(dtype)
    init_baseline = torch.nan_to_num(
        (masked.sum(dim=(-2, -1)) / counts)
        / (masked.sum(dim=(1, 2, 3)) / counts.sum(dim=1))[:, None]
    )
    sigma = spectral_norm(stack)
    mu0 = MU_COEF / sigma
    image_norm = torch.linalg.vector_norm(stack.reshape(p_count, -1), dim=1)
    offset_max = stack.reshape(p_count, -1).amin(dim=1)
    active = torch.ones(p_count, dtype=torch.bool, device=device)
    passes = torch.zeros(p_count, dtype=torch.int64, device=device)
    score = torch.full((p_count,), float("inf"), dtype=dtype, device=device)
    last_flat = last_dark = None
    state: FitState | None = None
    every = torch.arange(p_count, device=device)
    for pass_index in range(max_reweight_iterations):
        # One host sync per pass: which problems still reweight (one problem: whether it does).
        if p_count == 1:
            if not bool(active[0]):
                break
            idx = every
        else:
            idx = torch.nonzero(active).flatten()
            if idx.numel() == 0:
                break
        whole = idx.numel() == p_count

        def take(x: torch.Tensor, idx: torch.Tensor = idx, whole: bool = whole) -> torch.Tensor:
            return x if whole else x[idx]  # every problem: no copy of the stacks

        groups = _groups(idx, group_size)
        results = []
        for number, group in enumerate(groups):
            pick = take if len(groups) == 1 else (lambda x, g=group: x[g])
            steps = iter_alm_pass(
                pick(stack), pick(weight), pick(init_baseline), pick(lam_flat), pick(lam_dark),
                pick(mu0), pick(image_norm), pick(offset_max),
                get_darkfield, max_iterations, optimization_tol,
            )  # fmt: skip
            tick = functools.partial(
                AlmTick, pass_index + 1, group, group=number, groups=len(groups)
            )
            results.append((yield from _ticks(steps, tick)))
        out = results[0] if len(results) == 1 else _joined(results)
        flat_fit, baseline = out["flat"], out["baseline"]
        dark = out["dark"] + out["offset"][:, None, None] * flat_fit
        # S = mean_T(I_B) - D with I_B = S_fit B + D_R(before the last darkfield step).
        flat = flat_fit * baseline.mean(dim=1)[:, None, None] + out["dark_before"] - dark
        flat_mean = flat.mean(dim=(-2, -1))
        flat = flat / flat_mean[:, None, None]
        image_mean = (
            flat_fit.mean(dim=(-2, -1))[:, None] * baseline
            + out["dark_before"].mean(dim=(-2, -1))[:, None]
        )
        relative = out["sparse"] / (image_mean[:, :, None, None] + 1e-6)
        new_weight = 1.0 / (relative.abs() + epsilon)
        new_weight = torch.where(take(mask), new_weight, new_weight * epsilon)
        new_weight = new_weight / new_weight.mean(dim=(1, 2, 3), keepdim=True)
        if whole:
            weight = new_weight
        else:
            weight[idx] = new_weight
        if last_flat is None:
            last_flat = torch.empty_like(flat).new_zeros((p_count, m, n))
            last_dark = torch.zeros_like(last_flat)
            full_flat, full_dark = last_flat.clone(), last_dark.clone()
            full_base = torch.zeros(p_count, t_count, dtype=dtype, device=device)
            full_offset = torch.zeros(p_count, dtype=dtype, device=device)
            full_iter = torch.zeros(p_count, dtype=torch.int64, device=device)
            full_ratio = torch.zeros(p_count, dtype=dtype, device=device)
        else:
            change_flat = (flat - last_flat[idx]).abs().sum(dim=(-2, -1)) / last_flat[
                idx
            ].abs().sum(dim=(-2, -1)).clamp_min(1e-12)
            change_dark = (dark - last_dark[idx]).abs().sum(dim=(-2, -1)) / last_dark[
                idx
            ].abs().sum(dim=(-2, -1)).clamp_min(1e-6)
            change_dark = torch.where(
                (dark - last_dark[idx]).abs().sum(dim=(-2, -1)) < 1e-7, 0.0, change_dark
            )
            score[idx] = torch.maximum(change_flat, change_dark)
        last_flat[idx], last_dark[idx] = flat, dark
        full_flat[idx], full_dark[idx] = flat, dark
        full_base[idx] = baseline * flat_mean[:, None]
        full_offset[idx] = out["offset"]
        full_iter[idx], full_ratio[idx] = out["iterations"], out["ratio"]
        passes[idx] += 1
        finite = torch.isfinite(score[idx]) | (passes[idx] == 1)
        active[idx] = ~((score[idx] <= reweighting_tol) & finite)
        bad = ~torch.isfinite(full_ratio) | ~torch.isfinite(full_flat).all(dim=-1).all(dim=-1)
        active = active & ~bad  # a non-finite problem cannot recover: stop it (not converged)
        state = FitState(
            flatfield=full_flat,
            darkfield=full_dark,
            baseline=full_base,
            offset=full_offset,
            alm_iterations=full_iter,
            alm_residual=full_ratio,
            reweight_score=score.clone(),
            active=active.clone(),
            passes=passes.clone(),
        )
        yield state


def _states_only(
    steps: Callable[P, Iterator[AlmTick | FitState]],
) -> Callable[P, Iterator[FitState]]:
    @functools.wraps(steps)
    def passes(*args: P.args, **kwargs: P.kwargs) -> Iterator[FitState]:
        return (step for step in steps(*args, **kwargs) if isinstance(step, FitState))

    return passes


reweighting_passes = _states_only(reweighting_steps)
reweighting_passes.__doc__ = """:func:`reweighting_steps` without its ticks (same arguments): the
:class:`FitState` after each reweighting pass."""
