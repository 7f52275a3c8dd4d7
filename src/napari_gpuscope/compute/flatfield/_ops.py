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
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import Backend, FusedOp, KernelSource
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

SOURCE = KernelSource("basic_alm.cu", beside=__file__)


def _flat_mean(flat_hat: torch.Tensor) -> torch.Tensor:
    p = flat_hat.shape[0]
    return flat_hat.reshape(p, -1)[:, 0] * dc_scale(flat_hat[0].numel())


def _shrink(x: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """``sign(x) max(|x| - threshold, 0)`` as the kernels round it (copysign; NaN stays)."""
    return torch.copysign((x.abs() - threshold).clamp_(min=0), x)


def _where_active(active: torch.Tensor, new: torch.Tensor, out: torch.Tensor) -> None:
    """``out[p] = new[p]`` for the active problems (frozen ones keep their values).

    On the CPU the flags are host memory: with every problem active this is a plain copy (read
    through NumPy, no torch call); on a GPU it never reads them (no sync).
    """
    if out.device.type == "cpu" and active.numpy().all():
        out.copy_(new)
        return
    flags = (active != 0).reshape(-1, *([1] * (out.ndim - 1)))
    torch.where(flags, new, out, out=out)


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


# ---- basic_status ------------------------------------------------------------------------------


def _status_launch(
    backend: Backend, s: AlmState, *, rho: float, tol: float, ent_dark: float
) -> None:
    p, t = s.baseline.shape
    m = s.flat_hat[0].numel()
    # The kernel's signature, in order.
    tensors = (
        s.totals,
        s.rows,
        s.baseline,
        s.flat_hat,
        s.image_norm,
        s.offset_max,
        s.lam_flat,
        s.lam_dark,
        s.mu,
        s.mu_max,
        s.active,
        s.active_next,
        s.iterations,
        s.ratio,
        s.thr_flat,
        s.thr_dark,
        s.offset,
        s.dark_values,
    )
    backend.launch(
        backend.function(SOURCE, "basic_status"),
        p,
        [
            *(backend.array(x) for x in tensors),
            np.float32(rho),
            np.float32(tol),
            np.float32(ent_dark),
            np.float32(dc_scale(m)),
            np.int32(s.totals.shape[1] == 3),
            np.int64(m),
            np.int64(t),
            np.int64(p),
        ],
    )


def _dark_scalars(s: AlmState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The darkfield heuristic's per-problem values (float64): offset, count, b_mean, center."""
    t = s.baseline.shape[1]
    m = s.flat_hat[0].numel()
    n_in = s.totals[:, 2].double()
    n_out = m - n_in
    flat_mean = _flat_mean(s.flat_hat).double()
    row = s.rows.double()
    total_mean = row[..., 0].sum(dim=1) / (t * m)
    mean_in = row[..., 1] / n_in.clamp_min(1)[:, None]
    mean_out = (row[..., 0] - row[..., 1]) / n_out.clamp_min(1)[:, None]
    coeff = (mean_in - mean_out) / (total_mean[:, None] + 1e-6)
    valid = s.baseline < 1
    b = torch.where(valid, s.baseline.double(), 0.0)
    c = torch.where(valid, coeff, 0.0)
    count = valid.sum(dim=1).double()
    s1, s2, s3, s4 = (b * b).sum(1), b.sum(1), c.sum(1), (b * c).sum(1)
    denominator = s2 * s3 - count * s4
    z = torch.where(denominator == 0, 0.0, (s1 * s3 - s2 * s4) / denominator)
    z = torch.where(z < 0, 0.0, z)  # NaN stays NaN (as clamp_min and minimum)
    limit = s.offset_max.double() / flat_mean
    z = torch.where((z > limit) | limit.isnan(), limit, z)
    safe = count.clamp_min(1)
    b_mean = s2 / safe
    center = s.totals[:, 1].double() / safe / m - b_mean * flat_mean
    return torch.where(count > 0, z, 0.0), count, b_mean, center


def basic_status_twin(s: AlmState, *, rho: float, tol: float, ent_dark: float) -> None:
    """Per active problem: ``ratio = sqrt(totals[:, 0]) / image_norm``, ``iterations += 1``,
    ``mu <- min(rho mu, mu_max)``, ``thr_flat = lam_flat / mu``; with the darkfield
    (``totals`` has 3 columns) ``thr_dark = lam_dark / (ent_dark mu_old)`` and the MATLAB
    heuristic's offset and ``dark_values = (count, b_mean, center)``. ``active_next`` = active,
    ratio > tol and finite (0 for frozen problems)."""
    active = s.active
    r = s.totals[:, 0].sqrt() / s.image_norm
    step = s.mu.clone()
    if s.totals.shape[1] == 3:
        _where_active(active, s.lam_dark / (ent_dark * step), s.thr_dark)
        z, count, b_mean, center = _dark_scalars(s)
        _where_active(active, z.float(), s.offset)
        values = torch.stack((count, b_mean, center), dim=1).float()
        _where_active(active, values, s.dark_values)
    following = torch.minimum(step * rho, s.mu_max)
    _where_active(active, r, s.ratio)
    _where_active(active, s.iterations + 1, s.iterations)
    _where_active(active, following, s.mu)
    _where_active(active, s.lam_flat / following, s.thr_flat)
    s.active_next.copy_(((active != 0) & (r > tol) & torch.isfinite(r)).float())


basic_status = FusedOp(
    "basic_status",
    launch=_status_launch,
    twin=basic_status_twin,
    example=_examples.status_example,
    outputs=tuple(
        (0, name)
        for name in (
            "mu",
            "active_next",
            "iterations",
            "ratio",
            "thr_flat",
            "thr_dark",
            "offset",
            "dark_values",
        )
    ),
)
"""``basic_status(state, rho=..., tol=..., ent_dark=...)``: the end of an iteration, one thread
per problem."""


# ---- darkfield -----------------------------------------------------------------------------------


def _dark_shape_launch(backend: Backend, s: AlmState) -> None:
    p = s.flat.shape[0]
    m = s.flat[0].numel()
    inputs = (s.pixel_sums, s.flat, s.flat_hat, s.offset, s.dark_values, s.active, s.work)
    backend.launch(
        backend.function(SOURCE, "basic_dark_shape"),
        p * m,
        [
            *(backend.array(x) for x in inputs),
            np.float32(dc_scale(m)),
            np.int64(m),
            np.int64(p * m),
        ],
    )


def basic_dark_shape_twin(s: AlmState) -> None:
    """``work = pixel_sums[:, 1] / count - b_mean S - center - D_Z (mean S - S)`` (active)."""
    count, b_mean, center = (v[:, None, None] for v in s.dark_values.unbind(dim=1))
    z = s.offset[:, None, None] * (_flat_mean(s.flat_hat)[:, None, None] - s.flat)
    new = s.pixel_sums[:, 1] / count.clamp_min(1) - b_mean * s.flat - center - z
    _where_active(s.active, new, s.work)


basic_dark_shape = FusedOp(
    "basic_dark_shape",
    launch=_dark_shape_launch,
    twin=basic_dark_shape_twin,
    example=_examples.dark_shape_example,
    outputs=((0, "work"),),
    atol=1e-4,
)
"""``basic_dark_shape(state)``: the image the darkfield's smoothness step works on (into
``state.work``)."""


def _dark_finish_launch(backend: Backend, s: AlmState) -> None:
    p = s.flat.shape[0]
    m = s.flat[0].numel()
    # The kernel's signature, in order (``work`` is its ``smooth``).
    tensors = (
        s.work,
        s.thr_dark,
        s.flat,
        s.flat_hat,
        s.offset,
        s.dark_values,
        s.active,
        s.dark,
        s.dark_before,
        s.column,
    )
    backend.launch(
        backend.function(SOURCE, "basic_dark_finish"),
        p * m,
        [
            *(backend.array(x) for x in tensors),
            np.float32(dc_scale(m)),
            np.int64(m),
            np.int64(p * m),
        ],
    )


def basic_dark_finish_twin(s: AlmState) -> None:
    """``D_R = shrink(work, thr_dark) + D_Z (mean S - S)`` where some image has ``B < 1``
    (else unchanged); ``column -= D_R - D_R(old)``; ``dark_before = D_R(old)`` (active)."""
    z = s.offset[:, None, None] * (_flat_mean(s.flat_hat)[:, None, None] - s.flat)
    updated = _shrink(s.work, s.thr_dark[:, None, None]) + z
    updated = torch.where(s.dark_values[:, 0, None, None] > 0, updated, s.dark)
    _where_active(s.active, s.column - (updated - s.dark), s.column)
    _where_active(s.active, s.dark, s.dark_before)
    _where_active(s.active, updated, s.dark)


basic_dark_finish = FusedOp(
    "basic_dark_finish",
    launch=_dark_finish_launch,
    twin=basic_dark_finish_twin,
    example=_examples.dark_finish_example,
    outputs=((0, "dark"), (0, "dark_before"), (0, "column")),
    atol=1e-4,
)
"""``basic_dark_finish(state)``: the new darkfield (from the smoothed ``state.work``), folded
into the next flatfield step's column mean."""

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
