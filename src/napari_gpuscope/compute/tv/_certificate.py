"""The duality gap of a stitched result, in float64, one block of planes at a time.

For the ROF problem with a box ``C = [lo, hi]``,
``P(u) = 1/2 |u - f|^2 + w sum_i |grad u_i| + i_C(u)``, and any dual field ``y`` with
``|y_i| <= w`` gives the lower bound (weak duality; ``v = f + div y``)::

    P* >= D(y) = 1/2 |f|^2 - 1/2 |v|^2 + 1/2 |P_C(v) - v|^2,

so ``P(u) - D(y) >= P(u) - P*`` for *any* ``u`` in ``C``: nothing ties ``u`` to ``y``. This
module evaluates that bound for the image a chunked run returns: ``y`` is the stitched dual
(made feasible in float64 by scaling each ``y_i`` to ``|y_i| <= w``), ``u`` is the
float32 image ``P_C(f + div y)`` that is returned, and both energies are summed in float64. A
block of planes ``[a, b)`` along the leading coupled axis needs the dual on ``[a - 1, b]`` and the
data on ``[a, b]``: one plane of overlap on each side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["bytes_per_element", "certify_block"]


def bytes_per_element(n_coupled: int) -> int:
    """Device bytes :func:`certify_block` allocates at its peak, on top of its float32 inputs,
    per voxel of its dual block ``y`` (``k`` planes: the block, and up to one plane on each
    side): float64 work fields, first the feasible dual, its norm and the data, then the data,
    ``v``, ``P_C(v)``, the dual terms and a product, then the gradient's. Checked by tracking
    every allocation (``tests/compute/test_tv_chunks.py``).

    Examples
    --------
    >>> bytes_per_element(3)
    48
    """
    return 8 * max(n_coupled + 2, 6)


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

    Notes
    -----
    Work fields are freed as soon as they are spent, so the block needs
    :func:`bytes_per_element` bytes per voxel besides its inputs.
    """
    first = max(start - 1, 0)
    planes = f.shape[1]
    core = stop - start
    batch = f.shape[0]
    data = f.double()
    v = _divergence(_feasible(y, weight), spacing, start - first, planes, start, length)
    v.add_(data)
    boxed = lo > -math.inf or hi < math.inf
    u = v.clamp(lo, hi) if boxed else v
    image = u.float()
    # Dual terms: 1/2 f^2 - 1/2 v^2 = -(v - f)(f + (v - f)/2), without the cancellation.
    dual_terms = torch.sub(v[:, :core], data[:, :core])
    dual_terms.mul_(torch.add(data[:, :core], dual_terms, alpha=0.5)).neg_()
    if boxed:
        dual_terms.add_(torch.sub(u[:, :core], v[:, :core]).square_(), alpha=0.5)
        del u
    dual = dual_terms.reshape(batch, -1).sum(1)
    del dual_terms
    returned = v.copy_(image)  # the float32 image, exactly, in v's memory (v is spent)
    primal_terms = torch.sub(returned[:, :core], data[:, :core]).square_().mul_(0.5)
    primal_terms.add_(_gradient_norm(returned, spacing, core).mul_(weight))
    primal = primal_terms.reshape(batch, -1).sum(1)
    return image[:, :core], primal, dual


def _feasible(y: torch.Tensor, weight: float) -> torch.Tensor:
    """A float64 copy of ``y`` scaled to ``|y_i| <= weight`` (0 stays 0)."""
    y = y.double()
    norm = y[0].square()
    for a in range(1, y.shape[0]):
        norm.addcmul_(y[a], y[a])
    scale = torch.div(weight, norm.sqrt_(), out=norm).clamp_(max=1.0)
    y.mul_(scale)
    return y


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
        inner = p.narrow(dim, 0, n - 1)
        out.narrow(dim, 0, n - 1).add_(inner, alpha=spacing[a])
        out.narrow(dim, 1, n - 1).sub_(inner, alpha=spacing[a])
    return out


def _gradient_norm(u: torch.Tensor, spacing: Sequence[float], core: int) -> torch.Tensor:
    """``|grad u|`` on the first ``core`` planes (the next plane, when present, supplies the
    leading difference of the last one), with one difference field alive at a time."""
    planes = u.shape[1]
    squared = torch.zeros_like(u[:, :core])
    reach = min(core, planes - 1)
    if reach > 0:
        lead = torch.sub(u[:, 1 : reach + 1], u[:, :reach])
        squared[:, :reach].add_(lead.mul_(spacing[0]).square_())
        del lead
    part = u[:, :core]
    for a in range(1, len(spacing)):
        dim = a + 1
        n = u.shape[dim]
        if n == 1:
            continue
        diff = torch.sub(part.narrow(dim, 1, n - 1), part.narrow(dim, 0, n - 1))
        squared.narrow(dim, 0, n - 1).add_(diff.mul_(spacing[a]).square_())
        del diff
    return squared.sqrt_()
