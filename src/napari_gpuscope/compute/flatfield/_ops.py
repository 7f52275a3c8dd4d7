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

Memory traffic per element of the ``(P, T, m, n)`` stacks (float32): ``basic_sparse`` reads
``I``, ``Y``, ``W`` and writes ``I_R`` (16 B); ``basic_dual`` reads ``I``, ``I_R``, ``Y`` and
writes ``Y`` (16 B). The per-problem images (``S``, ``D``), the baseline and the float64
partial sums are small against that (:func:`step_bytes`). The twins move more (temporaries).

Outputs are written in place, as every :class:`~napari_gpuscope.compute.kernels.FusedOp`. The
float64 partial sums live in ``scratch``, a float32 tensor the kernels read as ``double*``
(:func:`scratch_for`; the twins do not use it and leave it as it is).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..kernels import Backend, FusedOp, KernelSource

__all__ = [
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

SPARSE_THREADS = 2**17
"""Threads ``basic_sparse`` aims for: each image gets this / (P T) lanes (a power of two)."""
MIN_LANE_PIXELS = 16
"""Pixels each ``basic_sparse`` lane sums at least (its two float64 partials stay small)."""
MAX_LANES = 1024
DUAL_THREADS = 2**18
"""Threads ``basic_dual`` aims for: the image axis is split into chunks until P M C reaches it."""
MIN_CHUNK_IMAGES = 8
"""Images each ``basic_dual`` chunk holds at least (its float64 partials stay small)."""


def sparse_lanes(n_images: int, n_pixels: int) -> int:
    """Lanes (threads) per image of ``basic_sparse`` for ``n_images = P T`` images of
    ``n_pixels`` pixels: a power of two from 32 to 1024.

    Examples
    --------
    >>> sparse_lanes(1000, 128 * 128), sparse_lanes(50, 128 * 128), sparse_lanes(10, 35)
    (256, 1024, 32)
    """
    lanes = 32
    while (
        lanes < MAX_LANES
        and 2 * lanes * MIN_LANE_PIXELS <= n_pixels
        and lanes * n_images < SPARSE_THREADS
    ):
        lanes *= 2
    return lanes


def dual_chunks(n_images: int, n_columns: int) -> int:
    """Chunks of the image axis of ``basic_dual`` for ``n_images = T`` images per problem and
    ``n_columns = P M`` pixels.

    Examples
    --------
    >>> dual_chunks(1000, 128 * 128), dual_chunks(50, 128 * 128), dual_chunks(5, 63)
    (16, 4, 1)
    """
    chunks = 1
    while 2 * chunks * MIN_CHUNK_IMAGES <= n_images and chunks * n_columns < DUAL_THREADS:
        chunks *= 2
    return chunks


def _sizes(images: torch.Tensor) -> tuple[int, int, int]:
    p, t = images.shape[:2]
    return p, t, images[0, 0].numel()


def scratch_doubles(images: torch.Tensor, with_dark: bool) -> dict[str, int]:
    """float64 partial sums :data:`basic_sparse` and :data:`basic_dual` write for the
    ``(P, T, m, n)`` stack ``images`` (the darkfield adds a third sum to the dual's)."""
    p, t, m = _sizes(images)
    return {
        "basic_sparse": 2 * p * t * (sparse_lanes(p * t, m) + 1),  # partials, row sums
        "basic_dual": (3 if with_dark else 2) * dual_chunks(t, p * m) * p * m,
    }


def scratch_for(images: torch.Tensor, with_dark: bool, op: str | None = None) -> torch.Tensor:
    """The float64 partial-sum buffer for the ``(P, T, m, n)`` stack ``images``, as the float32
    tensor the ops take: for both ops (they use it in turn, so one buffer serves an iteration),
    or sized exactly for ``op`` (``"basic_sparse"``/``"basic_dual"``: what the kit hands to
    compute-sanitizer, so an overrun shows)."""
    sizes = scratch_doubles(images, with_dark)
    doubles = max(sizes.values()) if op is None else sizes[op]
    return torch.empty(2 * doubles, dtype=torch.float32, device=images.device)


def step_bytes(images: torch.Tensor, with_dark: bool) -> dict[str, int]:
    """Device memory traffic of ``basic_sparse`` and ``basic_dual`` on the ``(P, T, m, n)``
    stack, in bytes: 16 B per stack element each (three float32 reads and one write), plus the
    per-problem images, baselines and float64 partials (what the roofline of the kit uses)."""
    p, t, m = _sizes(images)
    n = p * t * m
    lanes = sparse_lanes(p * t, m)
    chunks = dual_chunks(t, p * m)
    sums = 3 if with_dark else 2
    images_small = 4 * p * m  # one (P, M) float32 image
    sparse = 16 * n + 3 * images_small + 2 * 8 * p * t * lanes + 2 * 4 * p * t
    dual = 16 * n + 2 * images_small + 8 * p * t + sums * 8 * chunks * p * m
    return {"basic_sparse": sparse, "basic_dual": dual}


def _dc_scale(n_pixels: int) -> float:
    """``1 / sqrt(M)`` rounded to float32: ``flat_hat[0] * scale`` is the mean of the image
    (orthonormal DCT-II), as the kernels compute it."""
    return float(np.float32(1.0 / math.sqrt(n_pixels)))


def _flat_mean(flat_hat: torch.Tensor) -> torch.Tensor:
    p = flat_hat.shape[0]
    return flat_hat.reshape(p, -1)[:, 0] * _dc_scale(flat_hat[0].numel())


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
    backend: Backend, x, y, threshold, active, out, *, with_y: bool = True
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


def basic_shrink_twin(x, y, threshold, active, out, *, with_y: bool = True) -> None:
    """``out = shrink(x + y, threshold[p])`` (or of ``x`` alone) for the active problems."""
    value = x + y if with_y else x
    shape = (-1, *([1] * (x.ndim - 1)))
    _where_active(active, _shrink(value, threshold.reshape(shape)), out)


def _shrink_example(device, generator):
    def rand(*size):
        return torch.rand(size, generator=generator).to(device)

    x = 4 * rand(3, 6, 7) - 2
    return (x, rand(3, 6, 7) - 0.5, rand(3), torch.tensor([1.0, 0.0, 1.0], device=device),
            x.clone()), {"with_y": True}


basic_shrink = FusedOp(
    "basic_shrink",
    launch=_shrink_launch,
    twin=basic_shrink_twin,
    example=_shrink_example,
    outputs=(4,),
)
"""``basic_shrink(x, y, threshold, active, out, with_y=True)``: the L1 (smoothness) step of the
flatfield (``flat_hat = shrink(flat_hat + dct(column), lam / mu)``, in place) and of the
darkfield (``with_y=False``)."""


# ---- basic_sparse ------------------------------------------------------------------------------


def _sparse_launch(
    backend: Backend,
    images,
    flat,
    flat_hat,
    baseline,
    dark,
    dual,
    weight,
    mu,
    active,
    sparse,
    rows,
    scratch,
) -> None:
    p, t, m = _sizes(images)
    lanes = sparse_lanes(p * t, m)
    a = backend.array
    backend.launch(
        backend.function(SOURCE, "basic_sparse"),
        p * t * lanes,
        [
            *(a(x) for x in (images, flat, flat_hat, baseline, dark, dual, weight, mu, active)),
            a(sparse),
            a(scratch),
            np.float32(_dc_scale(m)),
            np.int64(m),
            np.int64(t),
            np.int64(lanes),
            np.int64(p * t * lanes),
        ],
    )
    # The lanes' partial sums, added over the leading axis by one torch reduction (a fixed
    # order; coalesced) on the stream torch runs on, which is the bound backend's.
    partials = scratch.view(torch.float64)
    n_rows = p * t * 2
    row_sums = partials[lanes * n_rows : (lanes + 1) * n_rows]
    torch.sum(partials[: lanes * n_rows].view(lanes, n_rows), dim=0, out=row_sums)
    backend.launch(
        backend.function(SOURCE, "basic_baseline"),
        p * t,
        [
            a(row_sums.view(torch.float32)),
            a(active),
            a(rows),
            a(baseline),
            np.int64(t),
            np.int64(p * t),
        ],
    )


def basic_sparse_twin(
    images, flat, flat_hat, baseline, dark, dual, weight, mu, active, sparse, rows, scratch
) -> None:
    """For the active problems: ``I_R = shrink(I - S B - D + Y / mu, W / mu)``;
    ``rows[p, t] = (sum_xy (I - I_R), sum over S >= mean S of I - I_R)``; the baseline step
    ``B_t = max(0, rows[t, 0] / mean_t rows[., 0])``. ``scratch`` is not used."""
    p, t, m = _sizes(images)
    inv_mu = (1.0 / mu)[:, None, None]
    # I - S B (the outer product as a batched GEMM), - D, + Y / mu, on (P, T, M) views
    value = torch.baddbmm(
        images.reshape(p, t, m), baseline.reshape(p, t, 1), flat.reshape(p, 1, m), alpha=-1
    )
    value.sub_(dark.reshape(p, 1, m)).addcmul_(dual.reshape(p, t, m), inv_mu)
    new = _shrink(value, weight.reshape(p, t, m) * inv_mu)
    _where_active(active, new.reshape(sparse.shape), sparse)
    rest = (images - sparse).reshape(p, t, m)
    inner = (flat.reshape(p, m) >= _flat_mean(flat_hat)[:, None]).to(rest.dtype)
    # Both row sums as one batched GEMM: rest @ [1, inner]
    columns = torch.stack((torch.ones_like(inner), inner), dim=-1)
    sums = torch.bmm(rest, columns).double()
    _where_active(active, sums.float(), rows)
    row = rows[..., 0].double()
    b = (row * t / row.sum(dim=1, keepdim=True)).float()
    _where_active(active, torch.where(b < 0, 0.0, b), baseline)


def _example_state(
    device: torch.device,
    generator: torch.Generator,
    p: int = 2,
    t: int = 5,
    shape: tuple[int, int] = (7, 9),
):
    """A random ALM state: images ~ 50-150, flat ~ 0.5-1.5, baseline ~ 50-150 (as the kit's and
    the tests' ops take them); ``mu`` ~ 0.01-0.03."""

    def rand(*size):
        return torch.rand(size, generator=generator).to(device)

    images = 100 * rand(p, t, *shape) + 50
    flat = 0.5 + rand(p, *shape)
    baseline = 50 + 100 * rand(p, t)
    dark = 10 * rand(p, *shape)
    dual = rand(p, t, *shape) - 0.5
    weight = rand(p, t, *shape) + 0.1
    mu = 0.01 + 0.02 * rand(p)
    return images, flat, baseline, dark, dual, weight, mu


def _flat_hat_for(flat: torch.Tensor) -> torch.Tensor:
    """A coefficient array whose DC term is ``flat``'s mean (what the kernels read of it)."""
    hat = torch.randn(flat.shape, generator=torch.Generator().manual_seed(1)).to(flat.device)
    mean = flat.reshape(flat.shape[0], -1).mean(dim=1)
    hat.reshape(flat.shape[0], -1)[:, 0] = mean / _dc_scale(flat[0].numel())
    return hat


def _active_example(p: int, device) -> torch.Tensor:
    """Every other problem frozen (the first active)."""
    return (torch.arange(p, device=device) % 2 == 0).float()


def _sparse_example(device, generator, p: int = 3, t: int = 5, shape=(7, 9)):
    images, flat, baseline, dark, dual, weight, mu = _example_state(device, generator, p, t, shape)
    # The baseline is relative (mean 1) in the fit; its scale does not matter to the kernels.
    baseline = baseline / 100
    rows = torch.rand((p, t, 2), generator=generator).to(device)
    return (
        images,
        flat,
        _flat_hat_for(flat),
        baseline,
        dark,
        dual,
        weight,
        mu,
        _active_example(p, device),
        torch.rand(images.shape, generator=generator).to(device),
        rows,
        # Zeroed: the self-test copies every argument, and a copy of never-written device
        # memory is what compute-sanitizer's initcheck reports (the kernels write it first).
        scratch_for(images, True).zero_(),
    ), {}


basic_sparse = FusedOp(
    "basic_sparse",
    launch=_sparse_launch,
    twin=basic_sparse_twin,
    example=_sparse_example,
    outputs=(3, 9, 10),
    # I - S B - D cancels terms of ~200 down to a few units: one float32 ulp of the inputs
    # (1.5e-5 at 200) is the kernel's (FMA) vs the twin's rounding, so the tolerance is
    # absolute at the inputs' scale (an H100 measured 3.05e-5, which atol=1e-6 rejected).
    atol=1e-4,
)
"""``basic_sparse(images, flat, flat_hat, baseline, dark, dual, weight, mu, active, sparse, rows,
scratch)``: the sparse step, the per-image sums the baseline and darkfield steps need, and the
baseline step (in place on ``baseline``)."""


# ---- basic_dual --------------------------------------------------------------------------------


def _dual_launch(
    backend: Backend,
    images,
    flat,
    flat_hat,
    baseline,
    dark,
    sparse,
    dual,
    mu,
    mu_max,
    active,
    column,
    pixel_sums,
    scratch,
    *,
    rho: float,
) -> None:
    p, t, m = _sizes(images)
    chunks = dual_chunks(t, p * m)
    with_dark = np.int32(pixel_sums.shape[1] == 3)
    a = backend.array
    backend.launch(
        backend.function(SOURCE, "basic_dual"),
        chunks * p * m,
        [
            *(a(x) for x in (images, flat, baseline, dark, sparse, dual, mu, mu_max, active)),
            a(scratch),
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
            *(a(x) for x in (scratch, flat, flat_hat, active, column, pixel_sums)),
            np.float32(_dc_scale(m)),
            with_dark,
            np.int64(m),
            np.int64(t),
            np.int64(chunks),
            np.int64(p * m),
        ],
    )


def basic_dual_twin(
    images,
    flat,
    flat_hat,
    baseline,
    dark,
    sparse,
    dual,
    mu,
    mu_max,
    active,
    column,
    pixel_sums,
    scratch,
    *,
    rho: float,
) -> None:
    """For the active problems, with ``F = I - S B - D - I_R``: ``dual += mu F``;
    ``column = mean_T(F + dual / min(rho mu, mu_max))``; ``pixel_sums[:, 0] = sum_T F^2`` and,
    when ``pixel_sums`` has 3 rows (darkfield), ``[:, 1] = sum over B < 1 of I - I_R`` and
    ``[:, 2] = (S >= mean S)``. ``scratch`` is not used."""
    p, t, m = _sizes(images)
    rest = (images - sparse).reshape(p, t, m)
    # F = (I - I_R) - S B - D, the outer product S B as a batched GEMM
    residual = torch.baddbmm(rest, baseline.reshape(p, t, 1), flat.reshape(p, 1, m), alpha=-1)
    residual.sub_(dark.reshape(p, 1, m))
    updated = torch.addcmul(dual.reshape(p, t, m), residual, mu[:, None, None])
    _where_active(active, updated.reshape(dual.shape), dual)
    inv_next = (1.0 / torch.minimum(mu * rho, mu_max))[:, None, None]
    col = torch.addcmul(residual, dual.reshape(p, t, m), inv_next).sum(dim=1) / t
    _where_active(active, col.reshape(column.shape), column)
    sums = [residual.square_().sum(dim=1)]
    if pixel_sums.shape[1] == 3:
        valid = (baseline < 1).to(rest.dtype).reshape(p, 1, t)
        inner = flat.reshape(p, m) >= _flat_mean(flat_hat)[:, None]
        sums += [torch.bmm(valid, rest)[:, 0], inner]
    new = torch.stack([x.to(pixel_sums.dtype) for x in sums], dim=1)
    _where_active(active, new.reshape(pixel_sums.shape), pixel_sums)


def _dual_example(device, generator, p: int = 3, t: int = 20, shape=(7, 9)):
    images, flat, baseline, dark, dual, _, mu = _example_state(device, generator, p, t, shape)
    baseline = baseline / 100  # about half the images below 1 (the darkfield's "valid" ones)
    sparse = 20 * (torch.rand(images.shape, generator=generator).to(device) - 0.5)
    return (
        images,
        flat,
        _flat_hat_for(flat),
        baseline,
        dark,
        sparse,
        dual,
        mu,
        1.2 * mu,
        _active_example(p, device),
        torch.rand(flat.shape, generator=generator).to(device),
        torch.rand((p, 3, *shape), generator=generator).to(device),
        # Zeroed: the self-test copies every argument, and a copy of never-written device
        # memory is what compute-sanitizer's initcheck reports (the kernels write it first).
        scratch_for(images, True).zero_(),
    ), {"rho": 1.5}


basic_dual = FusedOp(
    "basic_dual",
    launch=_dual_launch,
    twin=basic_dual_twin,
    example=_dual_example,
    outputs=(6, 10, 11),
    rtol=1e-5,
    atol=1e-3,
)
"""``basic_dual(images, flat, flat_hat, baseline, dark, sparse, dual, mu, mu_max, active, column,
pixel_sums, scratch, rho=...)``: the dual step with the sums over images (float64 partials over
chunks of the image axis, added per pixel by a second kernel)."""


# ---- basic_status ------------------------------------------------------------------------------


def _status_launch(
    backend: Backend,
    totals,
    rows,
    baseline,
    flat_hat,
    image_norm,
    offset_max,
    lam_flat,
    lam_dark,
    mu,
    mu_max,
    active,
    active_next,
    iterations,
    ratio,
    thr_flat,
    thr_dark,
    offset,
    dark_values,
    *,
    rho: float,
    tol: float,
    ent_dark: float,
) -> None:
    p, t = baseline.shape
    m = flat_hat[0].numel()
    tensors = (
        totals,
        rows,
        baseline,
        flat_hat,
        image_norm,
        offset_max,
        lam_flat,
        lam_dark,
        mu,
        mu_max,
        active,
        active_next,
        iterations,
        ratio,
        thr_flat,
        thr_dark,
        offset,
        dark_values,
    )
    backend.launch(
        backend.function(SOURCE, "basic_status"),
        p,
        [
            *(backend.array(x) for x in tensors),
            np.float32(rho),
            np.float32(tol),
            np.float32(ent_dark),
            np.float32(_dc_scale(m)),
            np.int32(totals.shape[1] == 3),
            np.int64(m),
            np.int64(t),
            np.int64(p),
        ],
    )


def _dark_scalars(totals, rows, baseline, flat_hat, offset_max):
    """The darkfield heuristic's per-problem values (float64): offset, count, b_mean, center."""
    t = baseline.shape[1]
    m = flat_hat[0].numel()
    n_in = totals[:, 2].double()
    n_out = m - n_in
    flat_mean = _flat_mean(flat_hat).double()
    row = rows.double()
    total_mean = row[..., 0].sum(dim=1) / (t * m)
    mean_in = row[..., 1] / n_in.clamp_min(1)[:, None]
    mean_out = (row[..., 0] - row[..., 1]) / n_out.clamp_min(1)[:, None]
    coeff = (mean_in - mean_out) / (total_mean[:, None] + 1e-6)
    valid = baseline < 1
    b = torch.where(valid, baseline.double(), 0.0)
    c = torch.where(valid, coeff, 0.0)
    count = valid.sum(dim=1).double()
    s1, s2, s3, s4 = (b * b).sum(1), b.sum(1), c.sum(1), (b * c).sum(1)
    denominator = s2 * s3 - count * s4
    z = torch.where(denominator == 0, 0.0, (s1 * s3 - s2 * s4) / denominator)
    z = torch.where(z < 0, 0.0, z)  # NaN stays NaN (as clamp_min and minimum)
    limit = offset_max.double() / flat_mean
    z = torch.where((z > limit) | limit.isnan(), limit, z)
    safe = count.clamp_min(1)
    b_mean = s2 / safe
    center = totals[:, 1].double() / safe / m - b_mean * flat_mean
    return torch.where(count > 0, z, 0.0), count, b_mean, center


def basic_status_twin(
    totals,
    rows,
    baseline,
    flat_hat,
    image_norm,
    offset_max,
    lam_flat,
    lam_dark,
    mu,
    mu_max,
    active,
    active_next,
    iterations,
    ratio,
    thr_flat,
    thr_dark,
    offset,
    dark_values,
    *,
    rho: float,
    tol: float,
    ent_dark: float,
) -> None:
    """Per active problem: ``ratio = sqrt(totals[:, 0]) / image_norm``, ``iterations += 1``,
    ``mu <- min(rho mu, mu_max)``, ``thr_flat = lam_flat / mu``; with the darkfield
    (``totals`` has 3 columns) ``thr_dark = lam_dark / (ent_dark mu_old)`` and the MATLAB
    heuristic's offset and ``dark_values = (count, b_mean, center)``. ``active_next`` = active,
    ratio > tol and finite (0 for frozen problems)."""
    r = totals[:, 0].sqrt() / image_norm
    step = mu.clone()
    if totals.shape[1] == 3:
        _where_active(active, lam_dark / (ent_dark * step), thr_dark)
        z, count, b_mean, center = _dark_scalars(totals, rows, baseline, flat_hat, offset_max)
        _where_active(active, z.float(), offset)
        _where_active(active, torch.stack((count, b_mean, center), dim=1).float(), dark_values)
    following = torch.minimum(step * rho, mu_max)
    _where_active(active, r, ratio)
    _where_active(active, iterations + 1, iterations)
    _where_active(active, following, mu)
    _where_active(active, lam_flat / following, thr_flat)
    active_next.copy_(((active != 0) & (r > tol) & torch.isfinite(r)).float())


def _status_example(device, generator, p: int = 3, t: int = 20, m: int = 6 * 7):
    def rand(*size):
        return torch.rand(size, generator=generator).to(device)

    rows = 100 * m * (0.5 + rand(p, t, 2))
    rows[..., 1] *= 0.5  # the inner pixels' share
    baseline = 0.5 + rand(p, t)  # about half below 1
    totals = torch.stack((m * rand(p), 80 * m * rand(p), m * (0.3 + 0.4 * rand(p))), dim=1)
    flat = 0.5 + rand(p, 6, 7)
    return (
        totals.floor(),
        rows,
        baseline,
        _flat_hat_for(flat),
        50 * m * (1 + rand(p)),  # image_norm
        40 + 20 * rand(p),  # offset_max
        rand(p),  # lam_flat
        0.1 * rand(p),  # lam_dark
        0.01 + rand(p),  # mu
        1e3 * (1 + rand(p)),  # mu_max
        _active_example(p, device),
        rand(p),  # active_next (written for every problem)
        torch.full((p,), 3.0, device=device),
        rand(p),
        rand(p),
        rand(p),
        rand(p),
        rand(p, 3),
    ), {"rho": 1.5, "tol": 1e-4, "ent_dark": 10.0}


basic_status = FusedOp(
    "basic_status",
    launch=_status_launch,
    twin=basic_status_twin,
    example=_status_example,
    outputs=(8, 11, 12, 13, 14, 15, 16, 17),
)
"""``basic_status(totals, rows, baseline, flat_hat, image_norm, offset_max, lam_flat, lam_dark,
mu, mu_max, active, active_next, iterations, ratio, thr_flat, thr_dark, offset, dark_values,
rho=..., tol=..., ent_dark=...)``: the end of an iteration, one thread per problem."""


# ---- darkfield -----------------------------------------------------------------------------------


def _dark_shape_launch(
    backend: Backend, pixel_sums, flat, flat_hat, offset, dark_values, active, shape
) -> None:
    p = flat.shape[0]
    m = flat[0].numel()
    backend.launch(
        backend.function(SOURCE, "basic_dark_shape"),
        p * m,
        [
            *(
                backend.array(x)
                for x in (pixel_sums, flat, flat_hat, offset, dark_values, active, shape)
            ),
            np.float32(_dc_scale(m)),
            np.int64(m),
            np.int64(p * m),
        ],
    )


def basic_dark_shape_twin(pixel_sums, flat, flat_hat, offset, dark_values, active, shape) -> None:
    """``shape = pixel_sums[:, 1] / count - b_mean S - center - D_Z (mean S - S)`` (active)."""
    count, b_mean, center = (v[:, None, None] for v in dark_values.unbind(dim=1))
    z = offset[:, None, None] * (_flat_mean(flat_hat)[:, None, None] - flat)
    new = pixel_sums[:, 1] / count.clamp_min(1) - b_mean * flat - center - z
    _where_active(active, new, shape)


def _dark_example(device, generator, p: int = 3, shape=(6, 7)):
    def rand(*size):
        return torch.rand(size, generator=generator).to(device)

    flat = 0.5 + rand(p, *shape)
    values = torch.stack((torch.tensor([4.0, 0.0, 7.0]), 0.5 + rand(p).cpu(), rand(p).cpu()), 1)
    return flat, _flat_hat_for(flat), 30 * rand(p), values.to(device), _active_example(p, device)


def _dark_shape_example(device, generator):
    flat, flat_hat, offset, values, active = _dark_example(device, generator)
    pixel_sums = 400 * torch.rand((3, 3, *flat.shape[1:]), generator=generator).to(device)
    return (pixel_sums, flat, flat_hat, offset, values, active, torch.rand_like(flat)), {}


basic_dark_shape = FusedOp(
    "basic_dark_shape",
    launch=_dark_shape_launch,
    twin=basic_dark_shape_twin,
    example=_dark_shape_example,
    outputs=(6,),
    atol=1e-4,
)
"""``basic_dark_shape(pixel_sums, flat, flat_hat, offset, dark_values, active, shape)``: the
image the darkfield's smoothness step works on."""


def _dark_finish_launch(
    backend: Backend,
    smooth,
    thr_dark,
    flat,
    flat_hat,
    offset,
    dark_values,
    active,
    dark,
    dark_before,
    column,
) -> None:
    p = flat.shape[0]
    m = flat[0].numel()
    tensors = (
        smooth,
        thr_dark,
        flat,
        flat_hat,
        offset,
        dark_values,
        active,
        dark,
        dark_before,
        column,
    )
    backend.launch(
        backend.function(SOURCE, "basic_dark_finish"),
        p * m,
        [
            *(backend.array(x) for x in tensors),
            np.float32(_dc_scale(m)),
            np.int64(m),
            np.int64(p * m),
        ],
    )


def basic_dark_finish_twin(
    smooth, thr_dark, flat, flat_hat, offset, dark_values, active, dark, dark_before, column
) -> None:
    """``D_R = shrink(smooth, thr_dark) + D_Z (mean S - S)`` where some image has ``B < 1``
    (else unchanged); ``column -= D_R - D_R(old)``; ``dark_before = D_R(old)`` (active)."""
    z = offset[:, None, None] * (_flat_mean(flat_hat)[:, None, None] - flat)
    updated = _shrink(smooth, thr_dark[:, None, None]) + z
    updated = torch.where(dark_values[:, 0, None, None] > 0, updated, dark)
    _where_active(active, column - (updated - dark), column)
    _where_active(active, dark, dark_before)
    _where_active(active, updated, dark)


def _dark_finish_example(device, generator):
    flat, flat_hat, offset, values, active = _dark_example(device, generator)
    smooth = 20 * torch.rand(flat.shape, generator=generator).to(device) - 10
    dark = 10 * torch.rand(flat.shape, generator=generator).to(device)
    return (
        smooth,
        torch.tensor([2.0, 1.0, 3.0], device=device),
        flat,
        flat_hat,
        offset,
        values,
        active,
        dark,
        torch.rand_like(flat),
        100 * torch.rand_like(flat),
    ), {}


basic_dark_finish = FusedOp(
    "basic_dark_finish",
    launch=_dark_finish_launch,
    twin=basic_dark_finish_twin,
    example=_dark_finish_example,
    outputs=(7, 8, 9),
    atol=1e-4,
)
"""``basic_dark_finish(smooth, thr_dark, flat, flat_hat, offset, dark_values, active, dark,
dark_before, column)``: the new darkfield, folded into the next flatfield step's column mean."""

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
