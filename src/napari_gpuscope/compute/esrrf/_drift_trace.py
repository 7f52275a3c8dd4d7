"""A drift trace from block shifts: interpolation to every frame, the slope at the ends
and each block's standard error from its halves."""

from __future__ import annotations

import math

import numpy as np


def _interpolate(
    centres: np.ndarray,
    values: np.ndarray,
    n_frames: int,
    smoothing: float,
    errors: np.ndarray | None = None,
) -> np.ndarray:
    """Per-frame trace from block values at ``centres``: optional Gaussian smoothing (sigma
    in blocks), a cubic spline between the centres (not-a-knot: a parabola through 3 blocks;
    linear between 2), and beyond the first and last centres a straight line with the slope
    of :func:`_end_slope` (``errors``: the blocks' standard errors, ``(B, 2)``, NaN where
    unknown)."""
    values = values.copy()
    if errors is None:
        errors = np.full(values.shape, np.nan)
    if smoothing > 0 and len(values) > 1:
        from scipy.ndimage import gaussian_filter1d

        values = gaussian_filter1d(values, smoothing, axis=0, mode="nearest")
    frames = np.arange(n_frames, dtype=np.float64)
    out = np.empty((n_frames, 2), np.float64)
    inside = (frames >= centres[0]) & (frames <= centres[-1])
    if len(centres) >= 3:
        from scipy.interpolate import CubicSpline

        spline = CubicSpline(centres, values, axis=0)
        out[inside] = spline(frames[inside])
    else:
        for axis in range(2):
            out[inside, axis] = np.interp(frames[inside], centres, values[:, axis])
    low, high = frames < centres[0], frames > centres[-1]
    for mask, order in ((low, slice(None)), (high, slice(None, None, -1))):
        if mask.any():
            ends, at_end = centres[order], values[order]
            slope = _end_slope(ends - ends[0], at_end, errors[order])
            out[mask] = at_end[0] + (frames[mask, None] - ends[0]) * slope
    return out


_POOLED_BLOCKS = 5
"""Neighbouring blocks whose half-differences make one block's standard error. One pair of
halves is a one-sample estimate, below the actual error as often as above it (50 % of the
errors within it); five give 62-70 % on simulated stacks (the tests' and
benchmarks/drift_ends.py's) and still follow a noise that changes along the stack
(bleaching)."""


_CHI2_MEDIAN = 0.454936423119572
"""Median of a chi-square variable of one degree of freedom: the median of one-sample
variance estimates is this times the variance."""


def _block_uncertainty(
    centres: np.ndarray,
    values: np.ndarray,
    halves: np.ndarray,
    blocks: list[tuple[int, int]],
) -> np.ndarray:
    """``(B, 2)`` standard error (1 sigma, px) of each block's shift from the noise of its
    frames, from ``halves`` (the shift of each block's first half of frames from its second
    half; NaN for a block of one frame).

    The halves are contiguous, not the even and odd frames: an emitter that is on in one
    frame tends to be on in the next (blinking lasts frames), so interleaved halves hold
    nearly the same emitters and differ less than independent acquisitions would (the
    actual error was 1.7 times their estimate on simulated stacks, 3.3 times with longer
    on-times, as the workflow example's; 19-31 % of the errors within it). Contiguous halves
    share only the frames around their border, but the sample drifts between them: the
    drift the block values show there (their rate at the block's centre, NumPy's second-order
    gradient, times the ``count / 2`` frames between the halves' mean times) is taken off.
    A block of ``n`` frames split ``m + (n - m)`` has an error ``sqrt(m (n - m)) / n`` times
    the halves' difference. The squares, scaled to frame counts, are pooled over the
    ``_POOLED_BLOCKS`` nearest blocks by their median (divided by a one-degree chi-square's):
    in a sparse block one half may correlate on a wrong peak, pixels off, and a mean would
    spread that over five blocks.
    """
    count = np.array([stop - start for start, stop in blocks], np.float64)
    early = np.floor(count / 2)
    rate = np.gradient(values, centres, axis=0, edge_order=2 if len(centres) > 2 else 1)
    residual = halves + rate * (count / 2)[:, None]  # first minus second half: rate * -n/2
    variance = (residual * (np.sqrt(early * (count - early)) / count)[:, None]) ** 2
    per_frame = variance * count[:, None]  # a block's variance falls as 1 / its frames
    pooled = np.full(values.shape, np.nan)
    width = min(_POOLED_BLOCKS, len(blocks))
    for k in range(len(blocks)):
        lo = min(max(k - width // 2, 0), len(blocks) - width)
        window = per_frame[lo : lo + width]
        known = np.isfinite(window).any(axis=0)
        typical = np.nanmedian(window[:, known], axis=0) / _CHI2_MEDIAN
        pooled[k, known] = np.sqrt(typical / count[k])
    return pooled


_CURVATURE_SE = 2.0
"""A parabola's curvature counts beyond this many standard errors (of the blocks' calibrated
uncertainties, :func:`_block_uncertainty`). 3 or 4 lost more on curved drifts than they
gained on linear ones (simulated stacks). No end rule tried was better on every kind of
drift (benchmarks/drift_ends.py): this one is within 4 % of the best on average and 26 % at
worst (the workflow example's oscillation, where a parabola through 5 blocks misses its
third derivative and the old secant is better), where the old secant is 2 to 5 times worse
on curved drifts in 3 blocks."""


def _end_slope(offsets: np.ndarray, values: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """``(2,)`` slope at the end centre (``offsets[0] == 0``; the others run inwards) with
    which the trace is continued beyond it.

    A least-squares parabola through the nearest ``k = clip(B // 2, 3, 5)`` of the ``B``
    block values (the secant for 2 blocks) gives the slope at 0 where its curvature stands
    out of the blocks' noise (beyond twice its standard error, from the RMS of their
    ``errors``; always when these are unknown), else the least-squares line through the same
    blocks does. The secant of the last two blocks (the old rule) gives the rate half a
    block further in: a drift ``a t^2`` in blocks of ``w`` frames was 0.75 a w^2 off half a
    block beyond the end; the parabola follows the changing rate, the line averages the
    noise of a steady one, and neither extrapolates the curvature, which the noise makes
    unreliable. Measured on smooth drifts (quadratic, oscillating, exponential settling,
    linear; jitter 0.03 px a frame, block noise 0.01 to 0.06 px; 3 to 20 blocks): the
    trace's RMS error against the drift falls by 40 to 55 % for 3 blocks, 20 to 50 % for 4
    or 5, 8 to 36 % for 6 to 9 and ~10 % for more (the most where the noise is lowest); a
    linear drift's changes by 0.01 px at most. On simulated blinking stacks (96 x 96 px, 5
    of each): from 0.28 to 0.09 px for a quadratic drift in 3 blocks, 0.22 to 0.09 px for
    an oscillating one in 5, 0.31 to 0.16 px for a settling one in 5, 0.07 to 0.06 px for a
    quadratic in 8; a linear drift in 5 blocks went from 0.043 to 0.056 px.
    """
    if len(values) < 3:
        return (values[1] - values[0]) / (offsets[1] - offsets[0])
    k = int(np.clip(len(values) // 2, 3, 5))
    scale = float(abs(offsets[k - 1]))
    x = offsets[:k] / scale
    design = np.column_stack([x**2, x, np.ones(k)])
    (curvature, slope, _), *_ = np.linalg.lstsq(design, values[:k], rcond=None)
    line = np.linalg.lstsq(design[:, 1:], values[:k], rcond=None)[0][0]
    known = np.isfinite(errors[:k])
    count = known.sum(axis=0)
    squares = np.where(known, errors[:k], 0.0) ** 2
    sigma = np.sqrt(squares.sum(axis=0) / np.maximum(count, 1))
    sigma[count == 0] = np.nan  # blocks of one frame have no error estimate
    spread = sigma * math.sqrt(np.linalg.inv(design.T @ design)[0, 0])
    curved = ~(np.abs(curvature) <= _CURVATURE_SE * spread)  # NaN (errors unknown): curved
    return np.where(curved, slope, line) / scale
