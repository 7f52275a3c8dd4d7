"""Elementary TV operators: weighted gradient/divergence and the fused FGP steps.

Layout shared with ``tv_fgp.cu`` (beside this file): an image batch ``f`` of shape ``(B, n_0,
..., n_{d-1})`` (``B`` independent problems, ``d <= 4`` coupled axes) and dual fields of shape
``(d, B, n_0, ..., n_{d-1})``, contiguous, so component ``a`` of element ``i`` lives at ``a * N
+ i``. Each fused step (:data:`fgp_primal`, :data:`fgp_step`, :data:`tv_gap_partials`) is a
:class:`~napari_gpuscope.compute.kernels.FusedOp`: CUDA float32 tensors run the kernel, anything
else runs the torch twin defined here, which computes the same expressions in the same order (up
to float32 rounding where torch fuses a multiply-add, and the order of the partial sums). The
twins work in place on narrowed views with a few image-sized work buffers
(:data:`TWIN_WORK_BUFFERS`), so a CPU iteration is a handful of memory passes.

Each kernel exists once per number of coupled axes and index width (``fgp_step_3d_u32``, ...):
32-bit indices whenever every index of a launch fits (:func:`index_width`).

The gradient, divergence and the twins' differences are :mod:`._operators` (importable from
here)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

from ..kernels import BLOCK_SIZE, MAX_BLOCKS, FusedOp, KernelSource
from ._operators import (
    _divergence_into,
    _forward_difference,
    _scratch,
    _shaped,
    divergence,
    gradient,
)

__all__ = [
    "GAP_THREADS_TARGET",
    "MAX_COUPLED_AXES",
    "NARROW_INDEX_LIMIT",
    "TWIN_WORK_BUFFERS",
    "divergence",
    "fgp_primal",
    "fgp_step",
    "gap_threads",
    "gradient",
    "index_width",
    "kernel_bytes_per_element",
    "tv_gap_partials",
]

MAX_COUPLED_AXES = 4
SOURCE = KernelSource("tv_fgp.cu", beside=__file__)


# --- launch geometry ---------------------------------------------------------------------------

NARROW_INDEX_LIMIT = 2**32 - 1
"""Largest index a ``*_u32`` kernel may compute (tests lower it to run the 64-bit kernels)."""

GAP_THREADS_TARGET = 1 << 18
"""Threads of a gap-partials launch, about one full wave of a large GPU (132 SMs x 2048)."""

TWIN_WORK_BUFFERS = 3
"""Image-sized work buffers the twins allocate at most (tv_gap_partials' twin; fgp_step's: 2)."""


def index_width(n_elements: int, n_coupled: int, extra: int = 0) -> int:
    """32 or 64: the index width of the kernels for a problem of ``n_elements`` elements.

    A 32-bit launch must be able to form every index it touches: dual components up to
    ``n_coupled * n_elements``, plus one grid stride past the end of a grid-stride loop.
    """
    reach = n_coupled * n_elements + MAX_BLOCKS * BLOCK_SIZE + extra
    return 32 if reach <= NARROW_INDEX_LIMIT else 64


@functools.lru_cache(maxsize=128)
def _geometry(
    shape: tuple[int, ...], spacing: tuple[float, ...], limit: int
) -> tuple[str, type, tuple]:
    """Kernel name suffix, index type and the (N, n_0..n_3, s_0..s_3) scalars of a launch."""
    del limit  # part of the cache key only: tests change NARROW_INDEX_LIMIT
    _check_layout(shape, spacing)
    d = len(spacing)
    n_elements = math.prod(shape)
    narrow = index_width(n_elements, d) == 32
    index = np.uint32 if narrow else np.int64
    sizes = [index(n) for n in shape[1:]] + [index(1)] * (MAX_COUPLED_AXES - d)
    weights = [np.float32(s) for s in spacing] + [np.float32(0.0)] * (MAX_COUPLED_AXES - d)
    suffix = f"{d}d_{'u32' if narrow else 'i64'}"
    return suffix, index, (index(n_elements), *sizes, *weights)


def _launch_geometry(f: torch.Tensor, spacing: Sequence[float]) -> tuple[str, type, tuple]:
    """Cached per shape and spacing (a launch's host time matters: ~20 us in all)."""
    return _geometry(tuple(f.shape), tuple(spacing), NARROW_INDEX_LIMIT)


def _check_layout(shape: Sequence[int], spacing: Sequence[float]) -> None:
    if not 1 <= len(spacing) <= MAX_COUPLED_AXES or len(shape) != len(spacing) + 1:
        raise ValueError(
            f"expected a (batch, n_0..n_{{d-1}}) tensor with 1 <= d <= {MAX_COUPLED_AXES} and "
            f"d spacing weights, got shape {tuple(shape)} and {len(spacing)} weight(s)"
        )


def kernel_bytes_per_element(n_coupled: int, *, fused: bool) -> int:
    """Device bytes per voxel of an FGP solve: its resident fields and the twins' work buffers.

    Resident: ``f``, ``u`` and the dual fields ``y``, ``z`` and ``z_next`` (``d`` each). The
    fused kernels need nothing more (the gap partials are a few MiB at most); the twins add
    :data:`TWIN_WORK_BUFFERS` image-sized work buffers.
    """
    fields = 2 + 3 * n_coupled + (0 if fused else TWIN_WORK_BUFFERS)
    return 4 * fields


def _random_problem(device, gen: torch.Generator, ndim: int, batch: int = 2):
    sizes = [5, 4, 3, 3][:ndim]
    shape = (batch, *sizes)
    f = torch.randn(shape, generator=gen).to(device)
    z = (0.3 * torch.randn((ndim, *shape), generator=gen)).to(device)
    spacing = [1.0, 0.5, 0.25, 2.0][:ndim]
    return f, z, spacing


# --- fgp_primal: u = clamp(f + div z, lo, hi) -------------------------------------------------


def _twin_primal(
    f: torch.Tensor,
    z: torch.Tensor,
    u: torch.Tensor,
    *,
    spacing: Sequence[float],
    lo: float = -math.inf,
    hi: float = math.inf,
    buffer: torch.Tensor | None = None,
) -> None:
    _check_layout(f.shape, spacing)
    # u doubles as the divergence accumulator (so it must not share memory with f or z, which
    # the kernel rules out anyway); f + div == div + f exactly.
    _divergence_into(z, spacing, u, buffer)
    u.add_(f)
    if lo > -math.inf or hi < math.inf:
        # torch.clamp keeps NaN, and so does the kernel's tv_clamp.
        u.clamp_(min=None if lo == -math.inf else lo, max=None if hi == math.inf else hi)


def _launch_primal(backend, f, z, u, *, spacing, lo=-math.inf, hi=math.inf) -> None:
    suffix, _index, geometry = _launch_geometry(f, spacing)
    fn = backend.function(SOURCE, f"fgp_primal_{suffix}")
    args = (backend.array(f), backend.array(z), backend.array(u), *geometry)
    backend.launch(fn, f.numel(), (*args, np.float32(lo), np.float32(hi)))


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


# --- fgp_step: one FGP iteration, reading z and writing z_next --------------------------------


def _twin_step(
    f: torch.Tensor,
    z: torch.Tensor,
    y: torch.Tensor,
    z_next: torch.Tensor,
    *,
    spacing: Sequence[float],
    lo: float = -math.inf,
    hi: float = math.inf,
    inv_l2: float,
    weight: float,
    momentum: float,
) -> None:
    _check_layout(f.shape, spacing)
    numel = f.numel()
    work = _scratch(f, 2 * numel)
    u, grad = work[:numel].view(f.shape), work[numel:].view(f.shape)
    _twin_primal(f, z, u, spacing=spacing, lo=lo, hi=hi, buffer=work[numel:])
    # v = z + grad(u) * inv_l2 in z_next; the last index of each axis has a zero gradient.
    for a, s in enumerate(spacing):
        dim = a + 1
        n = f.shape[dim]
        if n == 1:
            z_next[a].copy_(z[a])
            continue
        _forward_difference(u, dim, s, grad.narrow(dim, 0, n - 1))
        grad.narrow(dim, n - 1, 1).zero_()
        torch.add(z[a], grad, alpha=inv_l2, out=z_next[a])
    norm = u  # u is spent
    torch.mul(z_next[0], z_next[0], out=norm)
    for a in range(1, len(spacing)):
        norm.addcmul_(z_next[a], z_next[a])
    norm.sqrt_()
    # scale = weight / norm where norm > weight, else exactly 1 (= weight / weight); the floor
    # keeps a zero weight from dividing 0 by 0. NaN stays NaN (torch.clamp keeps it).
    floor = f.new_full((), max(weight, torch.finfo(f.dtype).tiny))
    norm.clamp_(min=floor)
    scale = torch.div(floor if weight > 0 else floor.new_zeros(()), norm, out=norm)
    step = grad
    for a in range(len(spacing)):
        y_new = z_next[a].mul_(scale)
        torch.sub(y_new, y[a], out=step)
        y[a].copy_(y_new)
        z_next[a].add_(step, alpha=momentum)


def _launch_step(
    backend, f, z, y, z_next, *, spacing, lo=-math.inf, hi=math.inf, inv_l2, weight, momentum
) -> None:
    suffix, _index, geometry = _launch_geometry(f, spacing)
    fn = backend.function(SOURCE, f"fgp_step_{suffix}")
    arrays = (backend.array(f), backend.array(z), backend.array(y), backend.array(z_next))
    scalars = (np.float32(lo), np.float32(hi), np.float32(inv_l2), np.float32(weight))
    backend.launch(fn, f.numel(), (*arrays, *geometry, *scalars, np.float32(momentum)))


def _example_step(device, gen: torch.Generator):
    f, z, spacing = _random_problem(device, gen, ndim=3)
    y = (0.3 * torch.randn(z.shape, generator=gen)).to(device)
    kwargs = {"spacing": spacing, "lo": -0.5, "hi": 1.5, "inv_l2": 1.0 / 8.0}
    kwargs |= {"weight": 0.4, "momentum": 0.3}
    return (f, z, y, torch.empty_like(z)), kwargs


fgp_step = FusedOp(
    name="fgp_step",
    launch=_launch_step,
    twin=_twin_step,
    example=_example_step,
    outputs=(2, 3),
    rtol=1e-5,
    atol=1e-5,
)
"""``fgp_step(f, z, y, z_next, *, spacing, lo, hi, inv_l2, weight, momentum)``: one FGP iteration.

With ``u = clamp(f + div z, lo, hi)``: ``y_new = proj_{|.| <= weight}(z + grad(u) * inv_l2)``,
``z_next = y_new + momentum * (y_new - y)``, ``y <- y_new``. ``z`` is only read (``z_next`` must
be another buffer: neighbouring elements read ``z`` while it is written), ``y`` is updated in
place.
"""


# --- tv_gap_partials: partial sums of the energy and duality-gap terms ------------------------


def gap_threads(batch: int, per_problem: int) -> int:
    """Threads (partial sums) per problem of a :data:`tv_gap_partials` launch.

    About :data:`GAP_THREADS_TARGET` threads in all, a multiple of 32 so that a warp never
    straddles two problems, at most one per element; a function of the shape only, so reruns
    sum in the same order.
    """
    wanted = -(-GAP_THREADS_TARGET // max(1, batch))
    wanted = max(32, -(-wanted // 32) * 32)
    return max(1, min(per_problem, wanted))


def _twin_gap_partials(
    f: torch.Tensor,
    y: torch.Tensor,
    u: torch.Tensor,
    primal_part: torch.Tensor,
    gap_part: torch.Tensor,
    *,
    spacing: Sequence[float],
    weight: float,
) -> None:
    _check_layout(f.shape, spacing)
    batch, per_problem = f.shape[0], f[0].numel()
    threads = primal_part.shape[-1]
    numel = f.numel()
    work = _scratch(u, 3 * numel)
    primal, gap = work[:numel].view(f.shape), work[numel : 2 * numel].view(f.shape)
    difference = work[2 * numel :]
    # primal accumulates |grad u|^2 and gap accumulates <y, grad u> until the end.
    primal.zero_()
    gap.zero_()
    for a, s in enumerate(spacing):
        dim = a + 1
        n = u.shape[dim]
        if n > 1:  # the boundary gradient is 0 and adds nothing
            rows = list(u.shape)
            rows[dim] = n - 1
            g = _forward_difference(u, dim, s, _shaped(difference, rows))
            primal.narrow(dim, 0, n - 1).addcmul_(g, g)
            gap.narrow(dim, 0, n - 1).addcmul_(y[a].narrow(dim, 0, n - 1), g)
    weighted_tv = primal.sqrt_().mul_(weight)
    torch.sub(weighted_tv, gap, out=gap)
    diff = torch.sub(u, f, out=difference.view(u.shape))
    primal.addcmul_(diff, diff, value=0.5)
    # Thread t of a problem sums its elements t, t + T, t + 2T, ... (T = threads).
    for terms, part in ((primal, primal_part), (gap, gap_part)):
        flat = terms.view(batch, per_problem)
        rows = per_problem // threads
        torch.sum(flat[:, : rows * threads].view(batch, rows, threads), dim=1, out=part)
        tail = per_problem - rows * threads
        if tail:
            part[:, :tail] += flat[:, rows * threads :]


def _launch_gap_partials(backend, f, y, u, primal_part, gap_part, *, spacing, weight) -> None:
    suffix, index, geometry = _launch_geometry(f, spacing)
    batch, threads = primal_part.shape
    fn = backend.function(SOURCE, f"tv_gap_partials_{suffix}")
    arrays = tuple(backend.array(t) for t in (f, y, u, primal_part, gap_part))
    scalars = (np.float32(weight), index(f[0].numel()), index(threads))
    backend.launch(fn, batch * threads, (*arrays, *geometry, *scalars))


def _example_gap(device, gen: torch.Generator):
    f, y, spacing = _random_problem(device, gen, ndim=2, batch=3)
    u = (f + 0.1 * torch.randn(f.shape, generator=gen).to(device)).contiguous()
    # 7 threads for 20 elements per problem: whole rounds and a tail, like a real launch.
    parts = (torch.empty((3, 7), device=device), torch.empty((3, 7), device=device))
    return (f, y, u, *parts), {"spacing": spacing, "weight": 0.3}


tv_gap_partials = FusedOp(
    name="tv_gap_partials",
    launch=_launch_gap_partials,
    twin=_twin_gap_partials,
    example=_example_gap,
    outputs=(3, 4),
    rtol=1e-5,
    atol=1e-5,
)
"""``tv_gap_partials(f, y, u, primal_part, gap_part, *, spacing, weight)``: energy partial sums.

With ``u = P_C(f + div y)`` and ``|y_i| <= weight``, the per-element terms are ``primal = 0.5 (u
- f)^2 + weight |grad u|`` and ``gap = weight |grad u| - <y, grad u>`` (each ``>= 0``). Their sums
are the primal energy ``P(u)`` and the duality gap ``P(u) - D_C(y)``, also with a box constraint
``C`` (the ``D_C`` terms of tv.md §3.1e reduce to ``<u, div y>`` after summation by parts). The
outputs have shape ``(B, T)`` (``T`` from :func:`gap_threads`): thread ``t`` of problem ``b`` sums,
in float32, the terms of the elements ``t, t + T, ...`` of that problem; summing each row in
float64 gives the per-problem totals. No image-sized term field is ever written.
"""
