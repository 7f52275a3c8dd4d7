"""The end of a BaSiC ALM iteration as a fused op (``basic_status`` in ``basic_alm.cu``): the
residual, the convergence flags, the next ``mu`` and the darkfield heuristic's per-problem
values, one thread per problem (the launch table is in :mod:`._ops`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import Backend, FusedOp
from . import _examples
from ._alm_state import AlmState
from ._geometry import dc_scale
from ._ops_shared import SOURCE, _flat_mean, _where_active

__all__ = ["basic_status"]


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
