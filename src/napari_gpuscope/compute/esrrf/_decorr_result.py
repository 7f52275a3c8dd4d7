"""The result of a decorrelation analysis (:func:`._decorr.decorrelation_resolution`): the
resolution, the peaks and curves it was read from, and the region analysed; all NaN for an image
without a correlation peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DecorrelationResult"]


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
