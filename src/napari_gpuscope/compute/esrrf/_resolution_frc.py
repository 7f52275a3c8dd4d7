"""The FRC resolution of an eSRRF result: its first time point's even and odd frames
reconstructed separately and correlated (:func:`with_frc`, after the job's decorrelation).

Two reconstructions from disjoint frames share the structure and not the noise, so their
Fourier ring correlation falls where the noise takes over: a resolution of the sample, which
the decorrelation of one eSRRF image is not (it sees the magnified pixel grid, see
:mod:`._resolution`). The halves are reconstructed with the run's parameters and the frames'
own drift (and registration) shifts, on the central part of the frame the decorrelation
analyses too, so the cost is at most that of the run's first time point again.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .._types import ArrayLike, Device
from ..job_parts import scaled, stoppable_part
from ..jobs import Job
from ._input import time_points
from ._params import EsrrfParams
from ._qnr import FRC_THRESHOLD, frc_curve
from ._resolution import DECORRELATION_SIDE, MIN_FRC_FRAMES
from ._stream import iter_stack
from ._stream_result import EsrrfResult

__all__ = ["HalfFrames", "frc_crossing", "frc_with_noise_floor", "with_frc"]

_MIN_SIDE = 16  # frc_curve's smallest image, once eSRRF's border band is cut


class HalfFrames:
    """Every other frame of ``stack[first:stop]`` (``parity`` 0: the even ones), cropped to
    ``rows, cols``, as a lazy ``(T, Y, X)`` array: indexing reads only the frames asked for.

    Examples
    --------
    >>> stack = np.arange(6 * 4 * 4).reshape(6, 4, 4)
    >>> odd = HalfFrames(stack, 0, 6, 1, slice(1, 3), slice(0, 4))
    >>> odd.shape, np.array_equal(odd[0:2], stack[1:4:2, 1:3])
    ((3, 2, 4), True)
    """

    def __init__(
        self, stack: ArrayLike, first: int, stop: int, parity: int, rows: slice, cols: slice
    ) -> None:
        self.stack, self.rows, self.cols = stack, rows, cols
        self.frames = range(first + parity, stop, 2)
        height = len(range(*rows.indices(int(stack.shape[-2]))))
        width = len(range(*cols.indices(int(stack.shape[-1]))))
        self.shape = (len(self.frames), height, width)
        self.dtype = stack.dtype
        self.ndim = 3

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        if not (isinstance(key, slice) and key.step in (None, 1)):
            return np.asarray(self[:])[key]
        picked = self.frames[key]
        if len(picked) == 0:
            return np.zeros((0, *self.shape[1:]), dtype=self.dtype)
        part = self.stack[picked[0] : picked[-1] + 1]  # a contiguous read, then every other
        return part[::2, self.rows, self.cols]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self[:], dtype=dtype)


def _central(size: int, keep: int) -> slice:
    start = max(0, (size - keep) // 2)
    return slice(start, start + min(size, keep))


def with_frc(
    job: Job[EsrrfResult],
    stack: ArrayLike,
    params: EsrrfParams,
    shifts: Any = None,
    *,
    device: Device | None = None,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
) -> Job[EsrrfResult]:
    """``job`` (an eSRRF job of ``stack``), whose result's resolution measurement gains the
    FRC of its first time point's even and odd frames.

    Parameters
    ----------
    job : Job of EsrrfResult
        Made with ``measure_resolution`` (without, the result passes unchanged).
    stack : array-like
        The ``(T, Y, X)`` frames the job reconstructs.
    params : EsrrfParams
        The job's parameters.
    shifts : array-like, optional
        The ``(T, 2)`` shifts the job moved the frames by (drift, plus a channel's
        registration), so that the halves are corrected alike; default: the result's drift
        trace (None: the frames were not moved).
    device, frames_per_chunk, memory_budget
        As the job's.

    Returns
    -------
    generator
        The job's updates (in the part of the bar its frames are of all frames read), then
        the halves' (without outputs); the result with
        ``decorrelation.frc`` set, or ``frc_note`` saying why not (too few frames, a stop,
        frames too small). ``STOP`` during the halves keeps the result without the FRC.
    """
    share = 1.0
    ranges = time_points(int(stack.shape[0]), params)
    if params.measure_resolution and ranges[0][1] - ranges[0][0] >= MIN_FRC_FRAMES:
        run = sum(b - a for a, b in ranges)
        share = run / (run + ranges[0][1] - ranges[0][0])
    result = yield from scaled(job, 0.0, share)
    measured = result.decorrelation
    if measured is None:
        return result
    params = result.params
    m = params.magnification

    def noted(text: str) -> EsrrfResult:
        return dataclasses.replace(
            result, decorrelation=dataclasses.replace(measured, frc_note=text)
        )

    if result.stopped_early or not result.time_points:
        return noted("the run was stopped")  # the user wants what is done, now
    first, stop = result.time_points[0]
    if stop - first < MIN_FRC_FRAMES:
        return noted(f"it needs {MIN_FRC_FRAMES} frames per time point, there are {stop - first}")
    height, width = (int(n) for n in stack.shape[-2:])
    border = int(params.radius * m) + m  # eSRRF's zero band and the interpolation's edge
    keep = math.ceil(DECORRELATION_SIDE / m) + 2 * math.ceil(border / m)
    rows, cols = _central(height, keep), _central(width, keep)
    if shifts is None and result.drift is not None:
        shifts = result.drift.shifts
    table = getattr(shifts, "shifts", shifts)  # a DriftResult's, or the (T, 2) array
    halves = []
    one = params.replace(
        frames_per_timepoint=0, frame_gap=0, measure_resolution=False, drift_correction=False
    )
    for parity, label in ((0, "even"), (1, "odd")):
        frames = HalfFrames(stack, first, stop, parity, rows, cols)
        part = None if table is None else np.asarray(table, np.float64)[first:stop][parity::2]
        half = iter_stack(
            frames,
            one,
            frames_per_chunk=frames_per_chunk,
            memory_budget=memory_budget,
            name=f"the {label} frames",
            drift_shifts=part,
            device=device,
        )
        span = (1.0 - share) / 2
        prefix = f"FRC, {label} frames: "
        start = share + parity * span
        done = yield from stoppable_part(half, start, start + span, prefix, metrics=False)
        if done is None:
            return noted("stopped while reconstructing the halves")
        halves.append(done.image[0])
    inner = (slice(border, -border), slice(border, -border))
    if min(halves[0][inner].shape) < _MIN_SIDE:
        return noted(f"the frames are too small ({height} x {width} px)")
    frc, floor_limited, why = frc_crossing(
        halves[0][inner], halves[1][inner], max_frequency=1.0 / m
    )
    measured = dataclasses.replace(measured, frc=frc, frc_note=why, frc_floor_limited=floor_limited)
    return dataclasses.replace(result, decorrelation=measured)


CONSTANT = "a half is constant"
UNCORRELATED = "the halves do not correlate above the noise"
NO_CROSSING = "no crossing: the halves agree up to the input pixel"
"""Why an FRC is NaN: the three cases are different findings and are said apart (two
unrelated images must never read as agreeing down to the pixel)."""


def frc_crossing(
    image_a: np.ndarray, image_b: np.ndarray, *, max_frequency: float = 0.5
) -> tuple[float, bool, str]:
    """FRC resolution (pixels) at the fixed 1/7 threshold or, where a ring holds too few
    pixels for 1/7 to stand above chance, at the 3-sigma curve, whichever is higher; and
    whether that noise floor decided it.

    Two unrelated images correlate over a ring of ``n`` pixels by about ``1 / sqrt(n / 2)``
    (half of a real image's spectrum is the other half's conjugate), so on a small image the
    fixed threshold is crossed late by noise alone and the FRC claims too fine a resolution
    (24-pixel frames of one simulation: 110 to 240 nm over three noise draws, for a PSF of 306
    nm). Crossing the 3-sigma floor (van Heel and Schatz 2005) instead bounds the resolution
    from above: the correlation is lost in the noise there, so the image resolves at least
    that much and the frame is too small to show finer.

    Returns
    -------
    resolution : float
        Pixels per cycle at the first crossing below ``max_frequency`` (linearly interpolated
        between rings); NaN without a crossing, or when either image is constant.
    floor_limited : bool
        Whether the 3-sigma floor, not 1/7, was crossed (the value is then an upper bound).
    why : str
        Why the resolution is NaN, in words (:data:`CONSTANT`, :data:`UNCORRELATED` or
        :data:`NO_CROSSING`); empty when it is a number.

    Examples
    --------
    >>> from scipy import ndimage
    >>> rng = np.random.default_rng(0)
    >>> sample = ndimage.gaussian_filter(rng.normal(size=(256, 256)), 2.0)
    >>> a = sample + 0.02 * rng.normal(size=sample.shape)
    >>> b = sample + 0.02 * rng.normal(size=sample.shape)
    >>> resolution, floor_limited, why = frc_crossing(a, b)
    >>> 4 < resolution < 9, why
    (True, '')
    >>> frc_crossing(rng.normal(size=(128, 128)), rng.normal(size=(128, 128)))[2]
    'the halves do not correlate above the noise'
    """
    nan = float("nan")
    if np.ptp(image_a) == 0 or np.ptp(image_b) == 0:
        return nan, False, CONSTANT
    frequencies, frc = frc_curve(image_a, image_b)
    size = min(np.shape(image_a)) // 2 * 2
    grid = np.arange(size) - size // 2
    radius = np.rint(np.hypot(grid[:, None], grid[None, :])).astype(np.int64).ravel()
    counts = np.bincount(radius, minlength=frc.size)[: frc.size].astype(np.float64)
    noise = 3.0 / np.sqrt(np.maximum(counts, 1.0) / 2.0)
    floor = np.maximum(FRC_THRESHOLD, noise)
    # The innermost rings hold so few pixels that the floor exceeds 1: the search starts
    # where the correlation first stands above it.
    above = np.flatnonzero(frc[1:] >= floor[1:]) + 1
    if above.size == 0:
        return nan, False, UNCORRELATED
    rings = np.arange(int(above[0]) + 1, frc.size)
    below = rings[(frc[rings] < floor[rings]) & (frequencies[rings] <= max_frequency)]
    if below.size == 0:
        return nan, False, NO_CROSSING
    k = int(below[0])
    f0, f1 = frequencies[k - 1], frequencies[k]
    g0, g1 = frc[k - 1] - floor[k - 1], frc[k] - floor[k]  # above, then below the floor
    crossing = f0 + g0 * (f1 - f0) / (g0 - g1) if g0 != g1 else f1
    if crossing <= 0:
        return nan, False, UNCORRELATED
    return float(1.0 / crossing), bool(noise[k] > FRC_THRESHOLD), ""


def frc_with_noise_floor(
    image_a: np.ndarray, image_b: np.ndarray, *, max_frequency: float = 0.5
) -> tuple[float, bool]:
    """:func:`frc_crossing` without the reason: the resolution and whether the noise floor
    decided it."""
    resolution, floor_limited, _ = frc_crossing(image_a, image_b, max_frequency=max_frequency)
    return resolution, floor_limited
