"""When the tilt optimiser stops by itself: the loss has settled and the gradient is small.

Both tests are gated (each must hold), and neither is timed:

- the loss: its relative change over the last :data:`WINDOW` iterations is below
  :data:`LOSS_TOLERANCE` (a loss still falling slowly, as NAdam's early steps on a shallow
  loss, or rising, has not settled);
- the gradient: its norm (over the free parameters) is below :data:`GRADIENT_TOLERANCE` of
  the largest norm seen in the run, normally the start's, so the values sit where the loss is
  flat relative to where they began (a loss that stalls on a slope, e.g. steps too small, is
  not converged). A start already at the minimum has no slope to shrink: there the gradient
  also passes when it is below :data:`FLAT_GRADIENT` of the loss (flat to float32 precision).

Each problem (a tile, or the one shared problem of a global estimate) is judged on its own;
the optimiser stops when every problem passes at the same iteration. A non-finite loss or
gradient never passes.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "FLAT_GRADIENT",
    "GRADIENT_TOLERANCE",
    "LOSS_TOLERANCE",
    "WINDOW",
    "Convergence",
]

LOSS_TOLERANCE = 1e-5
"""Largest relative decrease of the loss over :data:`WINDOW` iterations that counts as settled:
a tenth of the loss change a 0.001 rad zenith error causes on the samples' optics."""
WINDOW = 5
"""Iterations the loss must have settled over (NAdam's momentum spans a few)."""
GRADIENT_TOLERANCE = 1e-2
"""Largest gradient norm, relative to the largest in the run, that counts as flat: for a
quadratic loss the distance to the minimum has shrunk a hundredfold from the start."""
FLAT_GRADIENT = 1e-4
"""Gradient norm per unit of loss (per radian; per slice for the focus) below which the loss
is flat to float32 precision: on the samples' optics it puts the minimum within 4e-5 rad."""


class Convergence:
    """The stopping rule of :func:`~._tilt.optimise_tilt`, fed one iteration at a time.

    Examples
    --------
    A loss that decays geometrically to 1 with a gradient shrinking alike converges once it
    changes by less than 1e-5 over 5 iterations and the gradient is below 1 % of its start:

    >>> rule = Convergence()
    >>> [k for k in range(40) if rule.update(np.array([1 + 0.5**k]), np.array([0.5**k]))][:1]
    [22]
    """

    def __init__(self) -> None:
        self.losses: list[np.ndarray] = []
        self.largest: np.ndarray | None = None
        self.converged: np.ndarray | None = None

    def update(self, loss: np.ndarray, gradient: np.ndarray | None) -> bool:
        """Take this iteration's per-problem ``loss`` and gradient norm (``None``: not known
        yet); return whether every problem has converged."""
        loss = np.asarray(loss, np.float64)
        self.losses.append(loss)
        if gradient is None:
            self.converged = np.zeros(loss.shape, bool)
            return False
        gradient = np.asarray(gradient, np.float64)
        finite = np.isfinite(loss) & np.isfinite(gradient)
        seen = np.where(finite, gradient, 0.0)
        self.largest = seen if self.largest is None else np.maximum(self.largest, seen)
        settled = np.zeros(loss.shape, bool)
        if len(self.losses) > WINDOW:
            before = self.losses[-1 - WINDOW]
            settled = np.abs(before - loss) <= LOSS_TOLERANCE * np.abs(before)
        relative = gradient <= GRADIENT_TOLERANCE * self.largest
        flat = gradient <= FLAT_GRADIENT * np.abs(loss)
        self.converged = finite & settled & (relative | flat)
        return bool(self.converged.all())
