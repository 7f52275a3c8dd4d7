"""Image decorrelation analysis (Descloux et al., Nat. Methods 2019): resolution from one image.

The resolution of a single image is read from how its phase-normalised spectrum correlates with
the image's own spectrum when both are cut off at a radius ``r``: the correlation ``d(r)`` rises
while the cut-off keeps mostly signal and falls once it lets in mostly noise, so its peak
position ``k_c`` (in units of the Nyquist frequency) is the highest frequency carrying signal.
Repeating it on Gaussian high-passed copies of the image sharpens the peak; the highest peak
position over those, ``k_c,max``, gives the resolution ``2 / k_c,max`` pixels.

This follows NanoPyx 2.1.5's ``calculate_decorr_analysis`` (``DecorrAnalysis``, itself a port
of the ImDecorr Fiji plugin) step by step, including what it does differently from the paper,
so that the two agree:

- edge apodisation: a raised-cosine taper over the 20 pixels at each edge, towards the mean of
  the pixels outside the circle of radius ``W / 2 - 20``;
- padding to the next power-of-two square, filled with the apodised image's first pixel, the
  image placed in the top rows (NanoPyx's copy loop never adds the vertical offset);
- sums over half of the centred spectrum (the other half is its conjugate), so ``d`` carries a
  ``sqrt(2)``; the raw image's DC term is zeroed, the high-passed ones' are not;
- ``n_filters`` high-passes ``I - G_sigma * I`` (SciPy's Gaussian, ``reflect`` edges), sigma
  log-spaced over ``[0.14, 2 / k_c0]`` (``k_c0``: the raw curve's peak), then a second,
  refined pass over the sigmas and the ring range around the best peaks of the first;
- peak finding with NanoPyx's rule for a curve whose maximum is its last point (drop it unless
  the remaining maximum stands at least 0.001 above what follows).

The spectra are computed on the device (one batched FFT per pass); only the curves, a few
hundred numbers, come back to the host for the peak search.

Modules: the result is :mod:`._decorr_result`, the region analysed, its apodisation and padding
:mod:`._decorr_region`, SciPy's Gaussian :mod:`._decorr_blur`, the curves and their peaks
:mod:`._decorr_curves`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError, validate_image
from ..devices import device_context
from ..fourier import fft2
from ..params import ParameterError
from ._decorr_curves import _best, _curves, _high_pass_curves, _highest, _peak, _rings
from ._decorr_region import (
    ANALYSED_SIDE,
    APODISATION_PIXELS,
    MAX_ASPECT,
    _apodise,
    _pad,
    _padded_side,
    analysed_region,
)
from ._decorr_result import DecorrelationResult, _empty_result

__all__ = [
    "ANALYSED_SIDE",
    "APODISATION_PIXELS",
    "MAX_ASPECT",
    "DecorrelationResult",
    "analysed_region",
    "decorrelation_resolution",
]

_SIGMA_MIN = 0.14  # NanoPyx's smallest high-pass sigma, in pixels


def decorrelation_resolution(
    image: ArrayLike,
    *,
    pixel_size: float | None = None,
    rmin: float = 0.0,
    rmax: float = 1.0,
    n_radii: int = 50,
    n_filters: int = 10,
    device: str | torch.device | None = None,
) -> DecorrelationResult:
    """Resolution of one image by decorrelation analysis, as in NanoPyx.

    Parameters
    ----------
    image : array-like
        2D image ``(Y, X)``, at least 16 pixels per side (e.g. an eSRRF reconstruction or a
        widefield frame); not modified.
    pixel_size : float, optional
        Pixel size; when given, :attr:`DecorrelationResult.resolution_physical` is in its unit.
    rmin, rmax : float
        Range of normalised frequencies (1 = Nyquist) searched, ``0 <= rmin < rmax <= 1``.
    n_radii : int
        Samples of each decorrelation curve, 10 to 100.
    n_filters : int
        High-passed images per pass, 5 to 40.
    device : str or torch.device, optional
        Where the spectra are computed (default: the first GPU; ``"cpu"`` only when named).

    Returns
    -------
    DecorrelationResult
        ``resolution`` in pixels of ``image``; NaN for a constant image (no structure to
        resolve) or when no curve has a peak. Images larger than :data:`ANALYSED_SIDE`, or
        longer than :data:`MAX_ASPECT` times their width, are analysed on their central
        region (:func:`analysed_region`; the result's ``analysed_shape``), so memory and time
        are bounded by the pixels analysed.

    Raises
    ------
    InvalidInputError
        For an image that is not 2D, is empty, smaller than 16 pixels per side, or holds NaN or
        infinity.
    ParameterError
        For parameters outside the ranges above.

    Examples
    --------
    Smoothed noise of correlation length ~2 pixels, plus a little white noise:

    >>> from scipy import ndimage
    >>> rng = np.random.default_rng(0)
    >>> image = ndimage.gaussian_filter(rng.normal(size=(128, 128)), 2.0)
    >>> image += 0.01 * rng.normal(size=image.shape)
    >>> result = decorrelation_resolution(image, pixel_size=0.1, device="cpu")
    >>> 4 < result.resolution < 12, result.resolution_physical == result.resolution * 0.1
    (True, True)
    """
    _check_parameters(pixel_size, rmin, rmax, n_radii, n_filters)
    validate_image(image, name="image", layouts=("YX",))
    if not hasattr(image, "shape"):  # a nested list
        image = np.asarray(image)
    shape = tuple(int(n) for n in image.shape)
    if min(shape) < 16:
        raise InvalidInputError(
            f"image is {shape}; decorrelation analysis needs at least 16 x 16 pixels"
        )
    region = analysed_region(shape)  # read only the pixels analysed (a lazy array too)
    host = _unit_scaled(np.asarray(image[region], dtype=np.float64)).astype(np.float32)
    pixel = None if pixel_size is None else float(pixel_size)
    if float(np.ptp(host)) == 0.0:
        # A constant image has no spectrum beyond DC: every curve is 0/0. NanoPyx returns
        # whatever its uninitialised peak buffer holds; the honest answer is "no resolution".
        result = _empty_result(pixel, rmin, rmax, n_radii, n_filters, _padded_side(host.shape))
    else:
        with torch.no_grad(), device_context(device) as dev:
            result = _analyse(
                host, pixel, float(rmin), float(rmax), int(n_radii), int(n_filters), dev
            )
    return dataclasses.replace(result, analysed_shape=host.shape, image_shape=shape)


def _check_parameters(
    pixel_size: float | None, rmin: float, rmax: float, n_radii: int, n_filters: int
) -> None:
    if pixel_size is not None and not (
        isinstance(pixel_size, (int, float)) and math.isfinite(pixel_size) and pixel_size > 0
    ):
        raise ParameterError(f"pixel_size must be a positive number or None, got {pixel_size!r}")
    for name, value in (("rmin", rmin), ("rmax", rmax)):
        if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
            raise ParameterError(f"{name} must lie within [0, 1] (1 = Nyquist), got {value!r}")
    if not rmin < rmax:
        raise ParameterError(f"rmin must be below rmax, got rmin={rmin!r}, rmax={rmax!r}")
    for name, value, low, high in (("n_radii", n_radii, 10, 100), ("n_filters", n_filters, 5, 40)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ParameterError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        if not low <= value <= high:
            raise ParameterError(f"{name} must lie within [{low}, {high}], got {value}")


def _unit_scaled(image: np.ndarray) -> np.ndarray:
    """``image`` times the power of two that brings its largest magnitude into [0.5, 1).

    The analysis is scale-free and a power of two rescales every float operation exactly, so
    the result is unchanged, while values near float32's limits (whose squares overflow in the
    spectra) become safe.
    """
    largest = float(np.abs(image).max())
    if largest == 0.0:
        return image
    return np.ldexp(image, -math.frexp(largest)[1])


def _sigmas(g_min: float, g_max: float, n_filters: int) -> np.ndarray:
    steps = np.arange(n_filters, dtype=np.float64) / (n_filters - 1)
    return np.exp(math.log(g_min) + (math.log(g_max) - math.log(g_min)) * steps)


def _analyse(
    host: np.ndarray,
    pixel: float | None,
    rmin: float,
    rmax: float,
    n_radii: int,
    n_filters: int,
    dev: torch.device,
) -> DecorrelationResult:
    side = _padded_side(host.shape)
    image = _pad(_apodise(torch.as_tensor(host, device=dev)), side)
    centre = side // 2
    grid = np.arange(side) - side / 2
    disc = torch.as_tensor(
        ((grid[:, None] ** 2 + grid[None, :] ** 2) < side * side / 4).ravel(), device=dev
    )
    full_rings = _rings(side, rmin, rmax, n_radii, dev)

    raw = torch.fft.fftshift(fft2(image))
    raw[centre, centre] = 0  # the raw curve leaves the mean out (the high-passes keep theirs)
    d0 = _curves(raw[None], full_rings, disc, n_radii)[0]
    kc0, a0 = _peak(d0, 0.0, 1.0)

    g_min = _SIGMA_MIN
    g_max = side / 2 if kc0 == 0 else 2 / np.float32(kc0)
    crmin, crmax = rmin, rmax
    rings = full_rings
    passes: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    final: tuple[tuple[float, float, int] | None, tuple[float, float, int] | None] = (None, None)
    for refine in range(2):
        sigmas = _sigmas(float(np.float32(g_min)), float(np.float32(g_max)), n_filters)
        curves = _high_pass_curves(image, sigmas, rings, disc, n_radii)
        found = [_peak(curve, crmin, crmax) for curve in curves]
        kc = np.array([p[0] for p in found], np.float32)
        a = np.array([p[1] for p in found], np.float32)
        passes.append((np.linspace(crmin, crmax, n_radii), curves, sigmas, kc, a))
        if refine == 1:
            final = (_best(kc, a), _highest(kc, a))
            break
        # The raw curve's peak competes with the high-passes' for the refined ranges.
        # (NanoPyx maps the raw peak onto [rmin, rmax] here, onto [0, 1] for kc0 above.)
        kc_raw, a_raw = _peak(d0, rmin, rmax)
        kc_all = np.append(kc, np.float32(kc_raw))
        a_all = np.append(a, np.float32(a_raw))
        gm, top = _best(kc_all, a_all), _highest(kc_all, a_all)
        if gm is None or top is None:
            break
        crmin = max(float(np.float32(min(gm[0], top[0]) - 0.05)), rmin)
        crmax = min(float(np.float32(max(gm[0], top[0]) + 0.3)), rmax)
        first, last = min(gm[2], top[2]) - 1, max(gm[2], top[2])
        if last < n_filters:
            lg_min, lg_max = math.log(np.float32(g_min)), math.log(np.float32(g_max))
            g_min, g_max = (
                math.exp(lg_min + (lg_max - lg_min) * (first / (n_filters - 1))),
                math.exp(lg_min + (lg_max - lg_min) * (last / (n_filters - 1))),
            )
        else:
            g_max, g_min = g_min, 2 / side
        rings = _rings(side, crmin, crmax, n_radii, dev)

    gm, top = final
    nan = float("nan")
    kc_max, a_max = (top[0], top[1]) if top is not None else (nan, nan)
    kc_gm, a_gm = (gm[0], gm[1]) if gm is not None else (nan, nan)
    resolution = 2.0 / kc_max if top is not None and kc_max > 0 else nan
    while len(passes) < 2:
        passes.append(
            (
                np.full(n_radii, np.nan),
                np.full((n_filters, n_radii), np.nan),
                np.full(n_filters, np.nan),
                np.full(n_filters, np.nan),
                np.full(n_filters, np.nan),
            )
        )
    return DecorrelationResult(
        resolution=float(resolution),
        pixel_size=pixel,
        kc_max=float(kc_max),
        a_max=float(a_max),
        kc_gm=float(kc_gm),
        a_gm=float(a_gm),
        kc0=float(kc0),
        a0=float(a0),
        radii=np.linspace(rmin, rmax, n_radii),
        d0=d0,
        curve_radii=np.stack([p[0] for p in passes]),
        curves=np.stack([p[1] for p in passes]),
        sigmas=np.stack([p[2] for p in passes]),
        peaks=np.stack([p[3] for p in passes]).astype(np.float64),
        amplitudes=np.stack([p[4] for p in passes]).astype(np.float64),
        padded_size=side,
    )
