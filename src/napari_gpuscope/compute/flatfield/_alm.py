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

One iteration is two passes over the ``(P, T, m, n)`` arrays (:mod:`._ops`: ``basic_sparse``
and ``basic_dual``, fused kernels beside torch twins, ``I_B`` never materialised) and a few
small kernels and GEMMs on the ``(P, m, n)`` images: 12 launches (19 with the darkfield) and
no host synchronisation; problems that converge early are frozen inside the kernels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import _ops
from ._alm_state import AlmState
from ._dct import dct2, dct_matrix

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


class _Dct:
    """The orthonormal 2D DCT of ``(P, m, n)`` images as two GEMMs into preallocated buffers
    (:func:`._dct.dct2` allocates and broadcasts; the loop runs it four or eight times)."""

    def __init__(self, p: int, m: int, n: int, device: torch.device, dtype: torch.dtype) -> None:
        cm, cn = dct_matrix(m, device, dtype), dct_matrix(n, device, dtype)
        self.cm = cm.expand(p, m, m).contiguous()
        self.cm_t = cm.T.expand(p, m, m).contiguous()
        self.cn, self.cn_t = cn, cn.T
        self.half = torch.empty(p, m, n, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.bmm(self.cm, x, out=self.half)
        return torch.matmul(self.half, self.cn_t, out=out)

    def inverse(self, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.bmm(self.cm_t, y, out=self.half)
        return torch.matmul(self.half, self.cn, out=out)


class _StopCheck:
    """Whether every problem is frozen, read one iteration late so the host never drains the
    device queue.

    After iteration ``i`` the ``P`` flags are copied asynchronously into (pinned) host memory;
    before launching iteration ``i + 2`` the host waits for iteration ``i``'s copy (iteration
    ``i + 1`` is queued by then) and stops when no flag is set. The one iteration launched
    after everything froze changes nothing: every kernel skips frozen problems and the GEMMs
    recompute the same values. No torch operation synchronises (``_local_scalar_dense``,
    ``nonzero``, ``.item()``): the wait is on a CUDA event of an earlier iteration.
    """

    def __init__(self, p: int, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.host = [torch.empty(p, pin_memory=self.cuda) for _ in range(2)]
        self.events = [torch.cuda.Event() for _ in range(2)] if self.cuda else []

    def post(self, flags: torch.Tensor, iteration: int) -> None:
        """Queue the copy of ``flags`` (iteration ``iteration``'s next-iteration flags)."""
        self.host[iteration % 2].copy_(flags, non_blocking=True)
        if self.cuda:
            self.events[iteration % 2].record()

    def frozen_after(self, iteration: int) -> bool:
        """Whether every problem was frozen after ``iteration`` (waits for that iteration)."""
        if self.cuda:
            self.events[iteration % 2].synchronize()
        # numpy() of a host tensor: no torch operation, nothing for the sync counters to see
        return not self.host[iteration % 2].numpy().any()


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
    """One cold-started inexact ALM (BaSiCPy ``ApproximateFit``) for every problem.

    Each iteration is the launches of :mod:`._ops` (12 without the darkfield, 19 with it, plus
    one asynchronous copy of the problems' flags) and no host synchronisation: problems that
    met the tolerance are frozen by their ``active`` flag inside the kernels, and the loop ends
    one iteration after all froze (:class:`_StopCheck`).
    """
    p_count, t_count, m, n = images.shape
    dtype, device = images.dtype, images.device
    dct = _Dct(p_count, m, n, device, dtype)
    images, weight = images.contiguous(), weight.contiguous()
    flat_hat = dct.forward(torch.ones(p_count, m, n, dtype=dtype, device=device),
                           torch.empty(p_count, m, n, dtype=dtype, device=device))
    flat = dct.inverse(flat_hat, torch.empty_like(flat_hat))
    dark = torch.zeros(p_count, m, n, dtype=dtype, device=device)
    baseline = init_baseline.to(dtype).contiguous().clone()
    mu = mu0.to(dtype).clone()
    lam_flat = lam_flat.to(dtype).contiguous()
    sums = 3 if get_darkfield else 1
    state = AlmState(
        images=images,
        weight=weight,
        sparse=torch.zeros_like(images),
        dual=torch.zeros_like(images),
        baseline=baseline,
        rows=torch.zeros(p_count, t_count, 2, dtype=dtype, device=device),
        flat=flat,
        flat_hat=flat_hat,
        dark=dark,
        dark_before=torch.zeros_like(dark) if get_darkfield else dark,
        # mean_T(Im - I_R - I_B + Y/mu) at the start: I_R = Y = 0.
        column=(images.mean(dim=1) - flat * baseline.mean(dim=1)[:, None, None] - dark)
        .contiguous(),
        work=torch.empty_like(flat),
        pixel_sums=torch.zeros(p_count, sums, m, n, dtype=dtype, device=device),
        totals=torch.zeros(p_count, sums, dtype=dtype, device=device),
        image_norm=image_norm.to(dtype).contiguous(),
        offset_max=offset_max.to(dtype).contiguous(),
        lam_flat=lam_flat,
        lam_dark=lam_dark.to(dtype).contiguous(),
        mu=mu,
        mu_max=mu0 * MAX_MU_COEF,
        thr_flat=lam_flat / mu,
        thr_dark=torch.zeros_like(mu),
        offset=torch.zeros_like(mu),
        iterations=torch.zeros_like(mu),
        ratio=torch.full_like(mu, float("inf")),
        active=torch.ones_like(mu),
        active_next=torch.empty_like(mu),
        dark_values=torch.zeros(p_count, 3, dtype=dtype, device=device),
        scratch=_ops.scratch_for(images, get_darkfield),
    )
    spectrum = torch.empty_like(state.flat)
    # The path (kernel, host emulation or twin) is decided once per pass, on these tensors.
    shrink = _ops.basic_shrink.bind(state.flat_hat, spectrum, state.thr_flat, state.active)
    sparse_step = _ops.basic_sparse.bind(state)
    dual_step = _ops.basic_dual.bind(state)
    status = _ops.basic_status.bind(state)
    if get_darkfield:
        dark_shape = _ops.basic_dark_shape.bind(state)
        dark_finish = _ops.basic_dark_finish.bind(state)
    stop = _StopCheck(p_count, device)
    for iteration in range(max_iterations):
        # Flatfield step (in DCT space).
        dct.forward(state.column, spectrum)
        shrink(state.flat_hat, spectrum, state.thr_flat, state.active, state.flat_hat, with_y=True)
        dct.inverse(state.flat_hat, state.flat)
        # Sparse step, the row sums and the baseline step.
        sparse_step(state)
        # Dual step (with I_B from the old darkfield, as BaSiCPy) and the next column mean.
        dual_step(state, rho=RHO)
        torch.sum(state.pixel_sums, dim=(-2, -1), out=state.totals)
        # NaN compares False: a non-finite residual also freezes the problem (never converged).
        status(state, rho=RHO, tol=tol, ent_dark=ENT_DARK)
        if get_darkfield:
            # The MATLAB darkfield heuristic (§1.5 of the research note); the next flatfield
            # step sees the new darkfield through its column mean.
            dark_shape(state)
            dct.forward(state.work, spectrum)
            shrink(spectrum, None, state.thr_dark, state.active, spectrum, with_y=False)
            dct.inverse(spectrum, state.work)
            dark_finish(state)
        stop.post(state.active_next, iteration)
        state.swap_flags()
        if iteration >= 1 and stop.frozen_after(iteration - 1):
            break
    return {
        "flat": state.flat,
        "dark_before": state.dark_before,
        "dark": state.dark,
        "offset": state.offset,
        "baseline": state.baseline,
        "sparse": state.sparse,
        "iterations": state.iterations.to(torch.int64),
        "ratio": state.ratio,
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
    every = torch.arange(p_count, device=device)
    for _ in range(max_reweight_iterations):
        # One host sync per pass: which problems still reweight (one problem: whether it does).
        if p_count == 1:
            if not bool(active[0]):
                break
            idx = every
        else:
            idx = torch.nonzero(active).flatten()
            if idx.numel() == 0:
                break
        whole = idx.numel() == p_count

        def take(x: torch.Tensor, idx: torch.Tensor = idx, whole: bool = whole) -> torch.Tensor:
            return x if whole else x[idx]  # every problem: no copy of the stacks

        out = _alm_pass(
            take(stack),
            take(weight),
            take(init_baseline),
            take(lam_flat),
            take(lam_dark),
            take(mu0),
            take(image_norm),
            take(offset_max),
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
        new_weight = torch.where(take(mask), new_weight, new_weight * epsilon)
        new_weight = new_weight / new_weight.mean(dim=(1, 2, 3), keepdim=True)
        if whole:
            weight = new_weight
        else:
            weight[idx] = new_weight
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
