"""The decorrelation curves ``d(r)`` of centred spectra, of the raw image and of its high-passed
copies, summed over NanoPyx's half-plane rings, and NanoPyx's rules for their peaks
(:func:`_peak`) and for the best of them (:func:`_best`, :func:`_highest`). The analysis that
runs them is :mod:`._decorr`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..fourier import fft2
from ._decorr_blur import _gaussian_blur

_BATCH_PIXELS = 1 << 22  # high-pass images transformed together (4 of 1024 x 1024)
_PEAK_MARGIN = np.float32(0.001)  # NanoPyx: a peak must stand this far above what follows


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
        spectra = torch.fft.fftshift(fft2(high), dim=(-2, -1))
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
