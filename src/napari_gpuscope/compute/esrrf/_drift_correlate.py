"""Cross-correlation of two images for drift: windowed spectra, the sub-pixel peak
(integer peak, upsampled DFT, parabola) and whether the peak stands out of the noise
(:func:`_peak_significance`)."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..fourier import fft2, ifft2
from ._drift_correct import shift_frames
from ._resample import tukey_window

UPSAMPLING = 20
"""Sub-pixel grid of the peak refinement: 1/20 px, then a parabola through its maximum."""


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
        return fft2((image - image.mean()) * self.window)

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
        surface = ifft2(cross).real
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


def _parabola_vertex(before: float, centre: float, after: float) -> float:
    """Offset (in samples, within +-0.5) of the vertex of the parabola through three samples."""
    curvature = before - 2 * centre + after
    if curvature >= 0:
        return 0.0
    return float(np.clip(0.5 * (before - after) / curvature, -0.5, 0.5))
