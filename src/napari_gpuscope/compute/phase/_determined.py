"""Is the fitted tilt determined by the data, or by the model's capacity to fit noise?

The ``"residual"`` loss is the misfit ``RSS / |d|^2`` of the model at its own Tikhonov
solution. Over the noise its expected value is ``(|(I - H) s|^2 + sigma^2 (n - dof)) /
|d|^2``: the signal's misfit plus the noise the fit cannot absorb, where ``dof = sum_u
tr((G + lambda)^-1 G)`` (:meth:`~._tilt._Problem.misfit_and_dof`) is how much the model can
fit. The degrees of freedom depend on the tilt: largest at zero tilt, they fall as the
illumination pupil leaves the detection pupil's centre. On a faint sample (a tenth of the
cells' phase at 3000 photons, 256 x 256 x 11: issue 26) the misfit rose from zero to the true
0.2 rad tilt only because the dof fell (by 1230 of 32342 per 128 px tile), and the optimiser
reported a zenith of 0.012-0.047 rad, "converged".

So the loss is split into the signal's part ``S = L + rho dof`` (``rho = L / (n - dof)``, the
noise per coefficient estimated from the residual at the fit) and the capacity's part ``C = -rho
dof``, and each one's curvature in the zenith is measured by a central second difference over
:data:`PROBE` radians at the fitted tilt (along its azimuth). The tilt is determined when the
data's curvature is at least :data:`MIN_SIGNAL_SHARE` of the loss's. Measured on the tilt
tests' cells (0.2 rad, 3000 photons, 11 slices): at a tenth of their contrast on 256 px the
share is 0.07, at 0.3 of it on 128 px -0.4 (the data alone would move the zenith away, fitted
0.07 rad), at 0.7 of it 0.80 (fitted 0.172), at full contrast 0.87-0.95 (zero tilt included).
A fit stuck on a flat stretch of the loss away from the tilt (0.115 rad for a true 0.4 from
the default start) has a low share too (0.35) and is reported the same way.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["MIN_SIGNAL_SHARE", "PROBE", "not_determined_reason", "signal_share"]

PROBE = 0.1
"""Zenith step (radians) of the second differences: about the accuracy asked of the estimate
and the size of the capacity bias it detects."""
MIN_SIGNAL_SHARE = 0.5
"""The data must hold the tilt at least as much as the noise-fitting capacity does."""


def signal_share(problem, zenith, azimuth, focus, focus_free: bool, shared: bool) -> torch.Tensor:
    """Per problem (each tile, or the sum of a ``shared`` estimate's tiles), the share of the
    loss's curvature in the zenith that comes from the data, ``c_S / (c_S + c_C)`` (0 where
    the loss has no positive curvature), at the ``(B,)`` fitted values: a float64 tensor on
    the device, three no-grad evaluations and no read (the caller reads it with the stack's
    checks)."""
    rows = []
    with torch.no_grad():
        for offset in (0.0, -PROBE, PROBE):  # a negative zenith is the opposite azimuth
            rows += problem.misfit_and_dof(zenith + offset, azimuth, focus, focus_free)
    loss0, dof0, loss_m, dof_m, loss_p, dof_p = (r.to(torch.float64) for r in rows)
    n = float(problem.data_hat[0].numel())
    rho = loss0 / torch.clamp(n - dof0, min=1.0)
    signal = [loss + rho * dof for loss, dof in ((loss0, dof0), (loss_m, dof_m), (loss_p, dof_p))]
    capacity = [-rho * dof for dof in (dof0, dof_m, dof_p)]
    if shared:
        signal = [s.sum().reshape(1) for s in signal]
        capacity = [c.sum().reshape(1) for c in capacity]
    c_signal = signal[1] + signal[2] - 2 * signal[0]
    total = c_signal + capacity[1] + capacity[2] - 2 * capacity[0]
    share = torch.where(total > 0, c_signal / torch.where(total > 0, total, 1.0), 0.0)
    return torch.where(torch.isfinite(share), share, 0.0)


def not_determined_reason(share: np.ndarray) -> str:
    """``"tilt not determined by the data (...)"`` when every problem's data share of the
    loss's curvature is below :data:`MIN_SIGNAL_SHARE`, else ``""``. ``share``: from
    :func:`signal_share`."""
    share = np.asarray(share, np.float64).ravel()
    low = share < MIN_SIGNAL_SHARE
    if share.size == 0 or not low.all():
        return ""
    worst = float(share.max())
    what = "" if share.size == 1 else f"in all {share.size} tiles, "
    return (
        f"tilt not determined by the data ({what}only {100 * max(worst, 0.0):.0f} % of the "
        "loss's curvature in the zenith at the fitted tilt comes from the data, the rest from "
        f"the model's capacity to fit noise, below the {100 * MIN_SIGNAL_SHARE:.0f} % needed: "
        "a sample too faint for its noise, or a fit stuck away from the tilt; give more signal "
        "(frames per slice, exposure), larger tiles or another start zenith)"
    )
