"""The BaSiC fit on the working-size stack: inexact ALM inside a reweighting loop.

BaSiCPy 2.0's approximate mode (the MATLAB ``inexact_alm_rspca_l1``), for a batch of ``P``
independent problems (channels, z-planes, autotune candidates) at once, with its bugs fixed:

- the iteration counter is never overwritten by the darkfield step (BaSiCPy 2.0 returned an
  all-ones flatfield on ~1000-tile stacks with darkfield on);
- reweighting stops on the change of the flatfield *and* of the darkfield (BaSiCPy compared
  the flatfield twice);
- a fit is converged only if the reweighting met its tolerance, the last ALM pass met its
  tolerance and everything is finite;
- the spectral norm comes from a power iteration, not a full SVD.

The elementwise work of one iteration is two passes over the ``(P, T, m, n)`` arrays
(:mod:`._ops`: ``sparse_step`` and ``dual_step``, fused kernels beside torch twins); ``I_B``
is never materialised.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import _ops
from ._dct import dct2, idct2

__all__ = ["FitState", "auto_smoothness", "reweighting_passes", "spectral_norm"]

RHO = 1.5
MU_COEF = 12.5
MAX_MU_COEF = 1e7
ENT_DARK = 10.0


def auto_smoothness(stack: torch.Tensor) -> torch.Tensor:
    """BaSiCPy's automatic flatfield smoothness: ``sum |DCT(mean image / its mean)| / 800``.

    ``stack`` is ``(P, T, m, n)``; returns ``(P,)``.
    """
    mean_image = stack.mean(dim=1, dtype=torch.float64)
    mean_image = mean_image / mean_image.mean(dim=(-2, -1), keepdim=True)
    return (dct2(mean_image).abs().sum(dim=(-2, -1)) / 800.0).to(stack.dtype)


def spectral_norm(stack: torch.Tensor, iterations: int = 100, rtol: float = 1e-7) -> torch.Tensor:
    """Largest singular value of each problem's ``T x (m n)`` matrix, by power iteration.

    Images of one stack are nearly proportional (rank one plus a little), so the gap between
    the first two singular values is large and a few iterations reach float precision; the
    iteration runs on the small ``T x T`` Gram matrix in float64.
    """
    matrix = stack.reshape(stack.shape[0], stack.shape[1], -1)
    gram = torch.bmm(matrix, matrix.transpose(1, 2)).double()
    vector = torch.ones(gram.shape[0], gram.shape[1], 1, dtype=torch.float64, device=gram.device)
    eigen = torch.zeros(gram.shape[0], dtype=torch.float64, device=gram.device)
    for _ in range(iterations):
        product = torch.bmm(gram, vector)
        norm = torch.linalg.vector_norm(product, dim=(1, 2))
        vector = product / norm.clamp_min(1e-300)[:, None, None]
        converged = bool(((norm - eigen).abs() <= rtol * norm).all())
        eigen = norm
        if converged:
            break
    return eigen.sqrt().to(stack.dtype)


@dataclass
class FitState:
    """What one reweighting pass hands out (all ``P`` problems)."""

    flatfield: torch.Tensor
    """(P, m, n), mean 1."""
    darkfield: torch.Tensor
    """(P, m, n)."""
    baseline: torch.Tensor
    """(P, T): ``B * mean(S)`` in intensity units."""
    offset: torch.Tensor
    """(P,): the flat part ``D_Z`` of the estimated darkfield."""
    alm_iterations: torch.Tensor
    """(P,) inner iterations of this pass."""
    alm_residual: torch.Tensor
    """(P,) ``||residual|| / ||images||`` at the end of this pass."""
    reweight_score: torch.Tensor
    """(P,) change against the previous pass (inf on the first pass)."""
    active: torch.Tensor
    """(P,) bool: still reweighting (False once a problem met the tolerance)."""
    passes: torch.Tensor
    """(P,) reweighting passes run."""


def _shrink(x: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    return torch.sign(x) * torch.clamp(x.abs() - threshold, min=0)


def _darkfield_step(
    images: torch.Tensor,
    residual_sum: torch.Tensor,
    residual_in: torch.Tensor,
    inner: torch.Tensor,
    flat: torch.Tensor,
    baseline: torch.Tensor,
    sparse: torch.Tensor,
    dark: torch.Tensor,
    mu: torch.Tensor,
    lam_dark: torch.Tensor,
    offset_max: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The MATLAB darkfield heuristic (§1.5 of the research note), batched; own counters."""
    pixels = flat.shape[-1] * flat.shape[-2]
    n_in = inner.sum(dim=(-2, -1)).to(flat.dtype)  # (P,)
    n_out = pixels - n_in
    total_mean = residual_sum.sum(dim=1) / (residual_sum.shape[1] * pixels)  # mean(Im - I_R)
    mean_in = residual_in / n_in.clamp_min(1)[:, None]
    mean_out = (residual_sum - residual_in) / n_out.clamp_min(1)[:, None]
    coeff = (mean_in - mean_out) / (total_mean[:, None] + 1e-6)
    valid = baseline < 1
    count = valid.sum(dim=1).to(flat.dtype)
    zero = torch.zeros_like(baseline)
    b_valid = torch.where(valid, baseline, zero)
    c_valid = torch.where(valid, coeff, zero)
    s1, s2 = (b_valid**2).sum(1), b_valid.sum(1)
    s3, s4 = c_valid.sum(1), (b_valid * c_valid).sum(1)
    denominator = s2 * s3 - count * s4
    offset = torch.where(denominator == 0, zero[:, 0], (s1 * s3 - s2 * s4) / denominator)
    flat_mean = flat.mean(dim=(-2, -1))
    offset = torch.minimum(offset.clamp_min(0), offset_max / flat_mean)
    z = offset[:, None, None] * (flat_mean[:, None, None] - flat)
    weights = valid.to(flat.dtype) / count.clamp_min(1)[:, None]
    valid_mean = torch.einsum("pt,ptyx->pyx", weights, images - sparse)
    b_mean = (b_valid.sum(1) / count.clamp_min(1))[:, None, None]
    shape = valid_mean - b_mean * flat
    shape = shape - shape.mean(dim=(-2, -1), keepdim=True)
    shape = shape - shape.mean(dim=(-2, -1), keepdim=True) - z
    threshold = (lam_dark / (ENT_DARK * mu))[:, None, None]
    new_dark = _shrink(idct2(_shrink(dct2(shape), threshold)), threshold) + z
    # With no image dimmer than average there is nothing to estimate from: keep the darkfield
    # (BaSiCPy's nan-means made it NaN).
    has_valid = (count > 0)[:, None, None]
    return torch.where(has_valid, new_dark, dark), torch.where(count > 0, offset, zero[:, 0])


def _alm_pass(
    images: torch.Tensor,
    weight: torch.Tensor,
    init_baseline: torch.Tensor,
    lam_flat: torch.Tensor,
    lam_dark: torch.Tensor,
    mu0: torch.Tensor,
    image_norm: torch.Tensor,
    offset_max: torch.Tensor,
    get_darkfield: bool,
    max_iterations: int,
    tol: float,
) -> dict[str, torch.Tensor]:
    """One cold-started inexact ALM (BaSiCPy ``ApproximateFit``) for every problem."""
    p_count, t_count, m, n = images.shape
    dtype, device = images.dtype, images.device
    flat_hat = dct2(torch.ones(p_count, m, n, dtype=dtype, device=device))
    flat = idct2(flat_hat)
    dark = torch.zeros(p_count, m, n, dtype=dtype, device=device)
    offset = torch.zeros(p_count, dtype=dtype, device=device)
    baseline = init_baseline.clone()
    sparse = torch.zeros_like(images)
    dual = torch.zeros_like(images)
    mu = mu0.clone()
    mu_max = mu0 * MAX_MU_COEF
    iterations = torch.zeros(p_count, dtype=torch.int64, device=device)
    ratio = torch.full((p_count,), float("inf"), dtype=dtype, device=device)
    active = torch.ones(p_count, dtype=torch.bool, device=device)
    # mean_T(Im - I_R - I_B + Y/mu) at the start: I_R = Y = 0.
    column_mean = images.mean(dim=1) - flat * baseline.mean(dim=1)[:, None, None] - dark
    dark_before = dark
    for _ in range(max_iterations):
        idx = torch.nonzero(active).flatten()
        if idx.numel() == 0:
            break
        whole = idx.numel() == p_count

        def sel(x: torch.Tensor, idx: torch.Tensor = idx, whole: bool = whole) -> torch.Tensor:
            return x if whole else x[idx]

        im, w = sel(images), sel(weight)
        mu_a = sel(mu)
        # Flatfield step (in DCT space).
        hat = sel(flat_hat) + dct2(sel(column_mean))
        hat = _shrink(hat, (sel(lam_flat) / mu_a)[:, None, None])
        s_new = idct2(hat)
        d_r = sel(dark)
        # Sparse step and the baseline's row sums in one pass.
        inner = s_new >= s_new.mean(dim=(-2, -1), keepdim=True) if get_darkfield else None
        ir, residual_sum, residual_in = _ops.sparse_step(
            im, s_new, sel(baseline), d_r, sel(dual), w, mu_a, inner
        )
        pixels = m * n
        b_new = residual_sum / pixels / (residual_sum.sum(dim=1, keepdim=True) / (t_count * pixels))
        b_new = b_new.clamp_min(0)
        d_new, off_new = d_r, sel(offset)
        if get_darkfield:
            d_new, off_new = _darkfield_step(
                im,
                residual_sum,
                residual_in,
                inner,
                s_new,
                b_new,
                ir,
                d_r,
                mu_a,
                sel(lam_dark),
                sel(offset_max),
            )
        mu_next = torch.minimum(mu_a * RHO, sel(mu_max))
        # Dual step (with I_B from the old darkfield, as BaSiCPy) and the next column mean.
        # In place on the dual: with every problem active it is the pass's own tensor.
        y_new, norm_sq, col = _ops.dual_step(im, s_new, b_new, d_r, ir, sel(dual), mu_a, mu_next)
        # The next flatfield step sees the new darkfield: fold the change into its column mean.
        col = col - (d_new - d_r)
        r_new = norm_sq.sqrt() / sel(image_norm)
        if whole:
            flat_hat, flat, sparse, dual, baseline = hat, s_new, ir, y_new, b_new
            dark_before, dark, offset, mu, column_mean = d_r, d_new, off_new, mu_next, col
            ratio = r_new
            iterations = iterations + 1
        else:
            flat_hat[idx], flat[idx], sparse[idx], dual[idx], baseline[idx] = (
                hat,
                s_new,
                ir,
                y_new,
                b_new,
            )
            dark_before = dark_before.clone()
            dark_before[idx], dark[idx], offset[idx] = d_r, d_new, off_new
            mu[idx], column_mean[idx], ratio[idx] = mu_next, col, r_new
            iterations[idx] += 1
        # NaN compares False: a non-finite residual also ends the pass (and is never converged).
        active = active & (ratio > tol) & torch.isfinite(ratio)
    return {
        "flat": flat,
        "dark_before": dark_before,
        "dark": dark,
        "offset": offset,
        "baseline": baseline,
        "sparse": sparse,
        "iterations": iterations,
        "ratio": ratio,
    }


def reweighting_passes(
    stack: torch.Tensor,
    *,
    lam_flat: torch.Tensor,
    lam_dark: torch.Tensor,
    get_darkfield: bool,
    max_iterations: int,
    optimization_tol: float,
    max_reweight_iterations: int,
    reweighting_tol: float,
    epsilon: float,
    fitting_mask: torch.Tensor | None = None,
) -> Iterator[FitState]:
    """Run the reweighting loop on ``stack`` ``(P, T, m, n)``; yield the state after each pass.

    Problems that met ``reweighting_tol`` are frozen (their state is carried unchanged).
    """
    p_count, t_count, m, n = stack.shape
    device, dtype = stack.device, stack.dtype
    mask = torch.ones_like(stack, dtype=torch.bool) if fitting_mask is None else fitting_mask
    weight = torch.where(mask, 1.0, epsilon).to(dtype)
    weight = weight / weight.mean(dim=(1, 2, 3), keepdim=True)
    masked = torch.where(mask, stack, 0.0)
    counts = mask.sum(dim=(-2, -1)).to(dtype)
    init_baseline = torch.nan_to_num(
        (masked.sum(dim=(-2, -1)) / counts)
        / (masked.sum(dim=(1, 2, 3)) / counts.sum(dim=1))[:, None]
    )
    sigma = spectral_norm(stack)
    mu0 = MU_COEF / sigma
    image_norm = torch.linalg.vector_norm(stack.reshape(p_count, -1), dim=1)
    offset_max = stack.reshape(p_count, -1).amin(dim=1)
    active = torch.ones(p_count, dtype=torch.bool, device=device)
    passes = torch.zeros(p_count, dtype=torch.int64, device=device)
    score = torch.full((p_count,), float("inf"), dtype=dtype, device=device)
    last_flat = last_dark = None
    state: FitState | None = None
    for _ in range(max_reweight_iterations):
        idx = torch.nonzero(active).flatten()
        if idx.numel() == 0:
            break
        out = _alm_pass(
            stack[idx],
            weight[idx],
            init_baseline[idx],
            lam_flat[idx],
            lam_dark[idx],
            mu0[idx],
            image_norm[idx],
            offset_max[idx],
            get_darkfield,
            max_iterations,
            optimization_tol,
        )
        flat_fit, baseline = out["flat"], out["baseline"]
        dark = out["dark"] + out["offset"][:, None, None] * flat_fit
        # S = mean_T(I_B) - D with I_B = S_fit B + D_R(before the last darkfield step).
        flat = flat_fit * baseline.mean(dim=1)[:, None, None] + out["dark_before"] - dark
        flat_mean = flat.mean(dim=(-2, -1))
        flat = flat / flat_mean[:, None, None]
        image_mean = (
            flat_fit.mean(dim=(-2, -1))[:, None] * baseline
            + out["dark_before"].mean(dim=(-2, -1))[:, None]
        )
        relative = out["sparse"] / (image_mean[:, :, None, None] + 1e-6)
        new_weight = 1.0 / (relative.abs() + epsilon)
        new_weight = torch.where(mask[idx], new_weight, new_weight * epsilon)
        weight[idx] = new_weight / new_weight.mean(dim=(1, 2, 3), keepdim=True)
        if last_flat is None:
            last_flat = torch.empty_like(flat).new_zeros((p_count, m, n))
            last_dark = torch.zeros_like(last_flat)
            full_flat, full_dark = last_flat.clone(), last_dark.clone()
            full_base = torch.zeros(p_count, t_count, dtype=dtype, device=device)
            full_offset = torch.zeros(p_count, dtype=dtype, device=device)
            full_iter = torch.zeros(p_count, dtype=torch.int64, device=device)
            full_ratio = torch.zeros(p_count, dtype=dtype, device=device)
        else:
            change_flat = (flat - last_flat[idx]).abs().sum(dim=(-2, -1)) / last_flat[
                idx
            ].abs().sum(dim=(-2, -1)).clamp_min(1e-12)
            change_dark = (dark - last_dark[idx]).abs().sum(dim=(-2, -1)) / last_dark[
                idx
            ].abs().sum(dim=(-2, -1)).clamp_min(1e-6)
            change_dark = torch.where(
                (dark - last_dark[idx]).abs().sum(dim=(-2, -1)) < 1e-7, 0.0, change_dark
            )
            score[idx] = torch.maximum(change_flat, change_dark)
        last_flat[idx], last_dark[idx] = flat, dark
        full_flat[idx], full_dark[idx] = flat, dark
        full_base[idx] = baseline * flat_mean[:, None]
        full_offset[idx] = out["offset"]
        full_iter[idx], full_ratio[idx] = out["iterations"], out["ratio"]
        passes[idx] += 1
        finite = torch.isfinite(score[idx]) | (passes[idx] == 1)
        active[idx] = ~((score[idx] <= reweighting_tol) & finite)
        bad = ~torch.isfinite(full_ratio) | ~torch.isfinite(full_flat).all(dim=-1).all(dim=-1)
        active = active & ~bad  # a non-finite problem cannot recover: stop it (not converged)
        state = FitState(
            flatfield=full_flat,
            darkfield=full_dark,
            baseline=full_base,
            offset=full_offset,
            alm_iterations=full_iter,
            alm_residual=full_ratio,
            reweight_score=score.clone(),
            active=active.clone(),
            passes=passes.clone(),
        )
        yield state
