"""One BaSiC ALM iteration as fused kernels (``basic_alm.cu``) beside their torch twins.

Every op takes the whole batch of ``P`` problems and a float32 ``active`` flag per problem; a
frozen problem (flag 0) keeps every output unchanged, so problems that converge at different
iterations need no host-side selection (no ``torch.nonzero``, no copies of the stacks). An
iteration is, in launches (:mod:`._alm`):

==========================  ==================================================================
DCT of the column mean      2 GEMMs (:mod:`._dct` as matrix products)
:data:`basic_shrink`        the flatfield's L1 step in DCT space (in place on ``flat_hat``)
inverse DCT                 2 GEMMs -> ``flat``
:data:`basic_sparse`        ``I_R`` and float64 row partials; 1 torch reduction of the partials
                            (over the leading axis, fixed order); the new baseline
:data:`basic_dual`          2 kernels: ``Y += mu F``; per-pixel sums over images (chunked)
``pixel_sums.sum``          1 torch reduction -> ``totals`` (``||F||^2`` and the darkfield's)
:data:`basic_status`        residual, convergence flags, ``mu`` (one thread per problem)
==========================  ==================================================================

that is 12 launches without the darkfield (plus one asynchronous copy of the ``P`` flags for the
host's stop check), and 7 more with it: :data:`basic_dark_shape`, 2 GEMMs, :data:`basic_shrink`,
2 GEMMs, :data:`basic_dark_finish`. No kernel stores ``I_B = S B + D``.

Every op but :data:`basic_shrink` (which runs on two different pairs of images) takes the pass's
:class:`~._alm_state.AlmState`: the launcher passes the fields its kernel takes in the ``.cu``
signature's order, the twin reads them by name, and the outputs are fields of the state
(``(0, "sparse")``: field ``sparse`` of argument 0).

Memory traffic per element of the ``(P, T, m, n)`` stacks (float32): ``basic_sparse`` reads
``I``, ``Y``, ``W`` and writes ``I_R`` (16 B); ``basic_dual`` reads ``I``, ``I_R``, ``Y`` and
writes ``Y`` (16 B). The per-problem images (``S``, ``D``), the baseline and the float64
partial sums are small against that (:func:`step_bytes`). The twins move more (temporaries).

Outputs are written in place, as every :class:`~napari_gpuscope.compute.kernels.FusedOp`. The
float64 partial sums live in ``scratch``, a float32 tensor the kernels read as ``double*``
(:func:`scratch_for`; the twins do not use it and leave it as it is).

This module holds the flatfield, sparse and dual steps and the tables of every op and kernel;
the end of an iteration is :mod:`._ops_status`, the darkfield step :mod:`._ops_dark`, and what
their launchers and twins share (the source file, the shrink, the active-problem update)
:mod:`._ops_shared`. Every op is importable from here.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import Backend, FusedOp
from . import _examples
from ._alm_state import AlmState
from ._geometry import (
    dc_scale,
    dual_chunks,
    scratch_doubles,
    scratch_for,
    sizes,
    sparse_lanes,
    step_bytes,
)
from ._ops_dark import basic_dark_finish, basic_dark_shape
from ._ops_shared import SOURCE, _flat_mean, _shrink, _where_active
from ._ops_status import basic_status

__all__ = [
    "AlmState",
    "basic_dark_finish",
    "basic_dark_shape",
    "basic_dual",
    "basic_shrink",
    "basic_sparse",
    "basic_status",
    "dual_chunks",
    "scratch_doubles",
    "scratch_for",
    "sparse_lanes",
    "step_bytes",
]


# ---- basic_shrink ------------------------------------------------------------------------------


def _shrink_launch(
    backend: Backend,
    x: torch.Tensor,
    y: torch.Tensor | None,
    threshold: torch.Tensor,
    active: torch.Tensor,
    out: torch.Tensor,
    *,
    with_y: bool = True,
) -> None:
    p = x.shape[0]
    n = x.numel()
    backend.launch(
        backend.function(SOURCE, "basic_shrink"),
        n,
        [
            *(backend.array(a) for a in (x, y if with_y else x, threshold, active, out)),
            np.int32(with_y),
            np.int64(n // p),
            np.int64(n),
        ],
    )


def basic_shrink_twin(
    x: torch.Tensor,
    y: torch.Tensor | None,
    threshold: torch.Tensor,
    active: torch.Tensor,
    out: torch.Tensor,
    *,
    with_y: bool = True,
) -> None:
    """``out = shrink(x + y, threshold[p])`` (or of ``x`` alone) for the active problems."""
    value = x + y if with_y else x
    shape = (-1, *([1] * (x.ndim - 1)))
    _where_active(active, _shrink(value, threshold.reshape(shape)), out)


basic_shrink = FusedOp(
    "basic_shrink",
    launch=_shrink_launch,
    twin=basic_shrink_twin,
    example=_examples.shrink_example,
    outputs=(4,),
)
"""``basic_shrink(x, y, threshold, active, out, with_y=True)``: the L1 (smoothness) step of the
flatfield (``flat_hat = shrink(flat_hat + dct(column), lam / mu)``, in place) and of the
darkfield (``with_y=False``)."""


# ---- basic_sparse ------------------------------------------------------------------------------


def _sparse_launch(backend: Backend, s: AlmState) -> None:
    p, t, m = sizes(s.images)
    lanes = sparse_lanes(p * t, m)
    a = backend.array
    inputs = (s.images, s.flat, s.flat_hat, s.baseline, s.dark, s.dual, s.weight, s.mu, s.active)
    backend.launch(
        backend.function(SOURCE, "basic_sparse"),
        p * t * lanes,
        [
            *(a(x) for x in inputs),
            a(s.sparse),
            a(s.scratch),
            np.float32(dc_scale(m)),
            np.int64(m),
            np.int64(t),
            np.int64(lanes),
            np.int64(p * t * lanes),
        ],
    )
    # The lanes' partial sums, added over the leading axis by one torch reduction (a fixed
    # order; coalesced) on the stream torch runs on, which is the bound backend's.
    partials = s.scratch.view(torch.float64)
    n_rows = p * t * 2
    row_sums = partials[lanes * n_rows : (lanes + 1) * n_rows]
    torch.sum(partials[: lanes * n_rows].view(lanes, n_rows), dim=0, out=row_sums)
    backend.launch(
        backend.function(SOURCE, "basic_baseline"),
        p * t,
        [
            a(row_sums.view(torch.float32)),
            a(s.active),
            a(s.rows),
            a(s.baseline),
            np.int64(t),
            np.int64(p * t),
        ],
    )


def basic_sparse_twin(s: AlmState) -> None:
    """For the active problems: ``I_R = shrink(I - S B - D + Y / mu, W / mu)``;
    ``rows[p, t] = (sum_xy (I - I_R), sum over S >= mean S of I - I_R)``; the baseline step
    ``B_t = max(0, rows[t, 0] / mean_t rows[., 0])``. ``scratch`` is not used."""
    p, t, m = sizes(s.images)
    inv_mu = (1.0 / s.mu)[:, None, None]
    # I - S B (the outer product as a batched GEMM), - D, + Y / mu, on (P, T, M) views
    value = torch.baddbmm(
        s.images.reshape(p, t, m), s.baseline.reshape(p, t, 1), s.flat.reshape(p, 1, m), alpha=-1
    )
    value.sub_(s.dark.reshape(p, 1, m)).addcmul_(s.dual.reshape(p, t, m), inv_mu)
    new = _shrink(value, s.weight.reshape(p, t, m) * inv_mu)
    _where_active(s.active, new.reshape(s.sparse.shape), s.sparse)
    rest = (s.images - s.sparse).reshape(p, t, m)
    inner = (s.flat.reshape(p, m) >= _flat_mean(s.flat_hat)[:, None]).to(rest.dtype)
    # Both row sums as one batched GEMM: rest @ [1, inner]
    columns = torch.stack((torch.ones_like(inner), inner), dim=-1)
    sums = torch.bmm(rest, columns).double()
    _where_active(s.active, sums.float(), s.rows)
    row = s.rows[..., 0].double()
    b = (row * t / row.sum(dim=1, keepdim=True)).float()
    _where_active(s.active, torch.where(b < 0, 0.0, b), s.baseline)


basic_sparse = FusedOp(
    "basic_sparse",
    launch=_sparse_launch,
    twin=basic_sparse_twin,
    example=_examples.sparse_example,
    outputs=((0, "baseline"), (0, "sparse"), (0, "rows")),
    # I - S B - D cancels terms of ~200 down to a few units: one float32 ulp of the inputs
    # (1.5e-5 at 200) is the kernel's (FMA) vs the twin's rounding, so the tolerance is
    # absolute at the inputs' scale (an H100 measured 3.05e-5, which atol=1e-6 rejected).
    atol=1e-4,
)
"""``basic_sparse(state)``: the sparse step, the per-image sums the baseline and darkfield steps
need, and the baseline step (in place on ``state.baseline``, ``sparse`` and ``rows``)."""


# ---- basic_dual --------------------------------------------------------------------------------


def _dual_launch(backend: Backend, s: AlmState, *, rho: float) -> None:
    p, t, m = sizes(s.images)
    chunks = dual_chunks(t, p * m)
    with_dark = np.int32(s.with_dark)
    a = backend.array
    inputs = (s.images, s.flat, s.baseline, s.dark, s.sparse, s.dual, s.mu, s.mu_max, s.active)
    backend.launch(
        backend.function(SOURCE, "basic_dual"),
        chunks * p * m,
        [
            *(a(x) for x in inputs),
            a(s.scratch),
            np.float32(rho),
            with_dark,
            np.int64(m),
            np.int64(t),
            np.int64(chunks),
            np.int64(p * m),
        ],
    )
    backend.launch(
        backend.function(SOURCE, "basic_dual_sums"),
        p * m,
        [
            *(a(x) for x in (s.scratch, s.flat, s.flat_hat, s.active, s.column, s.pixel_sums)),
            np.float32(dc_scale(m)),
            with_dark,
            np.int64(m),
            np.int64(t),
            np.int64(chunks),
            np.int64(p * m),
        ],
    )


def basic_dual_twin(s: AlmState, *, rho: float) -> None:
    """For the active problems, with ``F = I - S B - D - I_R``: ``dual += mu F``;
    ``column = mean_T(F + dual / min(rho mu, mu_max))``; ``pixel_sums[:, 0] = sum_T F^2`` and,
    when ``pixel_sums`` has 3 rows (darkfield), ``[:, 1] = sum over B < 1 of I - I_R`` and
    ``[:, 2] = (S >= mean S)``. ``scratch`` is not used."""
    p, t, m = sizes(s.images)
    rest = (s.images - s.sparse).reshape(p, t, m)
    # F = (I - I_R) - S B - D, the outer product S B as a batched GEMM
    residual = torch.baddbmm(rest, s.baseline.reshape(p, t, 1), s.flat.reshape(p, 1, m), alpha=-1)
    residual.sub_(s.dark.reshape(p, 1, m))
    updated = torch.addcmul(s.dual.reshape(p, t, m), residual, s.mu[:, None, None])
    _where_active(s.active, updated.reshape(s.dual.shape), s.dual)
    inv_next = (1.0 / torch.minimum(s.mu * rho, s.mu_max))[:, None, None]
    col = torch.addcmul(residual, s.dual.reshape(p, t, m), inv_next).sum(dim=1) / t
    _where_active(s.active, col.reshape(s.column.shape), s.column)
    sums = [residual.square_().sum(dim=1)]
    if s.with_dark:
        valid = (s.baseline < 1).to(rest.dtype).reshape(p, 1, t)
        inner = s.flat.reshape(p, m) >= _flat_mean(s.flat_hat)[:, None]
        sums += [torch.bmm(valid, rest)[:, 0], inner]
    new = torch.stack([x.to(s.pixel_sums.dtype) for x in sums], dim=1)
    _where_active(s.active, new.reshape(s.pixel_sums.shape), s.pixel_sums)


basic_dual = FusedOp(
    "basic_dual",
    launch=_dual_launch,
    twin=basic_dual_twin,
    example=_examples.dual_example,
    outputs=((0, "dual"), (0, "column"), (0, "pixel_sums")),
    rtol=1e-5,
    atol=1e-3,
)
"""``basic_dual(state, rho=...)``: the dual step with the sums over images (float64 partials
over chunks of the image axis, added per pixel by a second kernel)."""

OPS = (
    basic_shrink,
    basic_sparse,
    basic_dual,
    basic_status,
    basic_dark_shape,
    basic_dark_finish,
)
"""Every fused op of the flat-field fit, in iteration order."""

KERNELS = (
    "basic_shrink",
    "basic_sparse",
    "basic_baseline",
    "basic_dual",
    "basic_dual_sums",
    "basic_status",
    "basic_dark_shape",
    "basic_dark_finish",
)
"""Every ``__global__`` kernel of ``basic_alm.cu`` (for compute-sanitizer and ncu filters)."""
