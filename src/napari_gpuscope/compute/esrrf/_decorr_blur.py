"""``scipy.ndimage.gaussian_filter`` (truncate 4, ``reflect``) of a 2D float32 image on the
device, rounding as SciPy does: the Gaussian of the decorrelation analysis's high-passes
(:mod:`._decorr`), whose curves for the smallest sigmas are made of that rounding.
"""

from __future__ import annotations

import numpy as np
import torch


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
