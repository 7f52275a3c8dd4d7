"""The autotune's cost of a candidate (BaSiCPy's entropy + Fourier L0) and its progress.

:func:`autotune_cost` is BaSiCPy 2.0's cost of one candidate smoothness; :class:`_Scores`
scores each candidate once its fit has stopped reweighting (it never changes again) and says
how far the search is, after a reweighting pass and between ALM iterations inside one.
"""

from __future__ import annotations

import math

import torch

from ._alm import AlmTick, FitState
from ._dct import dct2

__all__ = ["autotune_cost"]

HISTOGRAM_BINS = 1000
QUANTILES = (0.01, 0.99)
VMIN_FACTOR, VRANGE_FACTOR = 0.6, 1.5
L0_IMAGE_THRESHOLD, L0_RADIUS, L0_COST = 0.1, 10.0, 30.0


def _entropy(values: torch.Tensor, low: float, high: float) -> float:
    """Differential entropy ``-sum p log p dx`` of a density histogram on ``[low, high]``."""
    inside = values[(values >= low) & (values <= high)]
    if inside.numel() == 0 or not high > low:
        return math.inf
    counts = torch.histc(inside.double(), bins=HISTOGRAM_BINS, min=low, max=high)
    width = (high - low) / HISTOGRAM_BINS
    density = counts / (counts.sum() * width)
    density = density[density > 0]
    return float(-(density * density.log()).sum() * width)


def _fourier_l0(flat: torch.Tensor) -> float:
    """Fraction of the DCT coefficients beyond radius 10 (both indices > 0) whose magnitude in
    the un-normalised DCT-II (torch-dct's, as BaSiCPy) exceeds 0.1."""
    m, n = flat.shape
    # Un-normalised = orthonormal x sqrt(2m) sqrt(2n) off the first row and column.
    spectrum = dct2(flat.double()).abs() * 2.0 * math.sqrt(m * n)
    i = torch.arange(m, device=flat.device)[:, None]
    j = torch.arange(n, device=flat.device)[None, :]
    outside = (i**2 + j**2 > L0_RADIUS**2) & (i > 0) & (j > 0)
    return float((spectrum[outside] > L0_IMAGE_THRESHOLD).double().mean())


def autotune_cost(corrected: torch.Tensor, flat: torch.Tensor, value_range: float) -> float:
    """BaSiCPy's autotune cost of one candidate: entropy + 30 x Fourier L0 of the flatfield.

    ``corrected`` is the candidate's corrected working-size stack, ``flat`` its flatfield
    (mean 1) and ``value_range`` the histogram span fixed by a first fit.
    """
    values = corrected.flatten()
    low = float(torch.quantile(values[:: max(1, values.numel() // 2**24)], QUANTILES[0]))
    low *= VMIN_FACTOR
    return _entropy(values, low, low + value_range) + L0_COST * _fourier_l0(flat)


class _Scores:
    """Each candidate's cost, scored once its problem has stopped reweighting.

    Problem 0 is the reference fit (the mean smoothness of BaSiCPy's pool) that fixes the
    histogram's span; candidate ``k`` is problem ``k + 1``.
    """

    def __init__(self, stack: torch.Tensor, count: int, tolerance: float) -> None:
        self.stack, self.tolerance = stack, tolerance  # the (T, Y, X) working stack
        self.value_range: float | None = None
        self.scored: dict[int, float] = {}
        self.count = count

    def update(self, state: FitState, done: torch.Tensor) -> None:
        """Score the candidates whose problems are done (and, first, the reference's span)."""
        if self.value_range is None:
            if not bool(done[0]):
                return
            corrected = self._corrected(state, 0)
            quantiles = torch.tensor(QUANTILES, device=corrected.device)
            low, high = torch.quantile(corrected.flatten(), quantiles)
            self.value_range = float((high - low * VMIN_FACTOR) * VRANGE_FACTOR)
        for k in range(self.count):
            if k not in self.scored and bool(done[k + 1]):
                self.scored[k] = self._cost(state, k + 1)

    def _corrected(self, state: FitState, problem: int) -> torch.Tensor:
        return (self.stack - state.darkfield[problem]) / state.flatfield[problem]

    def _cost(self, state: FitState, problem: int) -> float:
        assert self.value_range is not None
        flat, corrected = state.flatfield[problem], self._corrected(state, problem)
        converged = bool(state.reweight_score[problem] <= self.tolerance) and bool(
            torch.isfinite(state.alm_residual[problem])
        )
        bad = (
            not converged
            or not bool(torch.isfinite(corrected).all())
            or float((flat - 1).abs().max()) < 1e-6
        )
        return math.inf if bad else autotune_cost(corrected, flat, self.value_range)

    @property
    def costs(self) -> tuple[float, ...]:
        """Every candidate's cost (after the last update, which scores them all)."""
        return tuple(self.scored[k] for k in range(self.count))

    def fraction(self, state: FitState, max_passes: int) -> float:
        """The share of the search done: a problem done counts 1, one still reweighting its
        passes over the most it may make."""
        done = (~state.active).double()
        passes = state.passes.double() / max(max_passes, 1)
        return float(torch.maximum(done, passes.clamp(max=1.0)).mean())

    def describe(self, candidates: tuple[float, ...]) -> str:
        """E.g. ``"5 of 17 candidates scored, best so far smoothness 1.5"``."""
        text = f"{len(self.scored)} of {self.count} candidates scored"
        finite = {k: c for k, c in self.scored.items() if math.isfinite(c)}
        if finite:
            best = min(finite, key=lambda k: (finite[k], k))
            text += f", best so far smoothness {candidates[best]:g}"
        return text

    def fraction_within(
        self, tick: AlmTick, state: FitState | None, max_passes: int, expected: int
    ) -> float:
        """:meth:`fraction` between two ALM iterations of pass ``tick.pass_number``.

        The problems still reweighting count the passes they finished; those of the groups
        already run in this pass one more; those of the running group the share of a pass its
        iterations are of ``expected`` (capped at 1). It never passes the value :meth:`fraction`
        gives after this pass, nor falls below the one after the last (``state``; ``None``
        before the first pass).
        """
        count, per_pass = self.count + 1, 1.0 / max(max_passes, 1)
        active = torch.ones(count, dtype=torch.bool) if state is None else state.active.cpu()
        problems = tick.problems.cpu()
        # Groups run in ascending problem order: the active problems below the running group's
        # first have finished this pass.
        finished = torch.arange(count) < int(problems.min())
        share = (tick.pass_number - 1 + finished.double()) * per_pass
        share[problems] += min(tick.iteration / max(expected, 1), 1.0) * per_pass
        return float(torch.where(active, share.clamp(max=1.0), 1.0).mean())

    def describe_within(self, tick: AlmTick, candidates: tuple[float, ...]) -> str:
        """E.g. ``"reweighting pass 3, candidates 5-6 of 17, ALM iteration 12; 4 of 17
        candidates scored, best so far smoothness 1.5"``."""
        return (
            f"reweighting pass {tick.pass_number}, {_which(tick, len(candidates))}, "
            f"ALM iteration {tick.iteration}; {self.describe(candidates)}"
        )


def _which(tick: AlmTick, count: int) -> str:
    """The problems of the running group in the words of the progress: problem 0 is the
    reference fit, problem ``k`` candidate ``k`` (of ``count``)."""
    problems = tick.problems.tolist()
    numbers = [k for k in problems if k > 0]
    parts = ["the reference fit"] if 0 in problems else []
    if len(numbers) == 1:
        parts.append(f"candidate {numbers[0]} of {count}")
    elif numbers and numbers == list(range(numbers[0], numbers[-1] + 1)):
        parts.append(f"candidates {numbers[0]}-{numbers[-1]} of {count}")
    elif numbers:
        parts.append(f"{len(numbers)} of {count} candidates")
    text = " and ".join(parts)
    return text + (" at once" if tick.groups == 1 and len(problems) > 1 else "")
