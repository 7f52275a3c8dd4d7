"""Noise-free fluorescence-like phantoms in [0, 1].

Piecewise-smooth scenes with the ingredients microscopists care about: smooth background ramps,
flat and linearly shaded cells, thin filaments and small puncta (the structures denoisers are
known to erode).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SEED", "fluorescence_phantom_2d", "fluorescence_phantom_3d"]

SEED = 20240611


def fluorescence_phantom_2d(shape: tuple[int, int] = (512, 512), seed: int = SEED) -> np.ndarray:
    """Noise-free 2D phantom in [0, 1] (float32): ramp, disk, shaded ellipse, filaments, puncta.

    Parameters
    ----------
    shape : tuple of int
        ``(Y, X)``.
    seed : int
        Seed for the puncta positions.

    Returns
    -------
    numpy.ndarray
    """
    rng = np.random.default_rng(seed)
    ny, nx = shape
    yy, xx = np.mgrid[0:ny, 0:nx].astype(np.float64)
    y, x = yy / ny, xx / nx
    img = 0.08 + 0.12 * x
    img += 0.45 * (((y - 0.30) ** 2 + (x - 0.28) ** 2) < 0.14**2)
    c, s = np.cos(0.5), np.sin(0.5)
    u = (x - 0.66) * c + (y - 0.62) * s
    v = -(x - 0.66) * s + (y - 0.62) * c
    img += ((u / 0.22) ** 2 + (v / 0.10) ** 2 < 1) * (0.25 + 0.45 * (u / 0.22 + 1) / 2)
    img += 0.55 * ((y > 0.72) & (y < 0.92) & (x > 0.08) & (x < 0.33))
    img += 0.40 * np.exp(-(((y - 0.22) ** 2 + (x - 0.78) ** 2) / (2 * 0.06**2)))
    for k in range(5):
        a, b, w = 0.1 + 0.16 * k, 0.3 * np.sin(1.3 * k), 1.0 + 0.5 * (k % 3)
        d = np.abs(y - (a + b * (x - 0.5) + 0.04 * np.sin(6 * x + k)))
        img += 0.35 * (d * ny < w / 2)
    for _ in range(max(1, int(40 * ny * nx / 512**2))):
        cy, cx = rng.uniform(0, ny), rng.uniform(0, nx)
        r = rng.uniform(2, 4)
        img += 0.5 * (((yy - cy) ** 2 + (xx - cx) ** 2) < r**2)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def fluorescence_phantom_3d(
    shape: tuple[int, int, int] = (32, 256, 256), seed: int = SEED
) -> np.ndarray:
    """Noise-free 3D phantom in [0, 1] (float32, ``(Z, Y, X)``): cells, tubes and puncta.

    Parameters
    ----------
    shape : tuple of int
        ``(Z, Y, X)``.
    seed : int
        Seed for the puncta positions.

    Returns
    -------
    numpy.ndarray
    """
    rng = np.random.default_rng(seed + 1)
    nz, ny, nx = shape
    zz, yy, xx = np.meshgrid(*(np.arange(n, dtype=np.float32) for n in shape), indexing="ij")
    z, y, x = zz / nz, yy / ny, xx / nx
    vol = 0.08 + 0.10 * x + 0.05 * z
    vol += 0.45 * (((z - 0.5) / 0.35) ** 2 + ((y - 0.3) / 0.14) ** 2 + ((x - 0.3) / 0.14) ** 2 < 1)
    ell = ((z - 0.45) / 0.3) ** 2 + ((y - 0.65) / 0.2) ** 2 + ((x - 0.68) / 0.12) ** 2 < 1
    vol += ell * (0.25 + 0.4 * y)
    vol += 0.5 * ((z > 0.2) & (z < 0.8) & (y > 0.75) & (y < 0.92) & (x > 0.1) & (x < 0.3))
    vol += 0.4 * np.exp(
        -(((z - 0.5) ** 2) / 0.05 + ((y - 0.2) ** 2 + (x - 0.78) ** 2) / (2 * 0.06**2))
    )
    for k in range(4):
        cy = 0.12 + 0.22 * k + 0.03 * np.sin(5 * x + k)
        cz = 0.3 + 0.4 * (k % 2) + 0.1 * np.cos(4 * x)
        d2 = ((y - cy) * ny / (1.0 + 0.5 * (k % 2))) ** 2 + ((z - cz) * nz) ** 2
        vol += 0.35 * (d2 < 1.0)
    for _ in range(max(1, int(60 * nz * ny * nx / (64 * 256 * 256)))):
        c = rng.uniform([0, 0, 0], [nz, ny, nx])
        r = rng.uniform(1.5, 3.0)
        vol += 0.5 * (((zz - c[0]) ** 2 + (yy - c[1]) ** 2 + (xx - c[2]) ** 2) < r**2)
    return np.clip(vol, 0.0, 1.0).astype(np.float32)
