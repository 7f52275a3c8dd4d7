"""Deterministic sample data: fluorescence-like phantoms with camera noise.

The phantoms are piecewise-smooth scenes with the ingredients microscopists care about:
smooth background ramps, flat and linearly shaded cells, thin filaments and small puncta (the
structures total-variation denoising is known to erode). The noisy samples are simulated as a
camera sees them: Poisson photon counts, a gain in ADU per photon, a camera offset and Gaussian
read noise, stored as uint16 -- so the data look and behave like a real acquisition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CameraModel",
    "expected_camera_signal",
    "fluorescence_phantom_2d",
    "fluorescence_phantom_3d",
    "noisy_cells_2d",
    "noisy_cells_3d",
    "simulate_camera",
]

SEED = 20240611


@dataclass(frozen=True)
class CameraModel:
    """A camera: ``ADU = gain * Poisson(peak * x + background) + offset + N(0, read_noise^2)``.

    Attributes
    ----------
    peak_photons : float
        Expected photons at phantom intensity 1.0.
    background_photons : float
        Expected background photons per pixel.
    gain : float
        ADU per photon.
    offset : float
        Camera offset in ADU.
    read_noise : float
        Read-noise standard deviation in ADU.
    """

    peak_photons: float = 30.0
    background_photons: float = 2.0
    gain: float = 2.0
    offset: float = 100.0
    read_noise: float = 3.0


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


def _photon_rate(phantom: np.ndarray, camera: CameraModel) -> np.ndarray:
    """Expected photons per pixel (float64)."""
    return camera.peak_photons * phantom.astype(np.float64) + camera.background_photons


def expected_camera_signal(phantom: np.ndarray, camera: CameraModel = CameraModel()) -> np.ndarray:
    """Noise-free camera signal (float32 ADU) of a phantom: the truth to compare results with.

    Parameters
    ----------
    phantom : numpy.ndarray
        Noise-free intensities in [0, 1].
    camera : CameraModel
        Photon budget and camera parameters.

    Returns
    -------
    numpy.ndarray
        ``gain * (peak * phantom + background) + offset``, the mean of :func:`simulate_camera`
        before rounding.
    """
    return (camera.gain * _photon_rate(phantom, camera) + camera.offset).astype(np.float32)


def simulate_camera(
    phantom: np.ndarray, camera: CameraModel = CameraModel(), seed: int = SEED
) -> np.ndarray:
    """Simulate a camera frame (uint16 ADU) of a phantom in [0, 1].

    Parameters
    ----------
    phantom : numpy.ndarray
        Noise-free intensities in [0, 1].
    camera : CameraModel
        Photon budget and camera parameters.
    seed : int
        Seed of the noise.

    Returns
    -------
    numpy.ndarray
        uint16 array of the same shape.
    """
    rng = np.random.default_rng(seed + 7)
    photons = rng.poisson(_photon_rate(phantom, camera))
    adu = (
        camera.gain * photons
        + camera.offset
        + camera.read_noise * rng.standard_normal(phantom.shape)
    )
    return np.clip(np.rint(adu), 0, 65535).astype(np.uint16)


def _layer(data: np.ndarray, name: str, scale: tuple[float, ...], camera: CameraModel) -> Any:
    axis_labels = ("z", "y", "x")[-data.ndim :]
    kwargs = {
        "name": name,
        "scale": scale,
        "units": ("um",) * data.ndim,
        "axis_labels": axis_labels,
        "colormap": "gray",
        "metadata": {
            "sample": {
                "camera_gain_adu_per_photon": camera.gain,
                "camera_offset_adu": camera.offset,
                "read_noise_adu": camera.read_noise,
                "peak_photons": camera.peak_photons,
            }
        },
    }
    return (data, kwargs, "image")


def noisy_cells_2d() -> list[Any]:
    """napari sample: a noisy 512 x 512 uint16 fluorescence image, 0.1 um pixels."""
    camera = CameraModel()
    data = simulate_camera(fluorescence_phantom_2d(), camera)
    return [_layer(data, "noisy cells 2D", (0.1, 0.1), camera)]


def noisy_cells_3d() -> list[Any]:
    """napari sample: a noisy 32 x 256 x 256 uint16 volume, 0.4 um z-steps, 0.1 um pixels."""
    camera = CameraModel()
    data = simulate_camera(fluorescence_phantom_3d(), camera)
    return [_layer(data, "noisy cells 3D", (0.4, 0.1, 0.1), camera)]
