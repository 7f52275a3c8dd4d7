"""The automatic TV strength of the TV-regularised phase: Morozov's discrepancy principle.

The ADMM (:func:`~._admm.admm_tv`) minimises ``1/2 |H x - d|^2 + reg/2 |x|^2 +
strength TV(phase)``. A stronger TV leaves a larger misfit ``|H x - d|^2``; the selector takes
the strength whose misfit equals the one the *true* phase would leave, given the noise the
least-squares fit measures (:meth:`~._auto_regularization._HostStats.noise`, ``sigma^2`` per
component). Beyond the least-squares residual ``RSS_ls`` (the data no choice can fit), that
misfit is, per frequency, the noise in the fitted directions that the solution does not
absorb. With the phase held at the truth, the absorption is still the ridge fit of the rest
along its transfer function ``A`` (``g_aa = |A|^2``), which absorbs the noise along ``A`` all
but a fraction ``(reg / (g_aa + reg))^2``, so

    target = sigma^2 (n - sum_f [1 - (reg / (g_aa + reg))^2])

with ``n`` the fitted components (two per frequency inside the pupil; the same count and
floor as the Tikhonov selector). The excess misfit of a solution ``x`` over the least squares
is ``sum c - 2 Re x^H b + x^H G x`` (the Gram form of the residual, :mod:`._inverse`), so each
candidate costs one ADMM solve and one pass over the spectra. The excess grows with the
strength; a search in ``log strength`` (a bracketing decade by decade, then false position)
finds where it meets the target within :data:`TOLERANCE`.

The search runs on a central crop of at most :data:`SEARCH_SIZE` pixels a side (its own normal
equations and noise; the objective is per pixel, so the strength carries over to the whole
image): at most :data:`MAX_SOLVES` ADMM solves of that size, a few seconds on a CPU however large
the image. Simulated cells (Abbe's model, 3e3 to 1e5 photons, with and without tilt;
``tests/compute/test_phase_auto_tv.py``) put the best fixed strength where the excess misfit is
0.5-0.7 of ``n sigma^2``, where this target lies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ._auto_regularization import FLOOR, RegularizationStats
from ._inverse import NormalEquations

if TYPE_CHECKING:
    from ._tiles import TiltMap

__all__ = [
    "MAX_SOLVES",
    "SEARCH_BYTES",
    "SEARCH_SIZE",
    "TVStrengthChoice",
    "discrepancy_target",
    "excess_misfit",
    "search_region",
    "select_tv_strength",
]

SEARCH_SIZE = 192
"""Largest side of the crop the search solves on (one ADMM solve there: ~1 s on a CPU core)."""
MAX_SOLVES = 8
"""Most ADMM solves of the search (a bracket from 3e-3 grows a decade per solve)."""
TOLERANCE = 0.02
"""Stop once the excess misfit is within this fraction of the target (the strength is then
within ~5 %: the misfit grows ~linearly in log strength near the target)."""
START = 3e-3
"""The first strength tried (the best on the tests' cells lies between 3e-3 and 1e-2)."""
SEARCH_BYTES = 148
"""Bytes per pixel of the search region while a candidate's misfit is summed: the solution's
spectra and phase (20) and :func:`excess_misfit`'s float64 temporaries (128, measured with the
CPU allocator at 48 x 40 and 64 x 64)."""
LIMITS = (1e-6, 10.0)
"""The strengths the search may return (the parameter allows ``(0, 10]``)."""


@dataclass(frozen=True)
class TVStrengthChoice:
    """The automatic TV strength and the search that found it.

    Attributes
    ----------
    strength : float
        The strength chosen.
    target : float
        The excess misfit the true phase would leave (``sigma^2`` units summed).
    noise : float
        ``sigma^2``, the noise power per component measured by the least-squares residual.
    tried : list of (float, float)
        Every strength solved and its excess misfit over the target (1 = on target).
    """

    strength: float
    target: float
    noise: float
    tried: list[tuple[float, float]] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """JSON-able facts for provenance."""
        return {
            "strength": float(self.strength),
            "rule": "discrepancy: misfit of the true phase at the measured noise",
            "noise_per_component": float(self.noise),
            "target_misfit": float(self.target),
            "tried": [[float(s), float(r)] for s, r in self.tried],
        }


def discrepancy_target(system: NormalEquations, stats: RegularizationStats, reg: float) -> float:
    """The excess misfit (over the least squares) that the true phase would leave at ``reg``."""
    host = stats.host()
    count = float(host.bins[0].sum())
    g_aa = system.g_aa.double()
    fitted = g_aa > FLOOR * host.s_max
    left = (reg / (g_aa + reg)) ** 2
    absorbed = torch.where(fitted, 1.0 - left, 0.0).sum()
    return host.noise() * max(count - float(absorbed), 0.0)


def excess_misfit(
    system: NormalEquations, stats: RegularizationStats, a_hat: torch.Tensor, p_hat: torch.Tensor
) -> float:
    """``|H x - d|^2 - RSS_ls`` of the solution with spectra ``a_hat``, ``p_hat`` (float64)."""
    a, p = a_hat.to(torch.complex128), p_hat.to(torch.complex128)
    b_a, b_p = system.b_a.to(torch.complex128), system.b_p.to(torch.complex128)
    g_ap = system.g_ap.to(torch.complex128)
    linear = (a.conj() * b_a + p.conj() * b_p).real.sum()
    quadratic = (
        (a.real**2 + a.imag**2) * system.g_aa.double()
        + (p.real**2 + p.imag**2) * system.g_pp.double()
        + 2 * (a.conj() * g_ap * p).real
    ).sum()
    fitted = float(stats.bins[2].sum())  # sum c: the energy the least squares explains
    return fitted - 2 * float(linear) + float(quadratic)


def select_tv_strength(
    system: NormalEquations,
    stats: RegularizationStats,
    reg: float,
    solve: Callable[[float], tuple[torch.Tensor, torch.Tensor]],
) -> TVStrengthChoice:
    """The strength whose excess misfit meets :func:`discrepancy_target`.

    ``solve(strength)`` returns the absorption and phase *spectra* of the ADMM solution of
    ``system`` at ``reg`` and that strength.
    """
    target = discrepancy_target(system, stats, reg)
    noise = stats.host().noise()
    if not (target > 0 and math.isfinite(target)):
        return TVStrengthChoice(LIMITS[1], target, noise)  # nothing fitted: all data are noise
    tried: list[tuple[float, float]] = []

    def ratio(strength: float) -> float:
        value = excess_misfit(system, stats, *solve(strength)) / target
        tried.append((strength, value))
        return value

    low = high = None  # (log strength, log ratio) below and above the target
    log_s = math.log10(START)
    bounds = tuple(math.log10(v) for v in LIMITS)
    best = START
    for _ in range(MAX_SOLVES):
        strength = 10.0**log_s
        value = ratio(strength)
        best = strength
        if abs(value - 1) <= TOLERANCE:
            break
        point = (log_s, math.log(max(value, 1e-12)))
        if value < 1:
            low = point
        else:
            high = point
        if low is None:  # too strong everywhere so far: a decade weaker
            if log_s <= bounds[0]:
                break
            log_s = max(log_s - 1, bounds[0])
        elif high is None:
            if log_s >= bounds[1]:
                break
            log_s = min(log_s + 1, bounds[1])
        else:  # false position in (log strength, log ratio), kept inside the bracket
            (x0, y0), (x1, y1) = low, high
            guess = x0 - y0 * (x1 - x0) / (y1 - y0) if y1 != y0 else (x0 + x1) / 2
            margin = 0.1 * (x1 - x0)
            log_s = min(max(guess, x0 + margin), x1 - margin)
    if low is not None and high is not None and abs(tried[-1][1] - 1) > TOLERANCE:
        # Out of solves: interpolate between the closest strengths on either side.
        (x0, y0), (x1, y1) = low, high
        best = 10.0 ** (x0 - y0 * (x1 - x0) / (y1 - y0)) if y1 != y0 else 10.0**x0
    return TVStrengthChoice(float(min(max(best, LIMITS[0]), LIMITS[1])), target, noise, tried)


def search_region(tilt: TiltMap) -> tuple[slice, slice, float, float, float]:
    """The central crop the search solves (at most :data:`SEARCH_SIZE` a side) and the tilt
    ``(zenith, azimuth, focus)`` of the tile whose centre is nearest the image's."""
    height, width = tilt.grid.shape
    h, w = min(height, SEARCH_SIZE), min(width, SEARCH_SIZE)
    top, left = (height - h) // 2, (width - w) // 2

    def distance(box: tuple[slice, slice]) -> float:
        ys, xs = box
        return ((ys.start + ys.stop - height) / 2) ** 2 + ((xs.start + xs.stop - width) / 2) ** 2

    boxes = tilt.grid.boxes()
    index = min(range(len(boxes)), key=lambda k: distance(boxes[k]))
    zenith, azimuth, focus = (
        float(a.ravel()[index]) for a in (tilt.zenith, tilt.azimuth, tilt.focus)
    )
    return slice(top, top + h), slice(left, left + w), zenith, azimuth, focus
