"""The selection rule of the automatic drift block length: Goldenshluger-Lepski bandwidth
selection over the candidates' traces, which needs no estimate of the drift's shape.

Each candidate length ``L`` gives a trace ``d_L`` (relative to frame 0, so frame 0's
extrapolated position, which offsets every frame, is part of it) whose noise variance
follows ``a / L``. A shorter candidate ``L' < L`` averages the same frames in finer blocks;
without bias the two traces differ by noise alone, of variance ``a (1/L' - 1/L)`` (nested
averages: the coarser one's noise is most of the finer one's). What the difference holds
beyond that noise is bias that ``L`` has and ``L'`` has not, so the squared bias of ``L`` is
at least ``B(L) = max over L' < L of (|d_L - d_L'|^2 - kappa^2 a (1/L' - 1/L))``, floored at
0, and the length of least ``B(L) + a / L`` is chosen (Goldenshluger & Lepski 2011, Ann.
Statist. 39:1608; Lepski 1991; the intersection of confidence intervals of Katkovnik 1999 is
the same idea).

``kappa`` is :data:`KAPPA`: 2 (two standard deviations), chosen on the development stacks of
benchmarks/drift_block_length_rules.py (seeds 1-8: the fewest cases beyond issue 27's 1.2x
bar among 1.5-3 in steps of 0.25, tied with 2.5 and 2.75; of the three, 2 had the fewest on
seeds 101-106, 5 against 7 and 8, so those seeds helped choose) and judged on seeds 201-206
only. Short blocks of sparse blinking sometimes catch a wrong
correlation peak that no noise estimate holds: such a candidate differs from every other by
far more than their noise and would make every longer one look biased, so a candidate
whose median standardised distance to the others exceeds :data:`OUTLIER` is left out.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["KAPPA", "OUTLIER", "consistent_lengths", "goldenshluger_lepski"]

KAPPA = 2.0
"""Noise standard deviations a difference of two candidates' traces may reach before it
counts as bias."""

OUTLIER = 3.0
"""Median standardised distance to the other candidates beyond which a candidate is left
out (its trace caught a wrong peak)."""


def _distance(traces: dict[int, np.ndarray], long: int, short: int) -> float:
    """RMS over frames and axes of the difference of two candidates' traces (px)."""
    return math.sqrt(float(np.mean((traces[long] - traces[short]) ** 2)))


def _difference_noise(a: float, one: int, other: int) -> float:
    """Variance of the difference of two nested candidates' traces without bias (px^2)."""
    return a * abs(1.0 / min(one, other) - 1.0 / max(one, other))


def consistent_lengths(
    traces: dict[int, np.ndarray], a: float, outlier: float = OUTLIER
) -> list[int]:
    """The candidate lengths whose trace agrees with the others': those whose median
    distance to the others, in standard deviations of the difference's noise, is at most
    ``outlier``. All of them when fewer than 3 (no majority to judge by), when there is no
    noise to judge by (``a`` 0: a stack without noise) or when fewer than 2 would remain.

    Examples
    --------
    >>> traces = {L: np.zeros((96, 2)) for L in (8, 16, 32)}
    >>> traces[4] = np.full((96, 2), 3.0)  # 4-frame blocks caught a wrong peak
    >>> consistent_lengths(traces, a=0.01)
    [8, 16, 32]
    """
    lengths = sorted(traces)
    if len(lengths) < 3 or not a > 0:
        return lengths
    kept = []
    for length in lengths:
        z = [
            _distance(traces, length, other) / math.sqrt(_difference_noise(a, length, other))
            for other in lengths
            if other != length
        ]
        if float(np.median(z)) <= outlier:
            kept.append(length)
    return kept if len(kept) >= 2 else lengths


def goldenshluger_lepski(
    traces: dict[int, np.ndarray], a: float, kappa: float = KAPPA
) -> dict[int, tuple[float, float]]:
    """Each candidate's estimated ``(noise, bias)`` RMS (px): noise ``sqrt(a / L)``, bias
    ``sqrt(B(L))`` with ``B(L)`` the largest excess of the squared distance to a shorter
    candidate's trace over ``kappa^2`` times its noise variance (module docstring). The
    choice is the length of least ``noise^2 + bias^2``.

    Parameters
    ----------
    traces : dict of int to ndarray
        Each candidate length's trace, ``(frames, 2)`` px, relative to frame 0.
    a : float
        The noise law's constant: a trace's noise variance (per frame and axis) is ``a / L``.
    kappa : float
        Standard deviations of the difference's noise that are not counted as bias.

    Examples
    --------
    A drift the 32-frame blocks average away: the 32-frame trace differs from the finer
    ones by far more than their noise, so 16 is chosen.

    >>> a = 0.16  # noise 0.1 px at 16 frames
    >>> traces = {L: np.zeros((64, 2)) for L in (4, 8, 16)}
    >>> traces[32] = np.full((64, 2), 0.5)
    >>> parts = goldenshluger_lepski(traces, a)
    >>> min(parts, key=lambda L: parts[L][0] ** 2 + parts[L][1] ** 2)
    16
    """
    lengths = sorted(traces)
    parts = {}
    for i, length in enumerate(lengths):
        excess = [
            _distance(traces, length, short) ** 2 - kappa**2 * _difference_noise(a, length, short)
            for short in lengths[:i]
        ]
        parts[length] = (math.sqrt(a / length), math.sqrt(max([0.0, *excess])))
    return parts
