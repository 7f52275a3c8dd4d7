"""Drift of a time series, estimated by block cross-correlation (see :mod:`._drift_correct`).

Conventions (the whole plugin uses them): a drift trace is a float64 ``(T, 2)`` array of
``(dy, dx)`` in input pixels; frame ``t`` shows frame 0's content moved by ``+shifts[t]``, so
``shifts[0]`` is ``(0, 0)`` and :func:`correct_drift` moves frame ``t`` by ``-shifts[t]``.

Estimation streams the stack once (``reference="mean"``: 3 to 6 times, below): frames are
summed into blocks of ``time_averaging`` frames on the device; each finished block is
correlated with the reference at once (FFTs), so device and host memory are O(frame),
whatever the number of frames. The correlation peak is refined by an upsampled DFT around
the integer peak (Guizar-Sicairos et al., Opt. Lett. 2008; 1/20 px grid) and a parabola
through the finest grid's 3 x 3 maximum. Block shifts are placed at the blocks' centre
frames and interpolated to every frame by a cubic spline (a parabola for 3 blocks, a line
for 2); before the first and after the last centre the trace goes on straight, with the
slope at that centre of a least-squares parabola through the nearest blocks (3 to 5 of
them), or of a line through them where the parabola's curvature is within their noise. Each
block's uncertainty comes from the difference between its first and second half of frames
(:func:`_block_uncertainty`).

A block whose correlation with its reference has no peak above the height noise alone
reaches (:func:`_peak_significance`: frames without sample, camera background, a constant)
is not measured (issue 26 item 1): its drift is interpolated from the measured blocks, by the
same spline, and beyond the first and last measured blocks' frames the trace is held at its
value there (never extrapolated over frames without sample). :attr:`DriftResult.measured`
marks which blocks were measured, and the summary, the description and the CSV say which
frames were interpolated. Fewer than two measured blocks is an error, and so is a trace that
moves a frame by its whole size (``reference="previous"`` adds its steps up).

``reference="mean"`` (issue 26): one pass sums every frame; each block is then measured
against the mean of the *other* blocks (the block's own part, which correlates with it at lag
0 and pulled every shift towards 0, taken off), and the blocks' positions solved from these
shifts (each block's reference is a different mean: :func:`_mean_positions`). The plain mean
of a drifting stack is blurred along the drift's path, so the blocks are measured again
against the mean of the others *aligned* by their last shifts, until no block's position
changes by more than its uncertainty (:data:`MEAN_REFINEMENTS` passes at most;
:attr:`DriftResult.mean_refinement` says how many were made and whether they settled). As
with every reference, the trace is relative to frame 0.

``time_averaging=None`` (the default) chooses the block length per stack (issue 27 item 3):
a pilot pass measures every candidate length at once (one block sum per candidate on the
device), :func:`choose_block_length` estimates each one's trace error, noise (the blocks'
uncertainty propagated) plus bias (its construction applied to a smoothed finer trace), and
the estimate is made with the length of least error, named in
:attr:`DriftResult.time_averaging_chosen`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..arrays import InvalidInputError
from ..devices import device_context
from ..jobs import Job, Progress, blocking, is_stop, scaled
from ..memory import check_budget, plan_chunk, run_in_chunks
from ..params import ParameterError
from ..signatures import takes_params
from ._drift_correct import (
    CPU_CHUNK,
    GPU_CHUNK,
    _check_stack,
    _frames_on_device,
    shift_frames,
)
from ._drift_params import DriftParams
from ._drift_result import BlockLengthChoice, DriftResult
from ._input import check_frames_per_chunk
from ._reader import FrameReader
from ._resample import tukey_window

__all__ = ["drift_blocks", "estimate_drift", "iter_estimate_drift"]

UPSAMPLING = 20
"""Sub-pixel grid of the peak refinement: 1/20 px, then a parabola through its maximum."""


# ----------------------------------------------------------------------------- estimation
def drift_blocks(
    n_frames: int,
    time_averaging: int | None,
    *,
    name: str = "stack",
    parameter: str = "time_averaging",
) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the blocks: ``time_averaging`` frames each, the remainder
    joined to the last block; at least two blocks, or an error saying how many frames are
    needed (naming ``parameter``: eSRRF's is ``drift_time_averaging``). ``None``
    (automatic) checks that the stack has two frames and returns the blocks of the finest
    length :func:`auto_lengths` tries.

    Examples
    --------
    >>> drift_blocks(250, 100)
    [(0, 100), (100, 250)]
    """
    if time_averaging is None:
        if n_frames < 2:
            raise InvalidInputError(
                f"{name} has {n_frames} frame(s); drift estimation needs at least 2 frames "
                "(a single frame has no drift to estimate)"
            )
        time_averaging = auto_lengths(n_frames)[0]
    count = n_frames // time_averaging
    if count < 2:
        raise InvalidInputError(
            f"{name} has {n_frames} frame(s); drift estimation with {parameter}="
            f"{time_averaging} needs at least {2 * time_averaging} frames (two blocks to "
            f"correlate). Lower {parameter} to at most {max(1, n_frames // 2)}"
            + (" (a single frame has no drift to estimate)" if n_frames < 2 else "")
        )
    edges = [k * time_averaging for k in range(count)] + [n_frames]
    return list(itertools.pairwise(edges))


AUTO_SHORTEST = 4
"""Shortest block the automatic choice tries: halves of 2 frames, the fewest whose
difference measures a block's noise with some emitters in common."""

AUTO_MOST_BLOCKS = 128
"""Most blocks a candidate length may cut the stack into (the pilot correlates every block
of every candidate: about ``2 * frames / shortest`` correlations)."""

AUTO_FEWEST_BLOCKS = 3
"""Fewest blocks of a candidate: the end rule and the curvature need three."""


def auto_lengths(n_frames: int) -> list[int]:
    """Block lengths the automatic choice compares: 4, 6, 8, 12, 16, 24, ... (steps of
    1.5 and 4/3: the error of a length off the best by a step is within ~7 % of the best's
    for noise ~1/L and bias ~L^2), from ``max(4, frames / 128)`` to ``frames / 3``; a
    stack too short for three blocks of 4 gets ``[frames // 2]`` (two blocks).

    Examples
    --------
    >>> auto_lengths(200)
    [4, 6, 8, 12, 16, 24, 32, 48, 64]
    >>> auto_lengths(2000)
    [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    >>> auto_lengths(9)
    [4]
    """
    shortest = max(AUTO_SHORTEST, -(-n_frames // AUTO_MOST_BLOCKS))
    longest = n_frames // AUTO_FEWEST_BLOCKS
    ladder, power = [], AUTO_SHORTEST
    while power <= longest:
        ladder += [power, power * 3 // 2]
        power *= 2
    lengths = sorted(length for length in ladder if shortest <= length <= longest)
    return lengths or [max(1, n_frames // 2)]


class _Correlator:
    """Spectra of windowed, mean-subtracted images and the sub-pixel peak of their
    cross-correlation."""

    def __init__(self, height: int, width: int, device: torch.device) -> None:
        self.shape = (height, width)
        self.device = device
        self.window = tukey_window(height, device)[:, None] * tukey_window(width, device)[None, :]
        # The variance of a correlation of windowed noise is largest at small lags, where the
        # windows overlap most: N sum w^4 / (sum w^2)^2 times its mean over all lags (the
        # Bartlett factor channel registration uses too). Peaks, real or by chance, lie there.
        squares = self.window.to(torch.float64) ** 2
        self.lag_zero = float(height * width * (squares**2).sum() / squares.sum() ** 2)
        self.freq_y = torch.fft.fftfreq(height, device=device, dtype=torch.float64) * height
        self.freq_x = torch.fft.fftfreq(width, device=device, dtype=torch.float64) * width

    def spectrum(self, image: torch.Tensor) -> torch.Tensor:
        """complex128 FFT of the windowed image (its mean removed)."""
        image = image.to(torch.float64)
        return torch.fft.fft2((image - image.mean()) * self.window)

    def peak(
        self,
        moved: torch.Tensor,
        reference: torch.Tensor,
        limit: float | None,
        noise: torch.Tensor | None = None,
        reference_noise: torch.Tensor | None = None,
    ) -> tuple[np.ndarray, bool, float]:
        """``(dy, dx)`` such that ``moved`` is ``reference`` moved by it, whether the
        integer peak lies on the edge of the search window (the drift may exceed ``limit``),
        and the peak's significance (:func:`_peak_significance`; >= 1: a real peak).

        ``noise`` and ``reference_noise``: spectra of the two images' own noise
        (:func:`_noise_image`). The correlation of ``moved = S + N`` with ``reference = R +
        M`` fluctuates by ``N * (R + M)`` and by ``S * M``: the first is the correlation of
        ``noise`` with the reference, the second that of ``moved`` with ``reference_noise``
        (it holds ``N * M`` again: conservative by at most that term). Without the second,
        a block with sample correlated with a blank reference block (background noise) passed
        as a real peak: ``S * M`` is as large as ``S``'s structure."""
        height, width = self.shape
        cross = moved * reference.conj()
        surface = torch.fft.ifft2(cross).real
        surface = torch.fft.fftshift(surface)
        cy, cx = height // 2, width // 2
        on_edge = False
        if limit is not None:
            radius = math.ceil(limit) + 1
            r0, r1 = max(0, cy - radius), min(height, cy + radius + 1)
            c0, c1 = max(0, cx - radius), min(width, cx + radius + 1)
            sub = surface[r0:r1, c0:c1]
            index = int(torch.argmax(sub))
            row, col = divmod(index, sub.shape[1])
            row, col = row + r0, col + c0
            on_edge = abs(row - cy) >= radius or abs(col - cx) >= radius
        else:
            index = int(torch.argmax(surface))
            row, col = divmod(index, width)
        coarse = np.array([row - cy, col - cx], np.float64)
        spread = None
        if noise is not None:  # the correlation of the block's own noise with the reference
            count = height * width
            variance = (_noise_power(noise) * _power(reference)).sum() / count**2
            if reference_noise is not None:  # and of the block with the reference's noise
                variance += (_power(moved) * _noise_power(reference_noise)).sum() / count**2
            spread = math.sqrt(float(variance) * self.lag_zero)
        significance = _peak_significance(surface, float(surface[row, col]), spread)
        refined = self._upsampled_peak(cross, coarse)
        return refined, on_edge, significance

    def measure(
        self,
        image: torch.Tensor,
        reference: torch.Tensor,
        limit: float | None,
        noise: torch.Tensor | None = None,
        reference_noise: torch.Tensor | None = None,
    ) -> tuple[np.ndarray, bool, float]:
        """``(dy, dx)`` of ``image`` relative to the image of the spectrum ``reference``
        (``noise``, ``reference_noise``: see :meth:`peak`).

        The window that keeps the frame's edges out of the correlation stays put while the
        content moves, which pulls a shift measured in one go towards zero (0.08 px at 5 px on
        a 96 px frame); so the image is moved back by the first estimate and the small residual
        measured again, where the window is symmetric about the content.
        """
        first, on_edge, significance = self.peak(
            self.spectrum(image), reference, limit, noise, reference_noise
        )
        if not significance >= 1.0:  # no structure: the residual would be noise too
            return first, on_edge, significance
        back = shift_frames(image.to(torch.float32)[None], first[None])[0]
        residual, _, _ = self.peak(self.spectrum(back), reference, 2.0)
        return first + residual, on_edge, significance

    def _upsampled_peak(self, cross: torch.Tensor, coarse: np.ndarray) -> np.ndarray:
        """The correlation's maximum near ``coarse``: a matrix DFT of ``cross`` on a
        1/UPSAMPLING grid of +-1.5 px, then a parabola through the 3 x 3 around its maximum."""
        height, width = self.shape
        steps = torch.arange(
            -1.5 * UPSAMPLING, 1.5 * UPSAMPLING + 1, device=self.device, dtype=torch.float64
        )
        offsets = steps / UPSAMPLING
        ys = coarse[0] + offsets
        xs = coarse[1] + offsets
        rows = torch.exp(2j * math.pi * ys[:, None] * self.freq_y[None, :] / height)
        cols = torch.exp(2j * math.pi * self.freq_x[:, None] * xs[None, :] / width)
        surface = (rows @ cross @ cols).real  # (n, n)
        n = surface.shape[0]
        index = int(torch.argmax(surface))
        i, j = divmod(index, n)
        i, j = min(max(i, 1), n - 2), min(max(j, 1), n - 2)
        patch = surface[i - 1 : i + 2, j - 1 : j + 2].cpu().numpy()
        di = _parabola_vertex(patch[0, 1], patch[1, 1], patch[2, 1])
        dj = _parabola_vertex(patch[1, 0], patch[1, 1], patch[1, 2])
        return np.array(
            [float(ys[i]) + di / UPSAMPLING, float(xs[j]) + dj / UPSAMPLING], np.float64
        )


def _power(spectrum: torch.Tensor) -> torch.Tensor:
    return spectrum.real**2 + spectrum.imag**2


NOISE_POWER_BOX = 9
"""Frequencies (per axis) over which a noise image's periodogram is averaged into its
expected power (:func:`_noise_power`)."""


def _noise_power(spectrum: torch.Tensor) -> torch.Tensor:
    """The expected power spectrum of the noise whose one realisation ``spectrum`` is: its
    periodogram averaged over ``NOISE_POWER_BOX`` x ``NOISE_POWER_BOX`` frequencies
    (circularly). One periodogram value has 2 degrees of freedom; the variance of a
    correlation surface weighs them by the other image's power, which a smooth sample puts
    on a few low frequencies, so the spread taken from one noise realisation was off by
    +-25 % on 48 x 48 px blocks and a background block passed against a textured one 1-2 %
    of the time instead of 0.1 %. The noise's spectrum is smooth (white camera noise, seen
    through the window), so the box average estimates it with ~160 degrees of freedom."""
    box = NOISE_POWER_BOX
    power = _power(spectrum)[None, None]
    padded = torch.nn.functional.pad(power, (box // 2,) * 4, mode="circular")
    return torch.nn.functional.avg_pool2d(padded, box, stride=1)[0, 0]


_FALSE_PEAK_PROBABILITY = 1e-3
"""Chance that two images without common structure pass :func:`_peak_significance`."""


def _peak_significance(surface: torch.Tensor, peak: float, spread: float | None = None) -> float:
    """The correlation peak's height above the surface's median, in units of the height
    that pure noise reaches with probability :data:`_FALSE_PEAK_PROBABILITY`.

    Noise model: the cross-correlation of two images without common structure is, at each
    of its ``N`` lags, a sum of many products of independent pixels, so roughly Gaussian
    with a spread estimated robustly by the surface's median absolute deviation (x 1.4826,
    which a real peak a few pixels wide barely moves). The highest of ``N`` such values
    exceeds ``z`` standard deviations with probability at most ``N Q(z)`` (Bonferroni; the
    lags are mildly correlated by the window, so fewer effective samples: conservative), so
    the threshold is ``z = Q^-1(p / N)``: 4.9 sigma for 64 x 64 frames, 5.3 for 128 x 128.
    ``spread``, where known, replaces the MAD: the standard deviation of the correlation of
    the block's own noise with the reference (:func:`_noise_image`). The MAD also holds the
    sample's structure (a filament network's correlation has ridges everywhere), which
    refused real, sparse blocks (32 x 32 px blinking filaments of 4 frames); the noise
    image holds none of it. A constant image has a zero surface: significance 0.
    """
    from scipy.special import ndtri

    values = surface.flatten()
    centre = torch.median(values)
    if spread is None:
        spread = 1.4826 * float(torch.median(torch.abs(values - centre)))
    height = peak - float(centre)
    threshold = float(-ndtri(_FALSE_PEAK_PROBABILITY / values.numel()))
    scale = max(abs(float(centre)), abs(peak), 1e-300)
    if not height > 1e-9 * scale:
        return 0.0
    if spread <= 1e-12 * scale:
        return math.inf  # a clean peak on a flat background
    return height / spread / threshold


def _noise_image(sums: _BlockSums, count: int) -> torch.Tensor:
    """The block's noise alone, at the level of its mean's: the difference of its halves'
    means (the sample cancels, as far as it does not change within the block), scaled by
    ``sqrt(m (n - m)) / n`` (halves of ``m`` and ``n - m`` frames: the difference's variance
    is ``sigma^2 (1/m + 1/(n - m))``, the mean's ``sigma^2 / n``)."""
    early = count // 2
    first = sums.first_half / early
    second = (sums.total - sums.first_half) / (count - early)
    return (first - second) * (math.sqrt(early * (count - early)) / count)


def _parabola_vertex(before: float, centre: float, after: float) -> float:
    """Offset (in samples, within +-0.5) of the vertex of the parabola through three samples."""
    curvature = before - 2 * centre + after
    if curvature >= 0:
        return 0.0
    return float(np.clip(0.5 * (before - after) / curvature, -0.5, 0.5))


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


@takes_params(DriftParams)
def iter_estimate_drift(
    stack: Any,
    params: DriftParams,
    *,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    device: str | torch.device | None = None,
) -> Job[DriftResult]:
    """Estimate the drift of a time series as a job.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames (NumPy, dask, zarr, memory-mapped TIFF, torch), any real dtype,
        read chunk by chunk; never modified.
    {params}
    params : DriftParams, optional
        All parameters at once (keywords given as well override its fields).
    frames_per_chunk : int, optional
        At most this many frames per device chunk (default 64 on a GPU, 8 on the CPU).
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory.
    name : str
        How the input is called in error messages.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` runs on the CPU.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` after every chunk, with the
        metrics ``dy`` and ``dx`` (px) of each finished block at its centre frame (``step``);
        returns a :class:`DriftResult`. Sending ``STOP`` finishes the block being measured
        (and more until two are measured, a trace needs two) and returns the trace of the
        frames those blocks cover, marked ``stopped_early`` (with ``reference="mean"``, a
        stop during the reference's pass ends it there: the reference is the mean of the
        frames read; a stop during a later pass, one against the aligned mean, keeps the
        whole trace of the pass before it). With ``reference="mean"`` the blocks' metrics
        are those of the first pass, against the plain mean; the passes that follow refine
        them (:attr:`DriftResult.mean_refinement`). Blocks with no structure in common with
        their reference (no sample) are not measured: :attr:`DriftResult.measured` marks
        them, their drift is interpolated from the measured blocks and held beyond the first
        and last of them.
        With ``reference="previous"`` each block is correlated with the last measured one.
        With ``time_averaging=None`` the stack is read once more first, to choose the block
        length (:func:`choose_block_length`; progress 0-50 %): the result's
        ``time_averaging_chosen`` and ``block_length_choice`` say what was chosen and why.

    Raises
    ------
    InvalidInputError
        For a stack that is not ``(T, Y, X)``, frames smaller than 8 pixels, fewer than
        ``2 * time_averaging`` frames, or NaN/infinite values; fewer than two blocks with
        structure in common with their reference (naming the others; with
        ``reference="first"``, a first block without sample); a trace that moves a frame by
        its whole size or more (naming the frame: ``"previous"`` adds its steps up).
    ParameterError
        For invalid parameters, or a drift beyond ``max_drift`` (naming the block).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.esrrf import estimate_drift
    >>> y, x = np.mgrid[:64, :64]
    >>> blob = lambda cy, cx: 1000 * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / 8)
    >>> stack = np.stack([blob(30, 30)] * 4 + [blob(31, 32.5)] * 4)
    >>> r = estimate_drift(stack, time_averaging=4, device="cpu")
    >>> np.round(r.block_shifts[-1] - r.block_shifts[0], 2).tolist()
    [1.0, 2.5]
    """
    check_frames_per_chunk(frames_per_chunk)
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)
    n, height, width = _check_stack(stack, name)
    drift_blocks(n, params.time_averaging, name=name)
    if params.max_drift is not None and params.max_drift >= min(height, width) / 2:
        raise ParameterError(
            f"DriftParams.max_drift is {params.max_drift:g} px but the frames are {height} x "
            f"{width}: the correlation can only measure up to half a frame "
            f"({min(height, width) // 2 - 1} px); lower max_drift or use None"
        )
    memory_budget = check_budget(memory_budget)
    return _estimate(stack, params, frames_per_chunk, memory_budget, name, device)


class _BlockSums:
    """Per-block sums of all frames and of the block's first half (frames before ``middle``),
    filled chunk by chunk."""

    def __init__(self, shape: tuple[int, int], device: torch.device, middle: int = 0) -> None:
        self.total = torch.zeros(shape, dtype=torch.float64, device=device)
        self.first_half = torch.zeros_like(self.total)
        self.middle = middle
        self.frames = 0


class _StopReading(Exception):
    """Stop & keep during the mean reference's pass: the frames read so far are the mean."""


@dataclasses.dataclass
class _Pass:
    """One pass of the estimate over the blocks: each block's shift against its reference,
    whether it was measured, its halves' shift, whether they share structure, the aligned
    sum (each measured block moved back by its shift, weighted by its frames over the
    stack's), the frames in it, and how many blocks were read (fewer after a stop)."""

    measured: np.ndarray
    known: np.ndarray
    halves: np.ndarray
    structured: np.ndarray
    aligned: torch.Tensor
    aligned_frames: int
    done: int


class _MeanReference:
    """The reference of ``reference="mean"``: the mean of the frames (``total``: the sum of
    each block's part, ``frames / n`` of it in all; ``(1, Y, X)``), each block in it moved
    back by ``shifts[k]`` (zero on the first pass: the plain mean), and which blocks are in it
    (``entered``).

    A block is measured against the mean of the *others* (:meth:`spectrum_without`): the
    block's own part correlates with the block at lag 0 (its noise and its blinking emitters
    exactly), which pulled every shift towards 0, by up to a pixel for a drift of 10 px over
    the stack (issue 26).
    """

    def __init__(
        self, total: torch.Tensor, frames: int, n: int, shifts: np.ndarray, entered: np.ndarray
    ) -> None:
        self.total, self.frames, self.n = total, frames, n
        self.shifts, self.entered = shifts, entered

    def spectrum_without(
        self, k: int, mean: torch.Tensor, count: int, correlator: _Correlator
    ) -> torch.Tensor:
        """The spectrum of the mean of the other blocks' frames (``mean``: block ``k``'s mean
        of ``count`` frames). Its part is taken off as it was added (moved back by the same
        shift), so only rounding is left of it; a block that is not in the mean wholly (a
        stop during the reference's pass read part of it) or alone in it is measured against
        the whole mean."""
        if self.entered[k] and self.frames > count:
            own = shift_frames(mean[None], self.shifts[k : k + 1]) * (count / self.n)
            image = (self.total - own) * (self.n / (self.frames - count))
        else:
            image = self.total * (self.n / self.frames)
        return correlator.spectrum(image[0])


MEAN_REFINEMENTS = 4
"""Most passes that re-measure the blocks against the mean of the aligned others
(``reference="mean"``); each reads the stack once more. A linear drift of 8 px over 8 blocks
(simulated blinking stacks) settles after 1 or 2."""

MEAN_TOLERANCE_FLOOR = 0.01
"""Smallest change (px) that counts as one in the refinement's stopping rule, where a block's
uncertainty is unknown (blocks of one frame) or smaller: well below any block's error on
real data, and about what the peak refinement resolves (a parabola through a 1/20 px grid)."""


def _refine_mean(
    state: _Pass,
    plain: _MeanReference,
    blocks: list[tuple[int, int]],
    measuring: Callable[[float, float, _MeanReference | None, _Pass | None], Job[_Pass | None]],
    stopping: dict[str, bool],
    span: tuple[float, float],
) -> Job[tuple[_Pass, dict[str, Any]]]:
    """The blocks' positions (:func:`_mean_positions`) from the pass against the plain mean
    (``state``), then from passes against the mean of the other blocks *aligned* by the last
    pass's shifts, until no block's position changes by more than its uncertainty (beyond a
    common offset, which the trace relative to frame 0 drops), at most
    :data:`MEAN_REFINEMENTS` times. The plain mean of a drifting stack is blurred along the
    drift's path (a ridge in the correlation rather than a peak, whose maximum lies anywhere
    along it); the aligned mean is as sharp as a block, and the positions' linear model holds.

    Returns the last pass, its ``measured`` replaced by the positions, and what happened
    (:attr:`DriftResult.mean_refinement`): the measuring passes, whether they converged, the
    largest change of the last one (px) and whether a stop cut the refinement short (the
    last complete pass is kept). A stop during the reference's pass (its mean holds only the
    frames read) keeps the first pass's shifts as measured."""
    n = plain.n
    info: dict[str, Any] = {
        "passes": 1,
        "converged": False,
        "largest_change_px": None,
        "most_passes": 1 + MEAN_REFINEMENTS,
        "stopped": bool(stopping["requested"]),
    }
    if plain.frames < n or state.known.sum() < 2:
        return state, info
    positions = _mean_positions(state, plain, blocks)
    lo, hi = span
    for i in range(MEAN_REFINEMENTS):
        if stopping["requested"] or state.done < len(blocks):
            info["stopped"] = bool(stopping["requested"])
            break
        reference = _MeanReference(
            state.aligned, state.aligned_frames, n, state.measured, state.known
        )
        step = (hi - lo) / MEAN_REFINEMENTS
        newer = yield from measuring(lo + i * step, lo + (i + 1) * step, reference, state)
        if newer is None:  # a stop: the last complete pass stands
            info["stopped"] = True
            break
        if newer.known.sum() < 2:  # refused by _check_measured: nothing to refine
            state, positions = newer, newer.measured
            break
        moved = _mean_positions(newer, reference, blocks)
        excess, change = _position_change(state.known, positions, newer, moved, blocks)
        state, positions = newer, moved
        info["passes"] += 1
        info["largest_change_px"] = change
        if excess <= 1.0:
            info["converged"] = True
            break
    return dataclasses.replace(state, measured=positions), info


def _mean_positions(
    state: _Pass, reference: _MeanReference, blocks: list[tuple[int, int]]
) -> np.ndarray:
    """``(B, 2)``: each measured block's position from its shift against the mean of the
    others (NaN-free; unmeasured blocks keep their values).

    Block ``j`` enters the reference moved back by ``s_j`` (``reference.shifts``), so it sits
    at ``x_j - s_j`` where ``x_j`` is its position; the others' mean sits at their weighted
    mean position (weights: frames; the linear model of a correlation peak, exact where
    these offsets are small beside the sample's structure) and the measured shift is
    ``m_k = x_k - sum_j a_kj (x_j - s_j)``, ``a_kj`` block ``j``'s share of block ``k``'s
    reference. The reference differs from block to block, so ``m`` is not a trace: against
    the plain mean (all ``s = 0``) ``m_k = x_k - mean_j≠k x_j``, a linear drift stretched by
    ``B / (B - 1)`` (2 for two blocks). The system is solved by least squares for the
    positions of the measured blocks (an entered block measured no more is taken at its
    ``s``); a common offset solves it as well, and the one chosen gives ``x`` the frame
    weighted mean of ``m``, so the aligned mean (built with ``m``) stays in ``x``'s
    coordinates."""
    counts = np.array([b - a for a, b in blocks], np.float64)
    rows = np.nonzero(state.known)[0]
    column = {int(k): i for i, k in enumerate(rows)}
    weights = np.where(reference.entered, counts, 0.0)
    matrix = np.eye(len(rows))
    rhs = state.measured[rows].copy()
    for i, k in enumerate(rows):
        share = weights.copy()
        if reference.entered[k] and reference.frames > counts[k]:
            share[k] = 0.0  # left out of its own reference (spectrum_without)
        if share.sum() <= 0:
            return state.measured.copy()
        share /= share.sum()
        for j in np.nonzero(share)[0]:
            if int(j) in column:
                matrix[i, column[int(j)]] -= share[j]
                rhs[i] -= share[j] * reference.shifts[j]
    solved = np.linalg.lstsq(matrix, rhs, rcond=None)[0]
    w = counts[rows] / counts[rows].sum()
    solved += (w[:, None] * (state.measured[rows] - solved)).sum(axis=0)
    positions = state.measured.copy()
    positions[rows] = solved
    return positions


def _position_change(
    known: np.ndarray,
    old: np.ndarray,
    new: _Pass,
    positions: np.ndarray,
    blocks: list[tuple[int, int]],
) -> tuple[float, float]:
    """``(largest change over its tolerance, largest change in px)`` of the measured blocks'
    positions from ``old`` to ``positions`` (of the pass ``new``), their mean change (a
    common offset) taken off; a block's tolerance is its uncertainty
    (:func:`_block_uncertainty`), at least :data:`MEAN_TOLERANCE_FLOOR`. A block measured in
    one pass and not the other: infinite (the set of blocks has not settled)."""
    if not np.array_equal(known, new.known):
        return math.inf, math.inf
    good = np.nonzero(new.known)[0]
    centres = np.array([(a + b - 1) / 2 for a, b in blocks], np.float64)[good]
    uncertainty = _block_uncertainty(
        centres, positions[good], new.halves[good], [blocks[i] for i in good]
    )
    tolerance = np.where(
        np.isfinite(uncertainty),
        np.maximum(uncertainty, MEAN_TOLERANCE_FLOOR),
        MEAN_TOLERANCE_FLOOR,
    )
    change = positions[good] - old[good]
    change -= change.mean(axis=0)
    return float(np.max(np.abs(change) / tolerance)), float(np.abs(change).max())


def _estimate(
    stack: Any,
    params: DriftParams,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
) -> Job[DriftResult]:
    n = int(stack.shape[0])
    choice: BlockLengthChoice | None = None
    stopping = {"requested": False}  # Stop & keep: finish the block, return the blocks
    if params.time_averaging is None:
        lengths = auto_lengths(n)
        if len(lengths) == 1:
            choice = BlockLengthChoice(lengths[0], {lengths[0]: math.nan}, None)
        else:
            pilot = _pilot(stack, params, lengths, frames_per_chunk, memory_budget, name, device)
            choice = yield from scaled(pilot, 0.0, 0.5, "block length: ")
            stopping["requested"] = choice.stopped
        length = choice.length
        final = _measure(
            stack, params, length, frames_per_chunk, memory_budget, name, device, stopping
        )
        result = yield from scaled(final, 0.5 if len(choice.scores) > 1 else 0.0, 1.0)
        return dataclasses.replace(
            result, time_averaging_chosen=length, block_length_choice=choice.summary()
        )
    result = yield from _measure(
        stack, params, params.time_averaging, frames_per_chunk, memory_budget, name, device,
        stopping,
    )  # fmt: skip
    return result


def _measure(
    stack: Any,
    params: DriftParams,
    length: int,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
    stopping: dict[str, bool],
) -> Job[DriftResult]:
    """The estimate with blocks of ``length`` frames (a stop already requested: the first two
    measured blocks only)."""
    n, height, width = (int(s) for s in stack.shape)
    blocks = drift_blocks(n, length, name=name)
    limit = params.max_drift
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        itemsize = int(stack.dtype.itemsize)
        per_frame = height * width * (itemsize + 4 + 8)
        fixed = height * width * (6 * 8 + 4 * 16 + 8)
        cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
        chunk = plan_chunk(
            min(length, cap),
            per_frame,
            dev,
            fixed_bytes=fixed,
            budget=memory_budget,
            what="drift estimation",
        )
        correlator = _Correlator(height, width, dev)

        def summed(
            first: int, stop: int, sums: _BlockSums, *, interruptible: bool = False
        ) -> Job[None]:
            def process(start: int, end: int) -> Job[None]:
                host = reader.read(first + start, first + end, prefetch_until=stop)
                frames = _frames_on_device(host, dev, name, first + start).to(torch.float64)
                # Committed only now: a chunk retried after an out-of-memory error adds once.
                in_first_half = min(max(sums.middle - (first + start), 0), end - start)
                sums.total += frames.sum(0)
                sums.first_half += frames[:in_first_half].sum(0)
                sums.frames += end - start
                del frames
                command = yield Progress(
                    1.0, f"drift: frames {first + start}-{first + end - 1} of {n}"
                )
                if is_stop(command):
                    stopping["requested"] = True
                    if interruptible:
                        raise _StopReading

            yield from run_in_chunks(
                stop - first,
                min(chunk, stop - first),
                process,
                device=dev,
                bytes_per_item=per_frame,
                fixed_bytes=fixed,
                budget=memory_budget,
                what="drift estimation",
            )

        def measuring(
            lo: float, hi: float, mean_reference: _MeanReference | None, earlier: _Pass | None
        ) -> Job[_Pass | None]:
            """One pass over the blocks, each correlated with its reference (progress from
            ``lo`` to ``hi``). ``earlier``: the pass a ``reference="mean"`` refinement follows
            (its half shifts are reused); a refinement returns None when a stop is requested
            (the earlier pass is kept)."""
            refining = earlier is not None
            measured = np.zeros((len(blocks), 2), np.float64)
            # known[k]: block k shares structure with its reference (its shift is measured);
            # the others are interpolated from the measured blocks (issue 26 item 1).
            known = np.zeros(len(blocks), bool)
            aligned = torch.zeros((1, height, width), dtype=torch.float64, device=dev)
            aligned_frames = 0
            # reference="previous": the last block with structure (index, spectrum, mean, noise)
            anchor: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
            # reference="first": block 0's spectrum and noise. The mean of the other frames
            # (reference="mean") averages their noise: a block can pass against it by chance
            # only where all other blocks are blank, and then it is the only measured block,
            # which is refused.
            reference_spectrum = None
            reference_noise = None
            if earlier is not None:  # the halves' shifts do not depend on the reference
                halves, structured = earlier.halves, earlier.structured
            else:
                halves = np.full((len(blocks), 2), np.nan)
                structured = np.zeros(len(blocks), bool)  # the block's halves share structure
            done = len(blocks)
            for k, (first, stop) in enumerate(blocks):
                sums = _BlockSums((height, width), dev, middle=first + (stop - first) // 2)
                block_lo = lo + (hi - lo) * k / len(blocks)
                block_hi = lo + (hi - lo) * (k + 1) / len(blocks)
                yield from scaled(summed(first, stop, sums), block_lo, block_hi)
                count = stop - first
                mean = sums.total / count
                spectrum = correlator.spectrum(mean)
                noise = correlator.spectrum(_noise_image(sums, count)) if count >= 2 else None
                if count >= 2 and not refining:
                    early = count // 2
                    second = (sums.total - sums.first_half) / (count - early)
                    half, _, half_significance = correlator.measure(
                        sums.first_half / early, correlator.spectrum(second), None
                    )
                    if half_significance >= 1.0:  # else unknown (NaN): no noise-only shifts
                        halves[k] = half
                        structured[k] = True  # its halves share structure: not blank
                if params.reference == "first" and k == 0:
                    reference_spectrum, reference_noise = spectrum, noise
                if params.reference == "previous":
                    if anchor is not None:
                        at, against, at_mean, at_noise = anchor
                        step, edge, significance = correlator.measure(
                            mean, against, limit, noise, at_noise
                        )
                        if significance >= 1.0:
                            what = "the previous block" if at == k - 1 else f"block {at + 1}"
                            _check_limit(step, edge, limit, k, first, stop, what)
                            if not known[at]:  # the chain's first block: its origin (0, 0)
                                known[at] = True
                                weight = (blocks[at][1] - blocks[at][0]) / n
                                aligned += at_mean[None] * weight
                                aligned_frames += blocks[at][1] - blocks[at][0]
                            measured[k] = measured[at] + step
                            known[k] = True
                            anchor = (k, spectrum, mean, noise)
                        elif not known[at] and not (structured[at] and not structured[k]):
                            # Nothing measured yet: the earlier block or this one is blank;
                            # the chain starts with the first pair that shares structure. An
                            # earlier block whose halves share structure stays the anchor
                            # while the blocks after it show none (a sample between blank
                            # blocks).
                            anchor = (k, spectrum, mean, noise)
                        # else: no structure in common with the last measured block: this
                        # block is unmeasured, and the next one is correlated with that
                        # block again.
                    else:
                        anchor = (k, spectrum, mean, noise)
                elif params.reference == "first" and k == 0:
                    measured[k] = 0.0  # known once another block correlates with it
                else:
                    if mean_reference is not None:  # the mean without this block's part
                        reference_spectrum = mean_reference.spectrum_without(
                            k, mean, count, correlator
                        )
                    shift, edge, significance = correlator.measure(
                        mean, reference_spectrum, limit, noise, reference_noise
                    )
                    if significance >= 1.0:
                        _check_limit(shift, edge, limit, k, first, stop, f"the {params.reference}")
                        measured[k] = shift
                        known[k] = True
                        if params.reference == "first":
                            known[0] = True
                if known[k] or (params.reference == "first" and k == 0):
                    # blocks without structure (no sample) are left out of the aligned mean;
                    # a first block that nothing correlates with is refused below
                    aligned += shift_frames(mean[None], measured[k : k + 1]) * (count / n)
                    aligned_frames += count
                del sums, spectrum, mean, noise
                centre = (first + stop - 1) / 2
                if refining:  # the first pass drew the live trace; this one refines it
                    yield Progress(
                        block_hi,
                        f"drift: block {k + 1}/{len(blocks)} against the aligned mean",
                    )
                elif known[k] or (params.reference == "first" and k == 0):
                    yield Progress(
                        block_hi,
                        f"drift: block {k + 1}/{len(blocks)} dy {measured[k, 0]:+.3f}, "
                        f"dx {measured[k, 1]:+.3f} px",
                        step=round(centre),
                        metrics={"dy": float(measured[k, 0]), "dx": float(measured[k, 1])},
                    )
                else:
                    yield Progress(
                        block_hi,
                        f"drift: block {k + 1}/{len(blocks)} has no structure in common with "
                        "its reference: its drift will be interpolated",
                    )
                if stopping["requested"]:
                    if refining:
                        return None
                    if k >= 1 and known[: k + 1].sum() >= 2:
                        done = k + 1
                        break
            return _Pass(measured, known, halves, structured, aligned, aligned_frames, done)

        refinement: dict[str, Any] | None = None
        if params.reference == "mean":
            sums = _BlockSums((height, width), dev)
            with contextlib.suppress(_StopReading):
                pass_over = summed(0, n, sums, interruptible=True)
                yield from scaled(pass_over, 0.0, 1.0 / 3.0, "reference: ")
            read = sums.frames  # all frames, or those read before a stop
            plain = _MeanReference(
                sums.total[None] / n,
                read,
                n,
                np.zeros((len(blocks), 2)),
                np.array([stop <= read for _, stop in blocks]),
            )
            del sums
            state = yield from measuring(1.0 / 3.0, 2.0 / 3.0, plain, None)
            assert state is not None  # only a refinement gives way to a stop
            state, refinement = yield from _refine_mean(
                state, plain, blocks, measuring, stopping, (2.0 / 3.0, 1.0)
            )
            del plain
        else:
            state = yield from measuring(0.0, 1.0, None, None)
            assert state is not None
        measured, known, halves = state.measured, state.known, state.halves
        aligned, aligned_frames, done = state.aligned, state.aligned_frames, state.done
        all_frames = n
        stopped = done < len(blocks)
        if stopped:  # the trace of the frames the measured blocks cover
            blocks, measured, halves = blocks[:done], measured[:done], halves[:done]
            known = known[:done]
            n = blocks[-1][1]
        _check_measured(known, blocks, params.reference, name)
        centres = np.array([(a + b - 1) / 2 for a, b in blocks], np.float64)
        good = np.nonzero(known)[0]
        uncertainty = np.full((len(blocks), 2), np.nan)
        uncertainty[good] = _block_uncertainty(
            centres[good], measured[good], halves[good], [blocks[i] for i in good]
        )
        trace = _interpolate(centres[good], measured[good], n, params.smoothing, uncertainty[good])
        # Beyond the measured blocks' frames the drift is unknown: held at the last value.
        start, end = blocks[good[0]][0], blocks[good[-1]][1]
        trace[:start] = trace[start]
        trace[end:] = trace[end - 1]
        frames = np.arange(n, dtype=np.float64)
        for k in np.nonzero(~known)[0]:
            measured[k] = [np.interp(centres[k], frames, trace[:, a]) for a in range(2)]
        origin = trace[0].copy()
        shifts = trace - origin
        shifts[0] = 0.0  # exactly, whatever the rounding of the subtraction
        block_shifts = measured - origin
        _check_within_frame(shifts, (height, width), params.reference, name)
        if limit is not None:
            worst = np.abs(shifts).max(axis=1)
            if worst.max() > limit:
                t = int(np.argmax(worst))
                raise ParameterError(
                    f"DriftParams.max_drift is {limit:g} px but frame {t} has drifted by "
                    f"(dy {shifts[t, 0]:+.2f}, dx {shifts[t, 1]:+.2f}) px from frame 0; "
                    "raise max_drift (or None)"
                )
        aligned *= all_frames / aligned_frames  # the blocks' weights were count / all frames
        # The aligned mean is in the reference's coordinates; frame 0's are ``origin`` away.
        moved = shift_frames(aligned, -origin[None])
        aligned_mean = moved[0].cpu().numpy().astype(np.float32)
        path = "torch FFT + matrix-DFT refinement on " + str(dev)
    return DriftResult(
        shifts=shifts,
        block_shifts=block_shifts,
        uncertainty=uncertainty,
        block_frames=blocks,
        params=params,
        aligned_mean=aligned_mean,
        frame_shape=(height, width),
        stopped_early=stopped,
        kernel_paths={"drift": path},
        measured=known.copy(),
        time_averaging_chosen=length,
        mean_refinement=refinement,
    )


_MIN_MEASURED = 2
"""Blocks with structure a trace needs: the drift between two measured blocks is the least
there is to interpolate; with one, any trace would be invented."""


def _block_list(indices: np.ndarray, blocks: list[tuple[int, int]], most: int = 4) -> str:
    """``"block 1 (frames 0-19), block 4 (frames 60-79)"`` (the first ``most``)."""
    parts = [f"block {k + 1} (frames {blocks[k][0]}-{blocks[k][1] - 1})" for k in indices[:most]]
    if len(indices) > most:
        parts.append(f"and {len(indices) - most} more")
    return ", ".join(parts)


def _check_measured(
    known: np.ndarray, blocks: list[tuple[int, int]], reference: str, name: str
) -> None:
    """Refuse a stack with fewer than :data:`_MIN_MEASURED` blocks whose correlation with
    their reference has a peak above the noise (:func:`_peak_significance`): frames without
    sample (background, a constant or pure noise) give a shift that is noise, tens of
    pixels, and blocks without a measured neighbour have nothing to interpolate from."""
    if known.sum() >= _MIN_MEASURED:
        return
    blank = np.nonzero(~known)[0]
    against = {
        "first": "the first block",
        "previous": "the block before them",
        "mean": "the mean of the other frames",
    }[reference]
    hint = (
        " (with reference='first', the first block is every block's reference: if it shows "
        "no sample, use reference='mean')"
        if reference == "first"
        else ""
    )
    raise InvalidInputError(
        f"{name}: {len(blank)} of {len(blocks)} blocks have no structure in common with "
        f"{against}: {_block_list(blank, blocks)}: their correlation peaks are below the "
        f"height that noise alone reaches, so no drift can be measured there (frames "
        f"without sample: background, a constant, noise). A trace needs at least "
        f"{_MIN_MEASURED} measured blocks to interpolate the others from{hint}. Crop the "
        "stack to frames that show the sample, or raise time_averaging"
    )


def _check_within_frame(
    shifts: np.ndarray, frame_shape: tuple[int, int], reference: str, name: str
) -> None:
    """Refuse a trace that moves a frame by its whole size or more: such frames share no
    content with frame 0 and cannot be corrected (:func:`check_shifts` refuses the trace).
    Each block's shift is measured within half a frame, but ``reference="previous"`` adds
    the steps up (issue 26 item 13: a shift beyond the frame is never returned)."""
    too_far = np.abs(shifts) >= np.asarray(frame_shape, np.float64)
    if not too_far.any():
        return
    t = int(np.nonzero(too_far.any(axis=1))[0][0])
    how = (
        "the previous-block steps add up to more than the frame"
        if reference == "previous"
        else "the trace goes beyond the frame"
    )
    raise InvalidInputError(
        f"{name}: frame {t} has drifted by (dy {shifts[t, 0]:+.2f}, dx {shifts[t, 1]:+.2f}) "
        f"px from frame 0, as far as the whole {frame_shape[0]} x {frame_shape[1]} px frame "
        f"or more ({how}): such frames share no content with frame 0, so the trace cannot "
        "be right and cannot be corrected. Split the stack where the field of view changes"
    )


def _check_limit(
    shift: np.ndarray,
    on_edge: bool,
    limit: float | None,
    k: int,
    first: int,
    stop: int,
    against: str,
) -> None:
    if limit is None:
        return
    if on_edge or np.abs(shift).max() > limit:
        raise ParameterError(
            f"DriftParams.max_drift is {limit:g} px but block {k + 1} (frames {first}-"
            f"{stop - 1}) correlates best with {against} at the edge of that search range or "
            f"beyond it (dy {shift[0]:+.2f}, dx {shift[1]:+.2f} px): the drift is larger; "
            "raise max_drift (or None)"
        )


estimate_drift = blocking(iter_estimate_drift)
estimate_drift.__doc__ = """Estimate the drift of a time series; blocking version of
:func:`iter_estimate_drift` (same parameters).

Returns
-------
DriftResult
    ``.shifts`` float64 ``(T, 2)``: ``(dy, dx)`` of every frame relative to frame 0.

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.esrrf import estimate_drift
>>> y, x = np.mgrid[:32, :32]
>>> blob = 1000 * np.exp(-((y - 15) ** 2 + (x - 16) ** 2) / 8)
>>> stack = np.random.default_rng(0).poisson(100 + np.stack([blob] * 8)).astype(np.uint16)
>>> estimate_drift(stack, time_averaging=4, device="cpu").shifts.shape
(8, 2)
"""


# ------------------------------------------------------------------ automatic block length
_Measurement = tuple[np.ndarray, np.ndarray, np.ndarray, int, list[tuple[int, int]]]
"""A candidate length's measured blocks: centres, values, uncertainty, frames, frame ranges."""

_AUTO_DRAWS = 24
"""Noise draws of the Monte Carlo error propagation in :func:`choose_block_length`."""


class _PilotTrack:
    """One candidate block length of the pilot: its blocks summed as frames stream by, each
    finished block correlated with the first block whose halves share structure."""

    def __init__(self, length: int, n: int, shape: tuple[int, int], dev: torch.device) -> None:
        self.length = length
        self.blocks = drift_blocks(n, length)
        self.shape, self.dev = shape, dev
        self.k = 0
        self.sums = self._new_sums()
        self.pending: list[tuple[int, _BlockSums]] = []
        count = len(self.blocks)
        self.values = np.zeros((count, 2))
        self.halves = np.full((count, 2), np.nan)
        self.known = np.zeros(count, bool)
        self.done = 0  # blocks correlated
        self.reference: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def _new_sums(self) -> _BlockSums:
        first, stop = self.blocks[min(self.k, len(self.blocks) - 1)]
        return _BlockSums(self.shape, self.dev, middle=first + (stop - first) // 2)

    def updates(self, cumulative: torch.Tensor, start: int, end: int) -> list[tuple]:
        """What frames ``start:end`` add (``cumulative``: their cumulative sum), as
        ``(block, total, first_half)`` pieces; nothing is committed yet."""
        out = []
        pos, k = start, self.k
        while pos < end and k < len(self.blocks):
            first, stop = self.blocks[k]
            middle = first + (stop - first) // 2
            upto = min(stop, end)

            def between(a: int, b: int) -> torch.Tensor | None:
                if b <= a:
                    return None
                total = cumulative[b - 1 - start]
                return total - cumulative[a - 1 - start] if a > start else total

            out.append((k, between(pos, upto), between(pos, min(upto, middle)), upto - pos))
            pos, k = upto, k + 1 if upto == stop else k
        return out

    def commit(self, pieces: list[tuple]) -> None:
        for k, total, early, frames in pieces:
            self.sums.total += total
            if early is not None:
                self.sums.first_half += early
            self.sums.frames += frames
            first, stop = self.blocks[k]
            if self.sums.frames == stop - first:  # finished: correlated by flush()
                self.pending.append((k, self.sums))
                self.k = k + 1
                self.sums = self._new_sums()

    def flush(self, correlator: _Correlator, limit: float | None) -> None:
        """Correlate the finished blocks (each removed once measured: a retried chunk after an
        out-of-memory error measures it again, never twice)."""
        while self.pending:
            k, sums = self.pending[0]
            first, stop = self.blocks[k]
            count = stop - first
            mean = sums.total / count
            structured = False
            if count >= 2:
                early = count // 2
                second = (sums.total - sums.first_half) / (count - early)
                half, _, significance = correlator.measure(
                    sums.first_half / early, correlator.spectrum(second), None
                )
                if significance >= 1.0:
                    self.halves[k], structured = half, True
            spectrum = correlator.spectrum(mean)
            noise = correlator.spectrum(_noise_image(sums, count)) if count >= 2 else None
            if self.reference is None:
                if structured or count < 2:
                    self.reference = (spectrum, noise)
                    self.values[k], self.known[k] = 0.0, True
            else:
                shift, _, significance = correlator.measure(
                    mean, self.reference[0], limit, noise, self.reference[1]
                )
                if significance >= 1.0:
                    self.values[k], self.known[k] = shift, True
            self.pending.pop(0)
            self.done = k + 1

    def measurement(self) -> _Measurement | None:
        """``(centres, values, uncertainty, frames, blocks)`` of the measured blocks among
        those correlated (``frames``: how many frames they hold), or None when this length
        has fewer than two, or a block without a noise estimate."""
        blocks = self.blocks[: self.done]
        known = self.known[: self.done]
        if known.sum() < _MIN_MEASURED:
            return None
        good = np.nonzero(known)[0]
        if not np.isfinite(self.halves[good]).all():
            return None  # a block's halves share no structure: too short to measure noise
        centres = np.array([(a + b - 1) / 2 for a, b in blocks], np.float64)[good]
        values = self.values[good]
        errors = _block_uncertainty(centres, values, self.halves[good], [blocks[i] for i in good])
        chosen = [blocks[i] for i in good]
        return centres, values, errors, sum(b - a for a, b in chosen), chosen


def _mean_uncertainty(
    centres: np.ndarray, values: np.ndarray, halves: np.ndarray, blocks: list[tuple[int, int]]
) -> np.ndarray:
    """``(B, 2)``: each block's standard error from the *mean* of all blocks' squared half
    differences (scaled to frames), not :func:`_block_uncertainty`'s local median: the
    trace's mean squared error counts the blocks whose halves, or whose shift, caught a wrong
    peak, which a median hides (short blocks of sparse blinking)."""
    count = np.array([stop - start for start, stop in blocks], np.float64)
    early = np.floor(count / 2)
    rate = np.gradient(values, centres, axis=0, edge_order=2 if len(centres) > 2 else 1)
    residual = halves + rate * (count / 2)[:, None]
    per_frame = (residual * (np.sqrt(early * (count - early)) / count)[:, None]) ** 2
    per_frame *= count[:, None]
    return np.sqrt(per_frame.mean(axis=0)[None, :] / count[:, None])


def _pilot(
    stack: Any,
    params: DriftParams,
    lengths: list[int],
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
) -> Job[BlockLengthChoice]:
    """Stream the stack once, measuring the drift at every candidate length at the same time
    (one block sum per candidate on the device: memory O(frame x candidates), whatever the
    number of frames), then :func:`choose_block_length`."""
    n, height, width = (int(s) for s in stack.shape)
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        itemsize = int(stack.dtype.itemsize)
        per_frame = height * width * (itemsize + 4 + 8 + 8)  # + the cumulative sum
        fixed = height * width * (len(lengths) * (2 * 8 + 2 * 16) + 6 * 8 + 4 * 16 + 8)
        cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
        chunk = plan_chunk(
            min(n, cap), per_frame, dev, fixed_bytes=fixed, budget=memory_budget,
            what="drift estimation (block length)",
        )  # fmt: skip
        correlator = _Correlator(height, width, dev)
        tracks = [_PilotTrack(length, n, (height, width), dev) for length in lengths]
        read = {"frames": 0, "stopped": False}

        def process(start: int, end: int) -> Job[None]:
            for track in tracks:
                track.flush(correlator, params.max_drift)
            host = reader.read(start, end, prefetch_until=n)
            frames = _frames_on_device(host, dev, name, start).to(torch.float64)
            cumulative = frames.cumsum(0)
            del frames
            pieces = [track.updates(cumulative, start, end) for track in tracks]
            for track, piece in zip(tracks, pieces, strict=True):
                track.commit(piece)  # in place: nothing allocated, nothing to retry
            del cumulative, pieces
            read["frames"] = end
            command = yield Progress(1.0, f"frames {start}-{end - 1} of {n}")
            if is_stop(command):
                read["stopped"] = True
                raise _StopReading

        with contextlib.suppress(_StopReading):
            yield from run_in_chunks(
                n, chunk, process, device=dev, bytes_per_item=per_frame, fixed_bytes=fixed,
                budget=memory_budget, what="drift estimation (block length)",
            )  # fmt: skip
        for track in tracks:
            track.flush(correlator, params.max_drift)
        measured = {t.length: t.measurement() for t in tracks}
    return choose_block_length(measured, read["frames"], params.smoothing, stopped=read["stopped"])


def _trace(
    centres: np.ndarray, values: np.ndarray, n: int, smoothing: float, errors: np.ndarray
) -> np.ndarray:
    """The trace :func:`_estimate` makes of these blocks, relative to frame 0."""
    trace = _interpolate(centres, values, n, smoothing, errors)
    return trace - trace[0]


def _block_means(trace: np.ndarray, blocks: list[tuple[int, int]]) -> np.ndarray:
    """The mean of ``trace`` over each block's frames."""
    return np.array([trace[first:stop].mean(0) for first, stop in blocks])


def choose_block_length(
    measured: dict[int, _Measurement | None],
    n: int,
    smoothing: float = 0.0,
    *,
    stopped: bool = False,
    seed: int = 0,
) -> BlockLengthChoice:
    """The block length of least estimated mean squared error of the trace, from the block
    measurements of each candidate length (``(centres, values, uncertainty, frames
    covered)``, None where unusable).

    Each candidate's trace error is noise plus bias. **Noise**: the blocks' measured
    uncertainty (:func:`_block_uncertainty`, calibrated on simulated stacks) propagated
    through the trace's construction (spline, ends, and frame 0, whose extrapolated value
    offsets every frame), by drawing block errors of that size (Monte Carlo, fixed seed).
    **Bias**: what averaging over blocks of that length and interpolating does to the drift:
    the trace ``d`` of the least noisy of the finer half of the usable lengths stands for the
    drift, and the candidate's construction applied to it (block means of ``d``, spline,
    ends, frame 0) is compared with ``d``; ``d``'s own noise, which the comparison counts as
    bias (a longer block averages it away), is propagated the same way and its expected
    contribution subtracted. (A smoothing spline of ``d``, tried first, flattened the curved
    start of a settling drift, hiding the frame-0 offset long blocks make.) The estimates are
    then fitted by the laws they follow, ``a / L + b L^4``, whose minimum is the choice.
    A candidate is usable when it measured at
    least two blocks, all with a noise estimate (their halves correlate), covering at least
    90 % of the frames the best-covered candidate covers.
    """
    usable = {length: m for length, m in measured.items() if m is not None}
    if usable:
        most = max(m[3] for m in usable.values())
        usable = {length: m for length, m in usable.items() if m[3] >= 0.9 * most}
    if not usable:  # nothing measures: the longest blocks hold the most signal; the
        # estimate then says which blocks have no structure
        longest = max(measured)
        scores = dict.fromkeys(measured, math.nan)
        return BlockLengthChoice(longest, scores, None, stopped=stopped)
    rng = np.random.default_rng(seed)
    noise: dict[int, float] = {}
    for length, (centres, _, errors, _, _) in sorted(usable.items()):
        noise[length] = float(
            np.mean(
                [
                    np.mean(_trace(centres, rng.normal(0.0, errors), n, smoothing, errors) ** 2)
                    for _ in range(_AUTO_DRAWS)
                ]
            )
        )
    # The drift's stand-in: the least noisy of the finer half of the usable lengths (the
    # finest sees the most curvature, but short blocks of sparse blinking can be far
    # noisier than a slightly longer one).
    finer = sorted(usable)[: max(1, (len(usable) + 1) // 2)]
    finest = min(finer, key=lambda length: noise[length])
    f_centres, f_values, f_errors, _, _ = usable[finest]
    reference = _trace(f_centres, f_values, n, 0.0, f_errors)
    draws = [
        _trace(f_centres, rng.normal(0.0, f_errors), n, 0.0, f_errors) for _ in range(_AUTO_DRAWS)
    ]
    scores: dict[int, float] = {}
    parts: dict[int, tuple[float, float]] = {}
    for length in sorted(measured):
        if length not in usable:
            scores[length] = math.nan
            continue
        centres, _, errors, _, blocks = usable[length]

        def construction(
            trace: np.ndarray, centres: np.ndarray = centres,
            blocks: list[tuple[int, int]] = blocks, errors: np.ndarray = errors,
        ) -> np.ndarray:  # fmt: skip
            return _trace(centres, _block_means(trace, blocks), n, smoothing, errors) - trace

        raw = float(np.mean(construction(reference) ** 2))
        # What the reference's noise alone gives (its expected value) is no bias.
        noise_in_reference = float(np.mean([np.mean(construction(d) ** 2) for d in draws]))
        bias = max(raw - noise_in_reference, 0.0)
        scores[length] = math.sqrt(bias + noise[length])  # RMS over frames and axes
        parts[length] = (math.sqrt(noise[length]), math.sqrt(bias))
    # Each candidate's noise and bias are single estimates (noisy themselves); their
    # dependence on the length is known: noise variance ~ 1/L (frames averaged), bias ~ L^2
    # (the drift's curvature over a block). The choice minimises the least-squares fit of
    # these laws through all candidates' estimates, which no single estimate can swing.
    lengths = np.array(sorted(parts), np.float64)
    if len(lengths) >= 3:
        noise2 = np.array([parts[int(length)][0] ** 2 for length in lengths])
        bias2 = np.array([parts[int(length)][1] ** 2 for length in lengths])
        a = float(np.median(noise2 * lengths))
        b = float(np.sum(bias2 * lengths**4) / np.sum(lengths**8))
        model = a / lengths + b * lengths**4
        best = int(lengths[int(np.argmin(model))])
    else:
        best = min(usable, key=lambda length: scores[length])
    return BlockLengthChoice(best, scores, finest, parts=parts, stopped=stopped)
