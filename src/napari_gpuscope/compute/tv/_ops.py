"""Elementary TV operators: weighted gradient/divergence and the fused FGP steps.

Layout shared with ``tv_fgp.cu`` (beside this file): an image batch ``f`` of shape ``(B, n_0,
..., n_{d-1})`` (``B`` independent problems, ``d <= 4`` coupled axes) and dual fields of shape
``(d, B, n_0, ..., n_{d-1})``, contiguous, so component ``a`` of element ``i`` lives at ``a * N
+ i``. Each fused step (:data:`fgp_primal`, :data:`fgp_dual`, :data:`tv_gap_terms`) is a
:class:`~napari_gpuscope.compute.kernels.FusedOp`: CUDA float32 tensors run the kernel, anything
else runs the torch twin defined here, which computes the same expressions in the same order (up
to float32 rounding where torch fuses a multiply-add). The twins work in place on narrowed views
with at most two image-sized work buffers, so a CPU iteration is a handful of memory passes."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ..kernels import FusedOp, KernelSource

__all__ = [
    "MAX_COUPLED_AXES",
    "divergence",
    "fgp_dual",
    "fgp_primal",
    "gradient",
    "tv_gap_terms",
]

MAX_COUPLED_AXES = 4
SOURCE = KernelSource("tv_fgp.cu", beside=__file__)


def _scratch(like: torch.Tensor, numel: int) -> torch.Tensor:
    """One flat work buffer; :func:`_shaped` carves views of any smaller shape out of it."""
    return like.new_empty(numel)


def _shaped(buffer: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """A contiguous view of ``shape`` on the front of a flat buffer."""
    return buffer[: math.prod(shape)].view(shape)


def _forward_difference(u: torch.Tensor, dim: int, s: float, buffer: torch.Tensor) -> torch.Tensor:
    """``s * (u[i + 1] - u[i])`` along ``dim`` for ``i < n - 1`` (the boundary row is omitted).

    Written into the front of the flat ``buffer`` and rounded exactly as the kernels round it:
    the difference first, then the product with ``s``.
    """
    n = u.shape[dim]
    hi, lo = u.narrow(dim, 1, n - 1), u.narrow(dim, 0, n - 1)
    diff = torch.sub(hi, lo, out=_shaped(buffer, lo.shape))
    if s != 1.0:
        diff.mul_(s)
    return diff


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


def _divergence_into(p: torch.Tensor, spacing: Sequence[float], out: torch.Tensor) -> None:
    """``out = sum_a s_a * acc_a`` accumulated in axis order, like the kernels (no temporaries
    beyond one image-sized buffer, and none at all for a single coupled axis)."""
    buffer = _scratch(out, out.numel()) if len(spacing) > 1 else None
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


def gradient(u: torch.Tensor, spacing: Sequence[float]) -> torch.Tensor:
    """Weighted forward differences with Neumann boundaries.

    Parameters
    ----------
    u : torch.Tensor
        ``(B, n_0, ..., n_{d-1})``.
    spacing : sequence of float
        ``d`` difference weights ``s_a``.

    Returns
    -------
    torch.Tensor
        ``(d, B, n_0, ..., n_{d-1})``; component ``a`` is ``s_a * (u[i + e_a] - u[i])`` and 0 on
        the last index of axis ``a``.
    """
    g = u.new_empty((len(spacing), *u.shape))
    for a, s in enumerate(spacing):
        dim = a + 1
        n = u.shape[dim]
        component = g[a]
        if n > 1:
            # Written straight into the strided slice: no temporary.
            diff = component.narrow(dim, 0, n - 1)
            torch.sub(u.narrow(dim, 1, n - 1), u.narrow(dim, 0, n - 1), out=diff)
            if s != 1.0:
                diff.mul_(s)
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


def _padded(shape: Sequence[int], spacing: Sequence[float]) -> tuple[list, list]:
    """Kernel scalars: n_0..n_3 (unused = 1) as int64 and s_0..s_3 (unused = 0) as float32."""
    ns = [np.int64(n) for n in shape] + [np.int64(1)] * (MAX_COUPLED_AXES - len(shape))
    ss = [np.float32(s) for s in spacing] + [np.float32(0.0)] * (MAX_COUPLED_AXES - len(spacing))
    return ns, ss


def _check_layout(f: torch.Tensor, spacing: Sequence[float]) -> None:
    if not 1 <= len(spacing) <= MAX_COUPLED_AXES or f.ndim != len(spacing) + 1:
        raise ValueError(
            f"expected a (batch, n_0..n_{{d-1}}) tensor with 1 <= d <= {MAX_COUPLED_AXES} and "
            f"d spacing weights, got shape {tuple(f.shape)} and {len(spacing)} weight(s)"
        )


# --- fgp_primal: u = clamp(f + div z, lo, hi) -------------------------------------------------


def _twin_primal(
    f: torch.Tensor,
    z: torch.Tensor,
    u: torch.Tensor,
    *,
    spacing: Sequence[float],
    lo: float = -float("inf"),
    hi: float = float("inf"),
) -> None:
    _check_layout(f, spacing)
    # u doubles as the divergence accumulator (so it must not share memory with f or z, which
    # the kernel rules out anyway); f + div == div + f exactly.
    _divergence_into(z, spacing, u)
    u.add_(f)
    if lo > -math.inf or hi < math.inf:
        u.clamp_(min=None if lo == -math.inf else lo, max=None if hi == math.inf else hi)


def _launch_primal(backend, f, z, u, *, spacing, lo=-float("inf"), hi=float("inf")) -> None:
    _check_layout(f, spacing)
    ns, ss = _padded(f.shape[1:], spacing)
    fn = backend.function(SOURCE, "fgp_primal")
    args = [backend.array(f), backend.array(z), backend.array(u), np.int64(f.numel()), *ns]
    args += [np.int32(len(spacing)), *ss, np.float32(lo), np.float32(hi)]
    backend.launch(fn, f.numel(), args)


def _random_problem(device, gen: torch.Generator, ndim: int, batch: int = 2):
    sizes = [5, 4, 3, 3][:ndim]
    shape = (batch, *sizes)
    f = torch.randn(shape, generator=gen).to(device)
    z = (0.3 * torch.randn((ndim, *shape), generator=gen)).to(device)
    spacing = [1.0, 0.5, 0.25, 2.0][:ndim]
    return f, z, spacing


def _example_primal(device, gen: torch.Generator):
    f, z, spacing = _random_problem(device, gen, ndim=3)
    u = torch.empty_like(f)
    return (f, z, u), {"spacing": spacing, "lo": -0.5, "hi": 1.5}


fgp_primal = FusedOp(
    name="fgp_primal",
    launch=_launch_primal,
    twin=_twin_primal,
    example=_example_primal,
    outputs=(2,),
    rtol=1e-5,
    atol=1e-5,
)
"""``fgp_primal(f, z, u, *, spacing, lo, hi)``: writes ``u = clamp(f + div z, lo, hi)``."""


# --- fgp_dual: projected dual step + momentum, in place on z and y ----------------------------


def _twin_dual(
    u: torch.Tensor,
    z: torch.Tensor,
    y: torch.Tensor,
    *,
    spacing: Sequence[float],
    inv_l2: float,
    weight: float,
    momentum: float,
) -> None:
    _check_layout(u, spacing)
    numel = u.numel()
    work = _scratch(u, 2 * numel)
    difference, norm = work[:numel], work[numel:].view(u.shape)
    # v = z + grad(u) * inv_l2, built in z's storage (z is overwritten below anyway); the last
    # index of each axis has a zero gradient, so only the narrowed part changes.
    for a, s in enumerate(spacing):
        dim = a + 1
        n = u.shape[dim]
        if n > 1:
            g = _forward_difference(u, dim, s, difference)
            z[a].narrow(dim, 0, n - 1).add_(g, alpha=inv_l2)
    torch.mul(z[0], z[0], out=norm)
    for a in range(1, len(spacing)):
        norm.addcmul_(z[a], z[a])
    norm.sqrt_()
    # scale = weight / norm where norm > weight, else exactly 1 (= weight / weight); the floor
    # keeps a zero weight from dividing 0 by 0.
    floor = u.new_full((), max(weight, torch.finfo(u.dtype).tiny))
    norm.clamp_(min=floor)
    scale = torch.div(floor if weight > 0 else floor.new_zeros(()), norm, out=norm)
    step = difference.view(u.shape)
    for a in range(len(spacing)):
        y_new = z[a].mul_(scale)
        torch.sub(y_new, y[a], out=step)
        y[a].copy_(y_new)
        z[a].add_(step, alpha=momentum)


def _launch_dual(backend, u, z, y, *, spacing, inv_l2, weight, momentum) -> None:
    _check_layout(u, spacing)
    ns, ss = _padded(u.shape[1:], spacing)
    fn = backend.function(SOURCE, "fgp_dual")
    args = [backend.array(u), backend.array(z), backend.array(y), np.int64(u.numel()), *ns]
    args += [np.int32(len(spacing)), *ss, np.float32(inv_l2), np.float32(weight)]
    args += [np.float32(momentum)]
    backend.launch(fn, u.numel(), args)


def _example_dual(device, gen: torch.Generator):
    u, z, spacing = _random_problem(device, gen, ndim=3)
    y = (0.3 * torch.randn(z.shape, generator=gen)).to(device)
    kwargs = {"spacing": spacing, "inv_l2": 1.0 / 8.0, "weight": 0.4, "momentum": 0.3}
    return (u, z, y), kwargs


fgp_dual = FusedOp(
    name="fgp_dual",
    launch=_launch_dual,
    twin=_twin_dual,
    example=_example_dual,
    outputs=(1, 2),
    rtol=1e-5,
    atol=1e-5,
)
"""``fgp_dual(u, z, y, *, spacing, inv_l2, weight, momentum)``: one FGP dual step in place.

``y_new = proj_{|.| <= weight}(z + grad(u) * inv_l2)``, ``z <- y_new + momentum * (y_new - y)``,
``y <- y_new``.
"""


# --- tv_gap_terms: per-element primal energy and duality-gap terms ----------------------------


def _twin_gap(
    f: torch.Tensor,
    y: torch.Tensor,
    u: torch.Tensor,
    primal: torch.Tensor,
    gap: torch.Tensor,
    *,
    spacing: Sequence[float],
    weight: float,
) -> None:
    _check_layout(f, spacing)
    # primal accumulates |grad u|^2 and gap accumulates <y, grad u> until the end.
    primal.zero_()
    gap.zero_()
    work = _scratch(u, u.numel())
    for a, s in enumerate(spacing):
        dim = a + 1
        n = u.shape[dim]
        if n > 1:  # the boundary gradient is 0 and adds nothing
            g = _forward_difference(u, dim, s, work)
            primal.narrow(dim, 0, n - 1).addcmul_(g, g)
            gap.narrow(dim, 0, n - 1).addcmul_(y[a].narrow(dim, 0, n - 1), g)
    weighted_tv = primal.sqrt_().mul_(weight)
    torch.sub(weighted_tv, gap, out=gap)
    diff = torch.sub(u, f, out=work.view(u.shape))
    primal.addcmul_(diff, diff, value=0.5)


def _launch_gap(backend, f, y, u, primal, gap, *, spacing, weight) -> None:
    _check_layout(f, spacing)
    ns, ss = _padded(f.shape[1:], spacing)
    fn = backend.function(SOURCE, "tv_gap_terms")
    args = [backend.array(t) for t in (f, y, u, primal, gap)]
    args += [np.int64(f.numel()), *ns, np.int32(len(spacing)), *ss, np.float32(weight)]
    backend.launch(fn, f.numel(), args)


def _example_gap(device, gen: torch.Generator):
    f, y, spacing = _random_problem(device, gen, ndim=2)
    u = (f + 0.1 * torch.randn(f.shape, generator=gen).to(device)).contiguous()
    return (f, y, u, torch.empty_like(f), torch.empty_like(f)), {"spacing": spacing, "weight": 0.3}


tv_gap_terms = FusedOp(
    name="tv_gap_terms",
    launch=_launch_gap,
    twin=_twin_gap,
    example=_example_gap,
    outputs=(3, 4),
    rtol=1e-5,
    atol=1e-5,
)
"""``tv_gap_terms(f, y, u, primal, gap, *, spacing, weight)``: per-element energy terms.

With ``u = P_C(f + div y)`` and ``|y_i| <= weight``: ``primal = 0.5 (u - f)^2 + weight |grad u|``
and ``gap = weight |grad u| - <y, grad u>``. Their sums are the primal energy ``P(u)`` and the
duality gap ``P(u) - D_C(y)``, also with a box constraint ``C`` (the ``D_C`` terms of tv.md
§3.1e reduce to ``<u, div y>`` after summation by parts).
"""
