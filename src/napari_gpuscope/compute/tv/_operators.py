"""Weighted gradient and divergence on the layout of ``tv_fgp.cu``, and the in-place
differences the torch twins of the fused FGP steps (:mod:`._ops`) are built from.

An image batch ``u`` has shape ``(B, n_0, ..., n_{d-1})`` and a dual field ``(d, B, n_0, ...,
n_{d-1})``. The differences are rounded as the kernels round them (the difference first, then
the product with the spacing weight; the divergence accumulated in axis order), and they work on
narrowed views with at most one image-sized work buffer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["divergence", "gradient"]


def _scratch(like: torch.Tensor, numel: int) -> torch.Tensor:
    """One flat work buffer; :func:`_shaped` carves views of any smaller shape out of it."""
    return like.new_empty(numel)


def _shaped(buffer: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """A contiguous view of ``shape`` on the front of a flat buffer."""
    return buffer[: math.prod(shape)].view(shape)


def _forward_difference(u: torch.Tensor, dim: int, s: float, out: torch.Tensor) -> torch.Tensor:
    """``out = s * (u[i + 1] - u[i])`` along ``dim`` for ``i < n - 1`` (the boundary row is
    omitted, so ``out`` has ``n - 1`` rows along ``dim``); returns ``out``.

    Rounded exactly as the kernels (and NumPy's ``s * np.diff``) round it: the difference
    first, then the product with ``s``.
    """
    n = u.shape[dim]
    torch.sub(u.narrow(dim, 1, n - 1), u.narrow(dim, 0, n - 1), out=out)
    if s != 1.0:
        out.mul_(s)
    return out


def _backward_difference(p: torch.Tensor, dim: int, out: torch.Tensor) -> None:
    """``out_i = p_i [i < n - 1] - p_{i - 1} [i > 0]`` along ``dim`` (the kernels' ``acc``)."""
    n = p.shape[dim]
    if n == 1:
        out.zero_()
        return
    out.narrow(dim, 0, 1).copy_(p.narrow(dim, 0, 1))
    torch.neg(p.narrow(dim, n - 2, 1), out=out.narrow(dim, n - 1, 1))
    if n > 2:
        torch.sub(p.narrow(dim, 1, n - 2), p.narrow(dim, 0, n - 2), out=out.narrow(dim, 1, n - 2))


def _divergence_into(
    p: torch.Tensor,
    spacing: Sequence[float],
    out: torch.Tensor,
    buffer: torch.Tensor | None = None,
) -> None:
    """``out = sum_a s_a * acc_a`` accumulated in axis order, like the kernels (no temporaries
    beyond one image-sized ``buffer``, allocated when not given, and none at all for a single
    coupled axis)."""
    if buffer is None and len(spacing) > 1:
        buffer = _scratch(out, out.numel())
    for a, s in enumerate(spacing):
        dim = a + 1
        if a == 0:
            _backward_difference(p[0], dim, out)
            if s != 1.0:
                out.mul_(s)
        elif out.shape[dim] > 1:  # a size-1 axis adds exactly 0
            acc = _shaped(buffer, out.shape)
            _backward_difference(p[a], dim, acc)
            if s != 1.0:
                acc.mul_(s)
            out.add_(acc)


def gradient(
    u: torch.Tensor, spacing: Sequence[float], *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Weighted forward differences with Neumann boundaries.

    Parameters
    ----------
    u : torch.Tensor
        ``(B, n_0, ..., n_{d-1})``.
    spacing : sequence of float
        ``d`` difference weights ``s_a``.
    out : torch.Tensor, optional
        ``(d, B, n_0, ..., n_{d-1})`` tensor to write into (allocated when not given).

    Returns
    -------
    torch.Tensor
        ``(d, B, n_0, ..., n_{d-1})``; component ``a`` is ``s_a * (u[i + e_a] - u[i])`` (NumPy's
        rounding of ``s * np.diff``) and 0 on the last index of axis ``a``.

    Examples
    --------
    >>> gradient(torch.tensor([[0.0, 1.0, 4.0]]), [0.5])
    tensor([[[0.5000, 1.5000, 0.0000]]])
    """
    g = u.new_empty((len(spacing), *u.shape)) if out is None else out
    for a, s in enumerate(spacing):
        dim = a + 1
        n = u.shape[dim]
        component = g[a]
        if n > 1:  # written straight into the strided slice: no temporary
            _forward_difference(u, dim, s, component.narrow(dim, 0, n - 1))
        component.narrow(dim, n - 1, 1).zero_()
    return g


def divergence(p: torch.Tensor, spacing: Sequence[float]) -> torch.Tensor:
    """Negative adjoint of :func:`gradient`: ``<grad u, p> = -<u, div p>``.

    Parameters
    ----------
    p : torch.Tensor
        ``(d, B, n_0, ..., n_{d-1})``.
    spacing : sequence of float
        ``d`` difference weights.

    Returns
    -------
    torch.Tensor
        ``(B, n_0, ..., n_{d-1})``.
    """
    out = p.new_empty(p.shape[1:])
    _divergence_into(p, spacing, out)
    return out
