"""Quality-and-resolution (QnR) metrics of super-resolved images, as NanoJ-eSRRF / SQUIRREL.

- :func:`frc_curve` / :func:`frc_resolution`: Fourier ring correlation of two independent
  reconstructions (e.g. of the even and the odd frames) and the resolution at the fixed 1/7
  threshold;
- :func:`error_map` / :func:`resolution_scaled_pearson`: the super-resolved image, blurred by the
  Gaussian that best maps it onto the widefield reference (sigma fitted, then ``a x + b``), is
  compared with that reference: Pearson correlation (RSP), RMS error (RSE) and the map of
  absolute errors (NanoJ-SQUIRREL);
- :func:`qnr_scores`: FRC resolutions mapped onto ``[0.075, 0.925]`` by NanoJ's logistic curve
  between the best and the worst, combined with RSP by the harmonic mean.

These work on host arrays with NumPy/SciPy (the images are small next to the stacks they come
from; the reconstructions themselves run on the device), but for the error map given a GPU
(:mod:`._qnr_device`: a live session measures it every few frames).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage, optimize, signal

from .._types import Device
from ._lattice import catmull_rom_matrix, magnified_positions
from ._qnr_device import _line_fit, error_map_on_device, on_gpu

__all__ = [
    "FRC_THRESHOLD",
    "ErrorMap",
    "error_map",
    "frc_curve",
    "frc_resolution",
    "qnr_scores",
    "resolution_scaled_pearson",
]

FRC_THRESHOLD = 1.0 / 7.0
"""The fixed FRC threshold (NanoJ, NanoPyx)."""


def _square(image: np.ndarray, size: int) -> np.ndarray:
    rows, cols = image.shape
    r0, c0 = (rows - size) // 2, (cols - size) // 2
    return image[r0 : r0 + size, c0 : c0 + size]


def frc_curve(image_a: np.ndarray, image_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fourier ring correlation of two images of the same field.

    Both are cropped to their largest centred even square (side ``N``), multiplied by a Tukey
    window (alpha 0.25) and Fourier transformed; ring ``r`` (``r <= N / 2``, 1-pixel rings)
    gives ``Re sum F_a F_b* / sqrt(sum |F_a|^2 sum |F_b|^2)``, smoothed with a Savitzky-Golay
    filter (window ~0.07 N, order 3) as NanoPyx does.

    Returns
    -------
    frequencies : numpy.ndarray
        Ring frequencies in cycles per pixel (``r / N``).
    frc : numpy.ndarray
        The correlation per ring.
    """
    a = np.asarray(image_a, np.float64)
    b = np.asarray(image_b, np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"FRC needs two 2D images of one shape, got {a.shape} and {b.shape}")
    size = min(a.shape) // 2 * 2
    if size < 16:
        raise ValueError(f"FRC needs images of at least 16 x 16 pixels, got {a.shape}")
    window = signal.windows.tukey(size, 0.25)
    window = np.outer(window, window)
    fa = np.fft.fftshift(np.fft.fft2((_square(a, size) - _square(a, size).mean()) * window))
    fb = np.fft.fftshift(np.fft.fft2((_square(b, size) - _square(b, size).mean()) * window))
    grid = np.arange(size) - size // 2
    radius = np.rint(np.hypot(grid[:, None], grid[None, :])).astype(np.int64).ravel()
    rings = size // 2 + 1
    inside = radius < rings

    def ring_sum(values: np.ndarray) -> np.ndarray:
        return np.bincount(radius[inside], values.ravel()[inside], minlength=rings)

    cross = ring_sum((fa * np.conj(fb)).real)
    power = np.sqrt(ring_sum(np.abs(fa) ** 2) * ring_sum(np.abs(fb) ** 2))
    frc = np.divide(cross, power, out=np.zeros(rings), where=power > 0)
    window_length = max(5, int(0.0707 * size) // 2 * 2 + 1)
    if window_length < rings:
        frc = signal.savgol_filter(frc, window_length, 3)
    return np.arange(rings) / size, frc


def frc_resolution(
    image_a: np.ndarray,
    image_b: np.ndarray,
    pixel_size: float = 1.0,
    *,
    max_frequency: float = 0.5,
) -> float:
    """FRC resolution of two independent images of one field at the 1/7 threshold.

    Parameters
    ----------
    image_a, image_b : numpy.ndarray
        2D images, e.g. reconstructions of the even and of the odd frames.
    pixel_size : float
        Pixel size; the result is in its units.
    max_frequency : float
        Highest frequency (cycles per pixel) searched for the crossing. Super-resolved images
        share their sampling pattern (period M output pixels) whatever the frames, which keeps
        their FRC high near ``1 / M``: the sweep searches below it.

    Returns
    -------
    float
        ``pixel_size / f`` where ``f`` (cycles per pixel) is the first frequency at which the
        FRC falls below 1/7 (linearly interpolated between rings); NaN when it does not below
        ``max_frequency`` (the images agree up to there, or are too small to tell), and when
        either image is constant (nothing to correlate).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> signal_ = ndimage.gaussian_filter(rng.normal(size=(128, 128)), 2.0)
    >>> a = signal_ + 0.02 * rng.normal(size=signal_.shape)
    >>> b = signal_ + 0.02 * rng.normal(size=signal_.shape)
    >>> 4 < frc_resolution(a, b) < 8
    True
    """
    if np.ptp(np.asarray(image_a)) == 0 or np.ptp(np.asarray(image_b)) == 0:
        # A featureless image correlates with nothing: its FRC is 0 at every ring, which read
        # as a crossing at the first ring (a "resolution" of 32 px for two constant images).
        return float("nan")
    frequencies, frc = frc_curve(image_a, image_b)
    below = np.flatnonzero((frc[1:] < FRC_THRESHOLD) & (frequencies[1:] <= max_frequency)) + 1
    if below.size == 0:
        return float("nan")
    k = int(below[0])
    f0, f1, c0, c1 = frequencies[k - 1], frequencies[k], frc[k - 1], frc[k]
    crossing = f0 + (c0 - FRC_THRESHOLD) * (f1 - f0) / (c0 - c1) if c0 != c1 else f1
    return float(pixel_size / crossing) if crossing > 0 else float("nan")


@dataclass(frozen=True)
class ErrorMap:
    """How well a super-resolved image, blurred and scaled, explains the widefield reference.

    Attributes
    ----------
    rsp : float
        Resolution-scaled Pearson correlation (1 = perfect).
    rse : float
        Resolution-scaled RMS error, in the reference's units.
    sigma : float
        Gaussian blur (in super-resolved pixels) that best maps the image onto the reference.
    alpha, beta : float
        Intensity scale and offset: ``reference ~ alpha * blurred + beta``.
    map : numpy.ndarray
        ``|reference - (alpha * blurred + beta)|`` at the super-resolved size (the border band
        that was left out of the fit is 0).
    """

    rsp: float
    rse: float
    sigma: float
    alpha: float
    beta: float
    map: np.ndarray


def _upsampled(widefield: np.ndarray, shape: tuple[int, int], magnification: int) -> np.ndarray:
    """The widefield image on the super-resolved pixel-centred grid (Catmull-Rom)."""
    rows = catmull_rom_matrix(
        widefield.shape[0], magnified_positions(widefield.shape[0], magnification, True)
    )
    cols = catmull_rom_matrix(
        widefield.shape[1], magnified_positions(widefield.shape[1], magnification, True)
    )
    up = rows @ widefield @ cols.T
    if up.shape != shape:
        raise ValueError(
            f"the widefield image {widefield.shape} x magnification {magnification} is "
            f"{up.shape}, not the super-resolved image's {shape}"
        )
    return up


def error_map(
    sr: np.ndarray,
    widefield: np.ndarray,
    magnification: int,
    *,
    border: int = 3,
    device: Device | None = None,
) -> ErrorMap:
    """NanoJ-SQUIRREL's error map of a super-resolved image against its widefield reference.

    The reference is the widefield image Catmull-Rom-interpolated onto the super-resolved grid
    (pixel centres aligned). For a Gaussian ``g_sigma``, ``alpha, beta`` are the least-squares
    fit of ``reference ~ alpha (sr * g_sigma) + beta``; sigma minimises the RMS error, searched
    in ``[0, 4 M / 2.355]`` (a PSF of up to 4 input pixels FWHM). ``border`` input pixels at each
    edge are left out (eSRRF's zero border band, interpolation edges).

    Parameters
    ----------
    sr : numpy.ndarray
        2D super-resolved image ``(H M, W M)``.
    widefield : numpy.ndarray
        2D reference ``(H, W)`` (e.g. the mean of the frames).
    magnification : int
        M.
    border : int
        Input pixels left out at each edge.
    device : str or torch.device, optional
        A GPU: the blurs and fits run there (:mod:`._qnr_device`; a live session's
        measurements). None or the CPU: NumPy and SciPy on the host.

    Returns
    -------
    ErrorMap
    """
    sr = np.asarray(sr, np.float64)
    reference = _upsampled(np.asarray(widefield, np.float64), sr.shape, magnification)
    cut = border * magnification
    inner = (slice(cut, sr.shape[0] - cut), slice(cut, sr.shape[1] - cut))
    if min(reference[inner].shape) < 4:
        raise ValueError(
            f"the images ({widefield.shape}) are too small for a {border}-pixel border"
        )
    if on_gpu(device):
        rsp, rse, sigma, alpha, beta, errors = error_map_on_device(
            sr, reference, inner, magnification, torch.device(device)
        )
        return ErrorMap(rsp=rsp, rse=rse, sigma=sigma, alpha=alpha, beta=beta, map=errors)
    target = reference[inner]
    centred_target = target - target.mean()

    def fit(sigma: float) -> tuple[float, float, float, np.ndarray]:
        blurred = ndimage.gaussian_filter(sr, sigma, mode="reflect") if sigma > 0 else sr
        alpha, beta, rse = _line_fit(blurred[inner], target, centred_target)
        return rse, alpha, beta, blurred

    best = optimize.minimize_scalar(
        lambda s: fit(s)[0],
        bounds=(0.0, 4.0 * magnification / 2.355),
        method="bounded",
        options={"xatol": 1e-2},
    )
    sigma = float(best.x)
    rse, alpha, beta, blurred = fit(sigma)
    scaled = alpha * blurred + beta
    x, target = blurred[inner].ravel(), target.ravel()
    rsp = float(np.corrcoef(x, target)[0, 1]) if x.std() > 0 and target.std() > 0 else float("nan")
    errors = np.zeros_like(sr)
    errors[inner] = np.abs(reference[inner] - scaled[inner])
    return ErrorMap(
        rsp=rsp, rse=rse, sigma=sigma, alpha=alpha, beta=beta, map=errors.astype(np.float32)
    )


def resolution_scaled_pearson(
    sr: np.ndarray, widefield: np.ndarray, magnification: int, *, border: int = 3
) -> float:
    """RSP: Pearson correlation of the blurred super-resolved image with the widefield reference
    (:func:`error_map`). 1 means the image explains the widefield data perfectly."""
    return error_map(sr, widefield, magnification, border=border).rsp


def qnr_scores(frc: np.ndarray, rsp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NanoJ's QnR: FRC resolutions normalised by a logistic curve, harmonic mean with RSP.

    The logistic maps the best (smallest) finite resolution to 0.925 and the worst to 0.075
    (0.5 everywhere when they are equal); non-finite resolutions stay NaN, and so does their
    QnR, so that a cell without an FRC crossing is never the best.

    Returns
    -------
    normalised_frc, qnr : numpy.ndarray
    """
    frc = np.asarray(frc, np.float64)
    rsp = np.asarray(rsp, np.float64)
    finite = np.isfinite(frc)
    normalised = np.full(frc.shape, np.nan)
    if finite.any():
        low, high = float(frc[finite].min()), float(frc[finite].max())
        if high > low:
            a1 = np.log((1 - 0.075) / 0.075)
            middle = (low + high) / 2
            k = a1 / (middle - high)
            normalised[finite] = 1.0 / (1.0 + np.exp(-k * (frc[finite] - middle)))
        else:
            normalised[finite] = 0.5
    total = rsp + normalised
    with np.errstate(invalid="ignore", divide="ignore"):
        qnr = np.where(total > 0, 2 * rsp * normalised / total, 0.0)
    qnr[~np.isfinite(normalised) | ~np.isfinite(rsp)] = np.nan
    return normalised, qnr
