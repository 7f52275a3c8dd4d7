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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError, validate_image
from ..devices import device_context
from ..params import ParameterError

__all__ = [
    "ANALYSED_SIDE",
    "APODISATION_PIXELS",
    "MAX_ASPECT",
    "DecorrelationResult",
    "analysed_region",
    "decorrelation_resolution",
]

APODISATION_PIXELS = 20
"""Width of NanoPyx's raised-cosine edge taper, in pixels."""

_BATCH_PIXELS = 1 << 22  # high-pass images transformed together (4 of 1024 x 1024)
_SIGMA_MIN = 0.14  # NanoPyx's smallest high-pass sigma, in pixels
_PEAK_MARGIN = np.float32(0.001)  # NanoPyx: a peak must stand this far above what follows


@dataclass(frozen=True)
class DecorrelationResult:
    """The decorrelation analysis of one image.

    Attributes
    ----------
    resolution : float
        ``2 / kc_max`` in pixels of the analysed image (NaN when no curve has a peak, or the
        image is constant).
    pixel_size : float or None
        The pixel size given, if any (the unit of :attr:`resolution_physical`).
    kc_max, a_max : float
        Highest peak position over the refined high-passed curves (normalised frequency, 1 =
        Nyquist) and that curve's peak amplitude.
    kc_gm, a_gm : float
        Peak of the refined curve with the highest ``kc x A`` (the paper's geometric-mean pick).
    kc0, a0 : float
        Peak of the raw image's curve ``d0``.
    radii : numpy.ndarray
        ``(n_radii,)`` normalised frequencies at which :attr:`d0` is sampled.
    d0 : numpy.ndarray
        ``(n_radii,)`` decorrelation curve of the raw (apodised) image.
    curve_radii : numpy.ndarray
        ``(2, n_radii)`` normalised frequencies of the high-passed curves of each pass.
    curves : numpy.ndarray
        ``(2, n_filters, n_radii)`` decorrelation curves of the high-passed images, first
        (coarse) and second (refined) pass.
    sigmas : numpy.ndarray
        ``(2, n_filters)`` high-pass Gaussian sigmas, in pixels.
    peaks, amplitudes : numpy.ndarray
        ``(2, n_filters)`` peak position and amplitude of each high-passed curve.
    padded_size : int
        Side of the power-of-two square the image was padded to.
    analysed_shape : tuple of int or None
        ``(rows, cols)`` of the central region analysed (:func:`analysed_region`); None when
        not recorded.
    image_shape : tuple of int or None
        ``(rows, cols)`` of the image given.
    """

    resolution: float
    pixel_size: float | None
    kc_max: float
    a_max: float
    kc_gm: float
    a_gm: float
    kc0: float
    a0: float
    radii: np.ndarray
    d0: np.ndarray
    curve_radii: np.ndarray
    curves: np.ndarray
    sigmas: np.ndarray
    peaks: np.ndarray
    amplitudes: np.ndarray
    padded_size: int
    analysed_shape: tuple[int, int] | None = None
    image_shape: tuple[int, int] | None = None

    @property
    def cropped(self) -> bool:
        """Whether only a central region of the image was analysed."""
        return (
            self.analysed_shape is not None
            and self.image_shape is not None
            and tuple(self.analysed_shape) != tuple(self.image_shape)
        )

    @property
    def resolution_physical(self) -> float | None:
        """:attr:`resolution` times :attr:`pixel_size` (None without a pixel size)."""
        return None if self.pixel_size is None else self.resolution * self.pixel_size

    def summary(self) -> dict[str, Any]:
        """JSON-able facts (NaN written as None)."""

        def number(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else float(value)

        return {
            "resolution_px": number(self.resolution),
            "pixel_size": self.pixel_size,
            "resolution": number(self.resolution_physical),
            "kc_max": number(self.kc_max),
            "a_max": number(self.a_max),
            "kc_gm": number(self.kc_gm),
            "a_gm": number(self.a_gm),
            "kc0": number(self.kc0),
            "a0": number(self.a0),
            "padded_size": int(self.padded_size),
            **(
                {"analysed_shape": [int(n) for n in self.analysed_shape]}
                if self.analysed_shape is not None
                else {}
            ),
        }

    def describe(self) -> str:
        """One line in plain words."""
        if not math.isfinite(self.resolution):
            return "decorrelation resolution: none (no correlation peak: a featureless image?)"
        text = f"decorrelation resolution {self.resolution:.3g} px"
        if self.pixel_size is not None:
            text += f" ({self.resolution_physical:.3g} at pixel size {self.pixel_size:g})"
        text += f", kc {self.kc_max:.3f} of Nyquist"
        if self.cropped:
            rows, cols = self.analysed_shape
            text += f" (central {rows} x {cols} px analysed)"
        return text


ANALYSED_SIDE = 1024
"""The longest side analysed: larger images are analysed on their central region (the
resolution is a property of the optics and the sample, not of the field's extent), so memory
and time are bounded whatever the image's size."""
MAX_ASPECT = 2
"""The long side analysed is at most this many times the short one: the analysis pads to a
power-of-two square of the long side, so a 16 x 5,000 strip would be a 8,192^2 square of
padding (456 s and 6.1 GB) whose spectrum says nothing of the strip's resolution."""


def analysed_region(shape: tuple[int, int]) -> tuple[slice, slice]:
    """The central region :func:`decorrelation_resolution` analyses of an image of ``shape``:
    each side at most :data:`ANALYSED_SIDE`, the long side at most :data:`MAX_ASPECT` times
    the short one.

    Examples
    --------
    >>> analysed_region((16, 5000))
    (slice(0, 16, None), slice(2484, 2516, None))
    >>> analysed_region((300, 400))
    (slice(0, 300, None), slice(0, 400, None))
    """
    rows, cols = (int(n) for n in shape)
    short = min(rows, cols)
    keep = [min(n, ANALYSED_SIDE, MAX_ASPECT * short) for n in (rows, cols)]
    return tuple(
        slice((n - k) // 2, (n - k) // 2 + k) for n, k in zip((rows, cols), keep, strict=True)
    )  # type: ignore[return-value]


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
    validate_image(image, name="image", min_ndim=2, max_ndim=2)
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


def _padded_side(shape: tuple[int, ...]) -> int:
    # NanoPyx's expression, kept so that sizes round as they do there.
    return int(2 ** math.ceil(math.log(max(shape)) / math.log(2.0)))


def _empty_result(pixel, rmin, rmax, n_radii, n_filters, padded) -> DecorrelationResult:
    nan = float("nan")
    return DecorrelationResult(
        resolution=nan,
        pixel_size=pixel,
        kc_max=nan,
        a_max=nan,
        kc_gm=nan,
        a_gm=nan,
        kc0=nan,
        a0=nan,
        radii=np.linspace(rmin, rmax, n_radii),
        d0=np.full(n_radii, np.nan),
        curve_radii=np.full((2, n_radii), np.nan),
        curves=np.full((2, n_filters, n_radii), np.nan),
        sigmas=np.full((2, n_filters), np.nan),
        peaks=np.full((2, n_filters), np.nan),
        amplitudes=np.full((2, n_filters), np.nan),
        padded_size=padded,
    )


def _apodise(image: torch.Tensor) -> torch.Tensor:
    """NanoPyx's ``_apodize_edges``: taper the edges towards the mean of the outer pixels."""
    height, width = image.shape
    offset = APODISATION_PIXELS
    dev = image.device
    y = torch.arange(height, device=dev, dtype=torch.float64)[:, None]
    x = torch.arange(width, device=dev, dtype=torch.float64)[None, :]
    # NanoPyx uses the width for the circle's radius on both axes (and squares it, so a
    # negative radius for narrow images still selects an outer ring).
    radius = width / 2 - offset
    outside = ((y - height / 2) ** 2 + (x - width / 2) ** 2) > radius**2
    edge_mean = image.to(torch.float64)[outside].mean()
    from_x = ((x - width / 2).abs() - width / 2).abs()
    from_y = ((y - height / 2).abs() - height / 2).abs()
    band = (from_x <= offset) | (from_y <= offset)
    distance = torch.minimum(from_x.expand(height, width), from_y.expand(height, width))
    taper = (torch.cos(distance * math.pi / offset - math.pi) + 1) / 2
    tapered = taper * (image.to(torch.float64) - edge_mean) + edge_mean
    return torch.where(band, tapered, image.to(torch.float64)).to(torch.float32)


def _pad(image: torch.Tensor, side: int) -> torch.Tensor:
    """NanoPyx's ``_get_preprocessed_image``: a ``side`` square filled with the first pixel,
    the image centred horizontally and placed in the top rows."""
    height, width = image.shape
    out = torch.full((side, side), float(image[0, 0]), dtype=torch.float32, device=image.device)
    left = (side - width) // 2
    out[:height, left : left + width] = image
    return out


def _fold(index: np.ndarray, n: int) -> np.ndarray:
    """SciPy's ``reflect`` boundary (``d c b a | a b c d | d c b a``) for any overhang."""
    period = 2 * n
    m = np.mod(index, period)
    return np.where(m >= n, period - 1 - m, m)


_DIRECT_RADIUS = 16
"""Kernels up to this radius are summed tap by tap (SciPy's own order); longer ones, by FFT."""


def _gaussian_weights(sigma: float) -> tuple[np.ndarray, int]:
    """SciPy's ``_gaussian_kernel1d`` (truncate 4): the same float64 weights, to the bit."""
    radius = int(4.0 * sigma + 0.5)
    taps = np.arange(-radius, radius + 1)
    weights = np.exp(-0.5 / (sigma * sigma) * taps**2)
    return weights / weights.sum(), radius


def _blur_rows(rows: torch.Tensor, weights: np.ndarray, radius: int) -> torch.Tensor:
    """Each row of the float64 ``rows`` ``(M, n)`` filtered with ``weights`` (``reflect``).

    Short kernels sum ``w0 x[i] + sum_j wj (x[i-j] + x[i+j])``, j from ``radius`` down, as
    SciPy's ``correlate1d`` does for a symmetric kernel: the float64 sums round as SciPy's do,
    which matters where the high-pass is mostly the float32 rounding of the blur. Longer
    kernels use the reflected row's period ``2n``: the row extended by its mirror image is
    periodic, so the filter is a circular convolution with the kernel folded onto ``2n``
    points, one real FFT each way. The memory is then that of two copies of the rows whatever
    the kernel's length (``conv1d``'s unfolded input grew as ``M n (2 radius + 1)``: 34 GB for
    a 1024 x 1024 image and sigma 512).
    """
    n = rows.shape[-1]
    if radius <= _DIRECT_RADIUS:
        index = torch.as_tensor(_fold(np.arange(-radius, n + radius), n), device=rows.device)
        padded = rows[:, index]
        out = padded[:, radius : radius + n] * float(weights[radius])
        for j in range(radius, 0, -1):
            out += (
                padded[:, radius - j : radius - j + n] + padded[:, radius + j : radius + j + n]
            ) * float(weights[radius + j])
        return out
    period = 2 * n
    folded = np.zeros(period)
    np.add.at(folded, np.arange(-radius, radius + 1) % period, weights)
    # The folded kernel is even (w[m] == w[-m mod 2n]), so its spectrum is real.
    response = torch.as_tensor(np.fft.rfft(folded).real, device=rows.device)
    extended = torch.cat([rows, rows.flip(-1)], dim=-1)
    spectrum = torch.fft.rfft(extended, dim=-1)
    spectrum *= response
    return torch.fft.irfft(spectrum, n=period, dim=-1)[:, :n]


def _gaussian_blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """``scipy.ndimage.gaussian_filter(image, sigma)`` (truncate 4, ``reflect``) of a 2D
    float32 image, one axis after the other.

    In float64 rounded to float32 between and after the passes, as SciPy does: for the
    smallest sigmas the high-pass ``image - blurred`` is mostly that rounding, and NanoPyx's
    curves for them are made of it."""
    weights, radius = _gaussian_weights(sigma)
    wide = image.to(torch.float64)
    blurred = _blur_rows(wide.T, weights, radius).T  # along Y (SciPy's first axis) first
    blurred = blurred.to(torch.float32).to(torch.float64)
    return _blur_rows(blurred, weights, radius).to(torch.float32)


@dataclass(frozen=True)
class _Rings:
    """Which spectrum pixels feed which radius bin for one ring range (NanoPyx's half-plane
    loop)."""

    pixels: torch.Tensor  # flat indices into the centred N x N spectrum
    bins: torch.Tensor  # their bin, 0..n_radii-1


def _rings(side: int, crmin: float, crmax: float, n_radii: int, dev: torch.device) -> _Rings:
    # In float32, as NanoPyx's loop computes positions, distances and bins, so that the pixels
    # on a bin boundary fall on the same side.
    f32 = np.float32
    crmin32, crmax32 = f32(crmin), f32(crmax)
    ox = int(f32(side) * (f32(1) - crmax32) / f32(2))
    w = int(f32(side) * crmax32)
    x = np.arange(ox, ox + w)[:, None]
    y = np.arange(ox, ox + w)[None, :]  # square: oy == ox, h == w
    # NanoPyx walks x then y and stops past x = N/2, y = N/2: the half plane x < N/2 plus
    # the upper half of the column x = N/2.
    keep = (x * side + y) <= side * side / 2 + side / 2
    squared = ((x - side / 2) ** 2 + (y - side / 2) ** 2).astype(f32)
    distance = np.sqrt(f32(4) * squared / f32(side * side)).astype(f32)
    keep &= distance <= crmax32
    mapped = (distance - crmin32) / (crmax32 - crmin32) * f32(n_radii - 1)
    mapped = np.maximum(mapped, f32(0))
    bins = np.floor(mapped.astype(np.float64) + 0.5).astype(np.int64)  # C round(), >= 0
    keep &= bins < n_radii
    xx, yy = np.broadcast_to(x, keep.shape)[keep], np.broadcast_to(y, keep.shape)[keep]
    flat = yy * side + xx  # spectrum[y, x]
    return _Rings(
        pixels=torch.as_tensor(flat, device=dev), bins=torch.as_tensor(bins[keep], device=dev)
    )


def _curves(spectra: torch.Tensor, rings: _Rings, disc: torch.Tensor, n_radii: int) -> np.ndarray:
    """``d(r)`` of each centred spectrum in ``spectra`` ``(G, N, N)``: ``(G, n_radii)``."""
    count = spectra.shape[0]
    flat = spectra.reshape(count, -1)
    magnitude = flat.abs()
    norm = torch.sqrt((magnitude[:, disc] ** 2).sum(dim=1, dtype=torch.float64))
    values = magnitude[:, rings.pixels].to(torch.float64)
    # Re(F conj(F / |F|)) = |F| and |F / |F||^2 = 1, wherever F is not 0 (0 elsewhere).
    used = (values > 0).to(torch.float64)
    numerator = torch.zeros(count, n_radii, dtype=torch.float64, device=flat.device)
    denominator = torch.zeros_like(numerator)
    numerator.index_add_(1, rings.bins, values)
    denominator.index_add_(1, rings.bins, used)
    numerator = numerator.cumsum(1).cpu().numpy()
    denominator = denominator.cumsum(1).cpu().numpy()
    norm = norm.cpu().numpy()[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.sqrt(2.0) * numerator / (norm * np.sqrt(denominator))
    d[(norm == 0) | (denominator == 0)] = np.nan
    d[np.isnan(d[:, 0]), 0] = 0.0
    return d.astype(np.float32)


def _high_pass_curves(
    image: torch.Tensor, sigmas: np.ndarray, rings: _Rings, disc: torch.Tensor, n_radii: int
) -> np.ndarray:
    """``d(r)`` of ``image - G_sigma * image`` for each sigma: ``(len(sigmas), n_radii)``.

    The high-passes are transformed a few at a time, at most :data:`_BATCH_PIXELS` pixels
    together: one batched FFT for the usual sizes (512 x 512: all ten filters), while a
    2048 x 2048 image does not hold ten complex spectra and their copies at once.
    """
    per_batch = max(1, _BATCH_PIXELS // image.numel())
    curves = []
    for first in range(0, len(sigmas), per_batch):
        chunk = sigmas[first : first + per_batch]
        high = torch.stack([image - _gaussian_blur(image, float(s)) for s in chunk])
        spectra = torch.fft.fftshift(torch.fft.fft2(high), dim=(-2, -1))
        del high
        curves.append(_curves(spectra, rings, disc, n_radii))
    return np.concatenate(curves)


def _first_max(values: np.ndarray, start: int, stop: int) -> tuple[int, float]:
    best_k, best = start, values[start]
    for k in range(start, stop):
        if values[k] > best:
            best_k, best = k, values[k]
    return best_k, float(best)


def _first_min(values: np.ndarray, start: int, stop: int) -> float:
    best = values[start]
    for k in range(start, stop):
        if values[k] < best:
            best = values[k]
    return float(best)


def _peak(curve: np.ndarray, r1: float, r2: float) -> tuple[float, float]:
    """NanoPyx's ``_get_d_corr_max``: the curve's maximum, not at its last point unless it
    stands above what follows; ``(position mapped onto [r1, r2], amplitude)``."""
    n = curve.shape[0]
    t = curve.astype(np.float32).copy()
    index, amplitude = _first_max(t, 0, n)
    length = n
    while index == length - 1:
        t[length - 1] = 0
        length -= 1
        if length == 0:
            index, amplitude = 0, 0.0
            break
        index, amplitude = _first_max(t, 0, n)
        floor = _first_min(t, index, length - 1)
        if np.float32(t[index] - np.float32(floor)) > _PEAK_MARGIN:
            break
        t[index] = floor
        index = length - 1
    return r1 + (r2 - r1) * index / (n - 1), amplitude


def _best(kc: np.ndarray, a: np.ndarray) -> tuple[float, float, int] | None:
    """NanoPyx's ``_get_best_score``: the first highest ``kc x A`` above 0."""
    pick, best = None, 0.0
    for k in range(kc.shape[0]):
        score = float(np.float32(kc[k]) * np.float32(a[k]))
        if score > best:
            pick, best = (float(kc[k]), float(a[k]), k), score
    return pick


def _highest(kc: np.ndarray, a: np.ndarray) -> tuple[float, float, int] | None:
    """NanoPyx's ``_get_max_score``: the first highest ``kc`` above 0."""
    pick, best = None, 0.0
    for k in range(kc.shape[0]):
        if kc[k] > best:
            pick, best = (float(kc[k]), float(a[k]), k), float(kc[k])
    return pick


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

    raw = torch.fft.fftshift(torch.fft.fft2(image))
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
