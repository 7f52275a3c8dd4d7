"""One inexact-ALM pass of the BaSiC fit for a batch of problems (:mod:`._alm` reweights).

BaSiCPy's ``ApproximateFit`` for ``P`` independent problems at once: each iteration is the
fused ops of :mod:`._ops` (12 launches, 19 with the darkfield) and no host synchronisation;
problems that met the tolerance are frozen inside the kernels. The pass is a generator
(:func:`iter_alm_pass`) that hands control back after every iteration, so a consumer can show
progress inside a pass and cancel between iterations; :func:`alm_pass` runs it to the end.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import ParamSpec, TypeVar

import torch

from . import _ops
from ._alm_state import AlmState
from ._dct import dct_matrix

__all__ = ["ENT_DARK", "MAX_MU_COEF", "MU_COEF", "RHO", "alm_pass", "iter_alm_pass"]

RHO = 1.5
MU_COEF = 12.5
MAX_MU_COEF = 1e7
ENT_DARK = 10.0

P = ParamSpec("P")
R = TypeVar("R")


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


def iter_alm_pass(
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
) -> Generator[int, None, dict[str, torch.Tensor]]:
    """One cold-started inexact ALM (BaSiCPy ``ApproximateFit``) for every problem, as a
    generator: it yields the number of iterations launched after each one (a host count: no
    synchronisation) and returns the pass's result (:func:`alm_pass`).

    Each iteration is the launches of :mod:`._ops` (12 without the darkfield, 19 with it, plus
    one asynchronous copy of the problems' flags) and no host synchronisation: problems that
    met the tolerance are frozen by their ``active`` flag inside the kernels, and the loop ends
    one iteration after all froze (:class:`_StopCheck`).
    """
    p_count, t_count, m, n = images.shape
    dtype, device = images.dtype, images.device
    dct = _Dct(p_count, m, n, device, dtype)
    images, weight = images.contiguous(), weight.contiguous()
    flat_hat = dct.forward(
        torch.ones(p_count, m, n, dtype=dtype, device=device),
        torch.empty(p_count, m, n, dtype=dtype, device=device),
    )
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
        column=(
            images.mean(dim=1) - flat * baseline.mean(dim=1)[:, None, None] - dark
        ).contiguous(),
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
        # Between iterations: a consumer may show progress or close the generator (cancel).
        yield iteration + 1
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


def _run_to_end(make: Callable[P, Generator[int, None, R]]) -> Callable[P, R]:
    @functools.wraps(make)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        steps = make(*args, **kwargs)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    run.__doc__ = f":func:`{make.__name__}` run to its end (same arguments): the pass's result."
    return run


alm_pass = _run_to_end(iter_alm_pass)
