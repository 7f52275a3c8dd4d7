"""Synthetic shaded tile sets with a known flatfield and darkfield (NumPy only).

Self-contained on purpose: the BaSiCPy fixture script (``tests/fixtures/flatfield/``) loads this
file by path in BaSiCPy's own environment, so both implementations see the same tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ShadedTiles", "make_darkfield", "make_flatfield", "shaded_tiles"]


def make_flatfield(shape: tuple[int, int], strength: float = 1.0) -> np.ndarray:
    """Off-centre Gaussian vignetting with a slight tilt, mean 1 (range ~0.43-1.32 at 1)."""
    y, x = shape
    yy, xx = np.mgrid[0:y, 0:x].astype(np.float64)
    size = max(y, x)
    cy, cx = 0.45 * y, 0.58 * x
    sigma = 0.55 * size / max(strength, 1e-6)
    vignette = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * sigma**2))
    tilt = 1.0 + 0.08 * (xx / x - 0.5) - 0.04 * (yy / y - 0.5)
    flat = vignette * tilt
    return (flat / flat.mean()).astype(np.float32)


def make_darkfield(shape: tuple[int, int], offset: float = 100.0) -> np.ndarray:
    """Camera offset plus a smooth bump (up to +30) and a weak gradient (up to +10)."""
    y, x = shape
    yy, xx = np.mgrid[0:y, 0:x].astype(np.float64)
    bump = 30.0 * np.exp(
        -((yy - 0.7 * y) ** 2 + (xx - 0.3 * x) ** 2) / (2 * (0.25 * max(y, x)) ** 2)
    )
    return (offset + bump + 10.0 * yy / y).astype(np.float32)


def _smooth_noise(rng: np.random.Generator, shape: tuple[int, int], sigma: float) -> np.ndarray:
    """Gaussian-filtered white noise (periodic, via FFT), unit standard deviation."""
    noise = rng.standard_normal(shape)
    fy = np.fft.fftfreq(shape[0])[:, None]
    fx = np.fft.rfftfreq(shape[1])[None, :]
    kernel = np.exp(-2 * (np.pi * sigma) ** 2 * (fy**2 + fx**2))
    smooth = np.fft.irfft2(np.fft.rfft2(noise) * kernel, s=shape)
    return smooth / (smooth.std() + 1e-12)


@dataclass(frozen=True)
class ShadedTiles:
    """Tiles and their ground truth."""

    images: np.ndarray
    """uint16 ``(T, Y, X)``: Poisson(content x flatfield) + darkfield + read noise."""
    flatfield: np.ndarray
    darkfield: np.ndarray
    content: np.ndarray
    """float32 expected photon counts before shading."""


def shaded_tiles(
    n: int = 50,
    shape: tuple[int, int] = (128, 128),
    *,
    seed: int = 0,
    dark_offset: float | None = None,
    cells: float = 60.0,
    vignetting: float = 1.0,
    read_noise: float = 2.0,
) -> ShadedTiles:
    """A mosaic-like tile set: textured background of varying level plus Gaussian "cells".

    ``dark_offset`` None: no darkfield (and no read noise); else the darkfield of
    :func:`make_darkfield` with that offset. ``cells`` is the mean number of cells per
    256 x 256 pixels. Deterministic for a seed (NumPy only).
    """
    rng = np.random.default_rng(seed)
    flat = make_flatfield(shape, vignetting)
    y, x = shape
    yy, xx = np.mgrid[0:y, 0:x].astype(np.float32)
    content = np.empty((n, y, x), dtype=np.float32)
    area = y * x / 256.0**2
    for i in range(n):
        level = rng.uniform(150.0, 350.0)
        texture = _smooth_noise(rng, shape, rng.uniform(3.0, 12.0))
        tile = level * np.exp(0.25 * texture)
        count = rng.poisson(cells * area)
        cy, cx = rng.uniform(0, y, count), rng.uniform(0, x, count)
        radius = rng.uniform(2.5, 9.0, count)
        amplitude = rng.lognormal(np.log(600.0), 0.6, count)
        for y0, x0, r, a in zip(cy, cx, radius, amplitude, strict=True):
            y_lo, y_hi = int(max(0, y0 - 4 * r)), int(min(y, y0 + 4 * r + 1))
            x_lo, x_hi = int(max(0, x0 - 4 * r)), int(min(x, x0 + 4 * r + 1))
            if y_lo >= y_hi or x_lo >= x_hi:
                continue
            sub_y, sub_x = yy[y_lo:y_hi, x_lo:x_hi], xx[y_lo:y_hi, x_lo:x_hi]
            tile[y_lo:y_hi, x_lo:x_hi] += a * np.exp(
                -((sub_y - y0) ** 2 + (sub_x - x0) ** 2) / (2 * r**2)
            )
        content[i] = tile
    signal = rng.poisson(content * flat[None]).astype(np.float64)
    dark = np.zeros(shape, dtype=np.float32)
    if dark_offset is not None:
        dark = make_darkfield(shape, dark_offset)
        signal = signal + dark[None] + rng.normal(0.0, read_noise, signal.shape)
    images = np.clip(np.round(signal), 0, 65535).astype(np.uint16)
    return ShadedTiles(images=images, flatfield=flat, darkfield=dark, content=content)
