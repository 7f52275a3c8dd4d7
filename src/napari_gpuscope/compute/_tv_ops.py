"""Elementary TV operators: weighted gradient/divergence and the fused FGP steps.

Layout shared with ``kernels/tv_fgp.cu``: an image batch ``f`` of shape ``(B, n_0, ..., n_{d-1})``
(``B`` independent problems, ``d <= 4`` coupled axes) and dual fields of shape
``(d, B, n_0, ..., n_{d-1})``, contiguous, so component ``a`` of element ``i`` lives at
``a * N + i``. Each fused step (:data:`fgp_primal`, :data:`fgp_dual`, :data:`tv_gap_terms`) is a
:class:`~napari_gpuscope.compute.kernels.FusedOp`: CUDA float32 tensors run the kernel, anything
else runs the torch twin defined here, which computes the same expressions in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .kernels import FusedOp, KernelSource

__all__ = [
    "MAX_COUPLED_AXES",
    "divergence",
    "fgp_dual",
    "fgp_primal",
    "gradient",
    "tv_gap_terms",
]

MAX_COUPLED_AXES = 4
SOURCE = KernelSource("tv_fgp.cu")


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
    g = u.new_zeros((len(spacing), *u.shape))
    for a, s in enumerate(spacing):
        dim = a + 1
        n = u.shape[dim]
        if n > 1:
            diff = u.narrow(dim, 1, n - 1) - u.narrow(dim, 0, n - 1)
            g[a].narrow(dim, 0, n - 1).copy_(diff * s)
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
    out = p.new_zeros(p.shape[1:])
    for a, s in enumerate(spacing):
        dim = a + 1
        n = out.shape[dim]
        acc = p.new_zeros(out.shape)
        if n > 1:
            acc.narrow(dim, 0, n - 1).add_(p[a].narrow(dim, 0, n - 1))
            acc.narrow(dim, 1, n - 1).sub_(p[a].narrow(dim, 0, n - 1))
        out.add_(acc * s)
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
    torch.clamp(f + divergence(z, spacing), min=lo, max=hi, out=u)


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
    v = z + gradient(u, spacing) * inv_l2
    norm = torch.sqrt((v * v).sum(0))
    scale = torch.where(norm > weight, weight / norm.clamp_min(1e-30), torch.ones_like(norm))
    y_new = v * scale
    z.copy_(y_new + momentum * (y_new - y))
    y.copy_(y_new)


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
    g = gradient(u, spacing)
    tv = torch.sqrt((g * g).sum(0))
    diff = u - f
    primal.copy_(0.5 * diff * diff + weight * tv)
    gap.copy_(weight * tv - (y * g).sum(0))


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
