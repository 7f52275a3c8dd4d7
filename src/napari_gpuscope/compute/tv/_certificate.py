"""The duality gap of a stitched result, in float64, one block of planes at a time.

For the ROF problem with a box ``C = [lo, hi]``,
``P(u) = 1/2 |u - f|^2 + w sum_i |grad u_i| + i_C(u)``, and any dual field ``y`` with
``|y_i| <= w`` gives the lower bound (weak duality; ``v = f + div y``)::

    P* >= D(y) = 1/2 |f|^2 - 1/2 |v|^2 + 1/2 |P_C(v) - v|^2,

so ``P(u) - D(y) >= P(u) - P*`` for *any* ``u`` in ``C``: nothing ties ``u`` to ``y``. This
module evaluates that bound for the image a chunked run returns: ``y`` is the stitched dual
(made exactly feasible in float64 by scaling each ``y_i`` to ``|y_i| <= w``), ``u`` is the
float32 image ``P_C(f + div y)`` that is returned, and both energies are summed in float64. A
block of planes ``[a, b)`` along the leading coupled axis needs the dual on ``[a - 1, b]`` and the
data on ``[a, b]``: one plane of overlap on each side.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["BYTES_PER_ELEMENT", "certify_block"]

BYTES_PER_ELEMENT = 8 * 10
"""Device bytes per voxel of a block (float64: data, dual of up to 4 axes, v, u, terms)."""


def certify_block(
    f: torch.Tensor,
    y: torch.Tensor,
    *,
    start: int,
    stop: int,
    length: int,
    weight: float,
    spacing: Sequence[float],
    lo: float,
    hi: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Image and energies of the planes ``[start, stop)`` of a problem batch.

    Parameters
    ----------
    f : torch.Tensor
        float32 data ``(B, m, ...)`` of the planes ``[start, min(stop + 1, length))`` along
        axis 1, the leading coupled axis.
    y : torch.Tensor
        float32 dual ``(d, B, k, ...)`` of the planes ``[max(start - 1, 0), min(stop + 1,
        length))``.
    start, stop : int
        The block, in planes of the whole problem.
    length : int
        Planes of the whole problem along axis 1.
    weight : float
        TV weight.
    spacing : sequence of float
        ``d`` difference weights (axis 1 first).
    lo, hi : float
        The box (``-inf``/``inf`` for none).

    Returns
    -------
    image : torch.Tensor
        float32 ``P_C(f + div y)`` on ``[start, stop)``.
    primal, dual : torch.Tensor
        float64 ``(B,)``: ``P(image)`` and ``D(y)`` restricted to the block (their sums over
        the blocks are the energies of the whole problem).
    """
    first = max(start - 1, 0)
    planes = f.shape[1]
    y = y.double()
    norm = y.square().sum(0).sqrt_()
    y.mul_(torch.clamp(weight / norm, max=1.0))  # |y_i| <= w exactly; 0 stays 0
    data = f.double()
    v = _divergence(y, spacing, start - first, planes, start, length).add_(data)
    u = v.clamp(lo, hi)
    image = u.float()
    core = stop - start
    # Dual terms: 1/2 f^2 - 1/2 v^2 = -(v - f)(f + (v - f)/2), without the cancellation.
    div = v[:, :core] - data[:, :core]
    dual_terms = (div * 0.5).add_(data[:, :core]).mul_(div).neg_()
    dual_terms.add_(0.5 * (u[:, :core] - v[:, :core]).square_())
    returned = image.double()
    gradient_norm = _gradient_norm(returned, spacing, core)
    primal_terms = 0.5 * (returned[:, :core] - data[:, :core]).square_()
    primal_terms.add_(gradient_norm.mul_(weight))
    batch = f.shape[0]
    primal = primal_terms.reshape(batch, -1).sum(1)
    dual = dual_terms.reshape(batch, -1).sum(1)
    return image[:, :core], primal, dual


def _divergence(
    y: torch.Tensor,
    spacing: Sequence[float],
    offset: int,
    planes: int,
    start: int,
    length: int,
) -> torch.Tensor:
    """``div y`` on the ``planes`` planes from ``start``; ``y`` starts ``offset`` planes
    earlier (0 or 1). Forward differences with Neumann boundaries (the solvers' adjoint)."""
    lead = y[0]
    out = lead.narrow(1, offset, planes).clone()  # y_0[z], absent on the problem's last plane
    if start + planes == length:
        out[:, -1] = 0
    if offset:
        out.sub_(lead.narrow(1, 0, planes))  # y_0[z - 1]
    elif planes > 1:
        out[:, 1:].sub_(lead[:, : planes - 1])
    if spacing[0] != 1.0:
        out.mul_(spacing[0])
    for a in range(1, len(spacing)):
        dim = a + 1
        p = y[a].narrow(1, offset, planes)
        n = p.shape[dim]
        if n == 1:
            continue
        acc = torch.zeros_like(out)
        acc.narrow(dim, 0, n - 1).add_(p.narrow(dim, 0, n - 1))
        acc.narrow(dim, 1, n - 1).sub_(p.narrow(dim, 0, n - 1))
        out.add_(acc.mul_(spacing[a]))
    return out


def _gradient_norm(u: torch.Tensor, spacing: Sequence[float], core: int) -> torch.Tensor:
    """``|grad u|`` on the first ``core`` planes (the next plane, when present, supplies the
    leading difference of the last one)."""
    planes = u.shape[1]
    squared = torch.zeros_like(u[:, :core])
    reach = min(core, planes - 1)
    if reach > 0:
        lead = spacing[0] * (u[:, 1 : reach + 1] - u[:, :reach])
        squared[:, :reach].add_(lead.square_())
    for a in range(1, len(spacing)):
        dim = a + 1
        n = u.shape[dim]
        if n == 1:
            continue
        part = u[:, :core]
        diff = spacing[a] * (part.narrow(dim, 1, n - 1) - part.narrow(dim, 0, n - 1))
        squared.narrow(dim, 0, n - 1).add_(diff.square_())
    return squared.sqrt_()
