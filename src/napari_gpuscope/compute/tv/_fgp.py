"""FGP (Beck & Teboulle 2009) on the ROF dual, with a certified duality-gap stopping rule."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..jobs import is_stop
from . import _ops as ops
from ._solvers import CHECK_EVERY, Solver, SolveResult, Tick, relative_gaps

__all__ = [
    "FUSED_OPS",
    "bytes_per_element",
    "fgp_iterations",
    "fgp_momenta",
    "kernel_paths",
    "solve_fgp",
]

FUSED_OPS = (ops.fgp_step, ops.fgp_primal, ops.tv_gap_partials)
"""The fused operations an FGP solve runs."""


def bytes_per_element(n_coupled: int, device: str | torch.device) -> int:
    """Device bytes per voxel of an FGP solve on ``device`` (see
    :func:`~napari_gpuscope.compute.tv._ops.kernel_bytes_per_element`).

    Compiles and self-tests the fused kernels on ``device`` if that has not happened yet: the
    twins need more memory than the kernels.
    """
    fused = all(op.prepare(device) for op in FUSED_OPS)
    return ops.kernel_bytes_per_element(n_coupled, fused=fused)


def kernel_paths(device: str | torch.device) -> dict[str, str]:
    """Which implementation each FGP op ran on ``device`` and why, for provenance.

    Examples
    --------
    >>> sorted(kernel_paths("cpu")) in ([], ["fgp_primal", "fgp_step", "tv_gap_partials"])
    True
    """
    key = str(torch.device(device))
    return {op.name: op.last_paths[key].describe() for op in FUSED_OPS if key in op.last_paths}


def fgp_momenta(t: float, count: int) -> tuple[list[float], float]:
    """FGP's next ``count`` extrapolation factors ``(t_k - 1) / t_{k+1}`` from ``t = t_k``, and
    the ``t`` after them (``t_{k+1} = (1 + sqrt(1 + 4 t_k^2)) / 2``, starting from 1).

    Examples
    --------
    >>> momenta, t = fgp_momenta(1.0, 3)
    >>> [round(m, 3) for m in momenta], round(t, 3)
    ([0.0, 0.282, 0.434], 2.75)
    """
    momenta = []
    for _ in range(count):
        t_next = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        momenta.append((t - 1.0) / t_next)
        t = t_next
    return momenta, t


def fgp_iterations(
    f: torch.Tensor,
    z: torch.Tensor,
    y: torch.Tensor,
    z_next: torch.Tensor,
    momenta: Sequence[float],
    *,
    spacing: Sequence[float],
    lo: float,
    hi: float,
    inv_l2: float,
    weight: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One FGP iteration per momentum (:data:`~._ops.fgp_step`, ping-ponging between the two
    extrapolated dual buffers); ``y`` is updated in place. Returns ``(z, z_next)`` swapped so
    that ``z`` holds the latest extrapolated dual. Whole solves and the rounds of a split
    volume both iterate through here, so they run the same algorithm."""
    step = ops.fgp_step.bind(f, z, y, z_next)
    for momentum in momenta:
        step(
            f,
            z,
            y,
            z_next,
            spacing=spacing,
            lo=lo,
            hi=hi,
            inv_l2=inv_l2,
            weight=weight,
            momentum=momentum,
        )
        z, z_next = z_next, z
    return z, z_next


def solve_fgp(
    f: torch.Tensor,
    weight: float,
    spacing: Sequence[float],
    *,
    max_iterations: int,
    tolerance: float,
    lo: float = -math.inf,
    hi: float = math.inf,
) -> Solver:
    """FGP on the ROF dual with an optional box ``[lo, hi]``.

    Step ``1/L^2`` with ``L^2 = 4 sum(s_a^2)``; stops when the relative duality gap of every
    problem is ``<= tolerance`` (checked every :data:`~._solvers.CHECK_EVERY` iterations and at
    the end) or at ``max_iterations``. ``weight`` must be > 0 and at least one ``s_a`` > 0.

    Each iteration is one fused pass (:func:`fgp_iterations`); a check computes the estimate
    ``u = clamp(f + div y)`` and its gap from per-thread float32 partial sums added in float64
    (:data:`~._ops.tv_gap_partials`), the only synchronisation with the host. The paths are
    decided once per block of iterations (:meth:`~napari_gpuscope.compute.kernels.FusedOp.bind`).
    """
    spacing = tuple(float(s) for s in spacing)
    inv_l2 = 1.0 / (4.0 * sum(s * s for s in spacing))
    y = f.new_zeros((len(spacing), *f.shape))
    z = y.clone()
    z_next = torch.empty_like(y)
    u = torch.empty_like(f)
    batch, per_problem = f.shape[0], f[0].numel()
    threads = ops.gap_threads(batch, per_problem)
    primal_part = f.new_empty((batch, threads))
    gap_part = f.new_empty((batch, threads))
    t = 1.0
    relative_gap = math.inf
    iteration = 0
    stopped = False
    while iteration < max_iterations:
        block_end = min(max_iterations, (iteration // CHECK_EVERY + 1) * CHECK_EVERY)
        momenta, t = fgp_momenta(t, block_end - iteration)
        z, z_next = fgp_iterations(
            f, z, y, z_next, momenta, spacing=spacing, lo=lo, hi=hi, inv_l2=inv_l2, weight=weight
        )
        iteration = block_end
        # The certified estimate comes from the dual iterate y, not the extrapolated z.
        ops.fgp_primal.bind(f, y, u)(f, y, u, spacing=spacing, lo=lo, hi=hi)
        gap_terms = ops.tv_gap_partials.bind(f, y, u, primal_part, gap_part)
        gap_terms(f, y, u, primal_part, gap_part, spacing=spacing, weight=weight)
        rel = relative_gaps(
            gap_part.sum(1, dtype=torch.float64), primal_part.sum(1, dtype=torch.float64)
        )
        relative_gap = float(rel.max())
        command = yield Tick(iteration, relative_gap, u)
        if relative_gap <= tolerance:
            break
        if is_stop(command):
            stopped = True
            break
    return SolveResult(u, iteration, relative_gap, relative_gap <= tolerance, stopped)
