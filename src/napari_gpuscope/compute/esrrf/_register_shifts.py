"""Shift estimation of channel registration: the FFT cross-correlation of windowed,
mean-subtracted images (all channels or blocks in one batch), its integer peak refined by an
upsampled matrix DFT and a parabola, then the residual after moving back by that estimate; and
the peak's significance against the height noise alone reaches. The conventions are
:mod:`._register`'s.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..fourier import fft2, ifft2
from ._register_sample import _shift_batch
from ._resample import tukey_window

__all__ = ["UPSAMPLING"]

UPSAMPLING = 20
"""Sub-pixel grid of the peak refinement: 1/20 px, then a parabola through its maximum."""


def _spectra(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """complex128 FFTs of the windowed, mean-subtracted ``(B, H, W)`` images, and their
    energies (for the normalised correlation)."""
    height, width = images.shape[-2:]
    dev = images.device
    window = tukey_window(height, dev)[:, None] * tukey_window(width, dev)[None, :]
    x = images.to(torch.float64)
    x = (x - x.mean(dim=(-2, -1), keepdim=True)) * window
    return fft2(x), (x * x).sum(dim=(-2, -1))


def _measure(
    moving: torch.Tensor, reference: torch.Tensor, limit: float | None, *, guard: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(B, 2)`` shifts of ``moving`` relative to ``reference``, ``(B,)`` similarities,
    whether the integer peak lies on the edge of the ``limit`` search window, and the peak's
    significance (:func:`_significance`): a first estimate, then the residual after moving
    back by it (see the module notes)."""
    first, similarity, on_edge, significance = _peaks(moving, reference, limit, guard=guard)
    table = torch.as_tensor(first, dtype=torch.float64, device=moving.device)
    back = _shift_batch(moving.to(torch.float32), table)
    residual, _, _, _ = _peaks(back, reference, 2.0)
    return first + residual, similarity, on_edge, significance


_FALSE_PEAK_PROBABILITY = 1e-3
"""Chance that a channel without structure in common with the reference passes
:func:`_significance` (as the drift estimate's)."""


def _null_spread(f_moving: torch.Tensor, f_reference: torch.Tensor) -> torch.Tensor:
    """``(B,)`` standard deviation of the cross-correlation, at any lag, of two independent
    images with these (windowed) spectra: Bartlett's formula, the variance of
    ``sum_x a(x) b(x + s)`` is ``sum_t c_a(t) c_b(t)`` times the pixels, i.e. (Parseval)
    ``sum_k |A_k|^2 |B_k|^2 / N^2`` of the spectra, times ``sum w^4 / (sum w^2)^2 N`` for
    the edge taper ``w`` (1 without one). It keeps each image's own smoothness and
    structure, which the surface's median absolute deviation mistook for noise (a 32 x 32 px
    filament pair of similarity 0.88 was refused)."""
    height, width = f_moving.shape[-2:]
    dev = f_moving.device
    window = tukey_window(height, dev)[:, None] * tukey_window(width, dev)[None, :]
    w2 = (window.to(torch.float64) ** 2).sum()
    w4 = (window.to(torch.float64) ** 4).sum()
    n = height * width
    power = (f_moving.abs() ** 2 * f_reference.abs() ** 2).sum(dim=(-2, -1)) / n
    return torch.sqrt(power * (w4 / w2**2))


def _significance(
    surface: torch.Tensor, best: torch.Tensor, searched: int, spread: torch.Tensor
) -> np.ndarray:
    """``(B,)`` height of each correlation peak above its surface's median, in units of the
    height pure noise reaches over the ``searched`` lags with probability
    :data:`_FALSE_PEAK_PROBABILITY`: the correlation of unrelated images is, lag by lag,
    roughly Gaussian with the spread of :func:`_null_spread`, and the highest of ``N`` such
    values exceeds ``Q^-1(p / N)`` of them with probability at most ``p`` (Bonferroni).
    ``>= 1``: a real peak."""
    from scipy.special import ndtri

    flat = surface.reshape(surface.shape[0], -1)
    centre = flat.median(dim=1).values
    height = best - centre
    threshold = float(-ndtri(_FALSE_PEAK_PROBABILITY / max(searched, 1)))
    scale = torch.maximum(centre.abs(), best.abs()).clamp(min=1e-300)
    ratio = height / (spread * threshold).clamp(min=1e-300)
    ratio = torch.where(height > 1e-9 * scale, ratio, torch.zeros_like(ratio))
    ratio = torch.where(spread <= 1e-12 * scale, torch.where(height > 0, math.inf, 0.0), ratio)
    return ratio.cpu().numpy()


def _peaks(
    moving: torch.Tensor, reference: torch.Tensor, limit: float | None, *, guard: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shifts, similarities, edge flags and significances (see :func:`_measure`). With
    ``guard``, one pixel beyond ``limit`` is searched too, so a peak there (or on that ring)
    tells that the shift exceeds ``limit`` (``on_edge``)."""
    height, width = moving.shape[-2:]
    f_moving, e_moving = _spectra(moving)
    f_reference, e_reference = _spectra(reference)
    cross = f_moving * f_reference.conj()
    surface = torch.fft.fftshift(ifft2(cross).real, dim=(-2, -1))
    cy, cx = height // 2, width // 2
    whole = surface
    searched = height * width
    radius = None
    if limit is not None:
        radius = math.ceil(limit) + (1 if guard else 0)
        ys = (torch.arange(height, device=surface.device) - cy).abs() <= radius
        xs = (torch.arange(width, device=surface.device) - cx).abs() <= radius
        inside = ys[:, None] & xs[None, :]
        searched = int(inside.sum())
        surface = surface.masked_fill(~inside, -math.inf)
    flat = surface.reshape(surface.shape[0], -1)
    best, index = flat.max(dim=1)
    significance = _significance(whole, best, searched, _null_spread(f_moving, f_reference))
    energy = torch.sqrt(e_moving * e_reference)
    similarity = torch.where(energy > 0, best / energy, torch.zeros_like(best))
    rows = torch.div(index, width, rounding_mode="floor") - cy
    cols = index % width - cx
    coarse = torch.stack([rows, cols], dim=1).to(torch.float64)
    refined = _upsampled_peaks(cross, coarse)
    on_edge = np.zeros(len(refined), bool)
    if guard and radius is not None:
        on_edge = (coarse.abs().max(dim=1).values >= radius).cpu().numpy()
    return refined, similarity.cpu().numpy(), on_edge, significance


def _upsampled_peaks(cross: torch.Tensor, coarse: torch.Tensor) -> np.ndarray:
    """The correlation's maximum near each ``coarse`` peak: a matrix DFT of ``cross`` on a
    1/UPSAMPLING grid of +-1.5 px (batched), then a parabola through its 3 x 3 maximum."""
    height, width = cross.shape[-2:]
    dev = cross.device
    freq_y = torch.fft.fftfreq(height, device=dev, dtype=torch.float64) * height
    freq_x = torch.fft.fftfreq(width, device=dev, dtype=torch.float64) * width
    offsets = (
        torch.arange(-1.5 * UPSAMPLING, 1.5 * UPSAMPLING + 1, device=dev, dtype=torch.float64)
        / UPSAMPLING
    )
    ys = coarse[:, 0, None] + offsets[None, :]  # (B, n)
    xs = coarse[:, 1, None] + offsets[None, :]
    rows = torch.exp(2j * math.pi * ys[:, :, None] * freq_y[None, None, :] / height)
    cols = torch.exp(2j * math.pi * freq_x[None, :, None] * xs[:, None, :] / width)
    surface = (rows @ cross @ cols).real  # (B, n, n)
    n = surface.shape[-1]
    index = surface.reshape(surface.shape[0], -1).argmax(dim=1)
    i = (torch.div(index, n, rounding_mode="floor")).clamp(1, n - 2)
    j = (index % n).clamp(1, n - 2)
    batch = torch.arange(surface.shape[0], device=dev)
    centre = surface[batch, i, j]
    di = _vertex(surface[batch, i - 1, j], centre, surface[batch, i + 1, j])
    dj = _vertex(surface[batch, i, j - 1], centre, surface[batch, i, j + 1])
    peak_y = ys[batch, i] + di / UPSAMPLING
    peak_x = xs[batch, j] + dj / UPSAMPLING
    return torch.stack([peak_y, peak_x], dim=1).cpu().numpy()


def _vertex(before: torch.Tensor, centre: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Offset (samples, within +-0.5) of the parabola through three samples' vertex; 0 where
    the samples do not bend down."""
    curvature = before - 2 * centre + after
    safe = torch.where(curvature < 0, curvature, -torch.ones_like(curvature))
    offset = (0.5 * (before - after) / safe).clamp(-0.5, 0.5)
    return torch.where(curvature < 0, offset, torch.zeros_like(offset))
