"""Camera simulation: what a camera records of a phantom (Poisson photons, gain, offset,
read noise, uint16), so sample data look and behave like a real acquisition."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from napari_gpuscope.compute.camera import CameraModel

from ._phantoms import SEED

__all__ = [
    "DEFAULT_CAMERA",
    "CameraModel",
    "Illumination",
    "expected_camera_signal",
    "simulate_camera",
]

DEFAULT_CAMERA = CameraModel(gain=2.0, offset=100.0, read_noise=3.0)
"""The camera of the sample data: 2 ADU per photon, offset 100 ADU, read noise 3 ADU."""


@dataclass(frozen=True)
class Illumination:
    """Photon budget of a simulated acquisition.

    Attributes
    ----------
    peak_photons : float
        Expected photons at phantom intensity 1.0.
    background_photons : float
        Expected background photons per pixel.
    """

    peak_photons: float = 30.0
    background_photons: float = 2.0


def _photon_rate(phantom: np.ndarray, light: Illumination) -> np.ndarray:
    """Expected photons per pixel (float64)."""
    return light.peak_photons * phantom.astype(np.float64) + light.background_photons


def expected_camera_signal(
    phantom: np.ndarray,
    camera: CameraModel = DEFAULT_CAMERA,
    light: Illumination = Illumination(),
) -> np.ndarray:
    """Noise-free camera signal (float32 ADU) of a phantom: the truth to compare results with.

    Parameters
    ----------
    phantom : numpy.ndarray
        Noise-free intensities in [0, 1].
    camera : CameraModel
        Gain, offset and read noise.
    light : Illumination
        Photon budget.

    Returns
    -------
    numpy.ndarray
        ``gain * (peak * phantom + background) + offset``, the mean of :func:`simulate_camera`
        before rounding.

    Examples
    --------
    >>> import numpy as np
    >>> float(expected_camera_signal(np.ones((1, 1)))[0, 0])
    164.0
    """
    return (camera.gain * _photon_rate(phantom, light) + camera.offset).astype(np.float32)


def simulate_camera(
    phantom: np.ndarray,
    camera: CameraModel = DEFAULT_CAMERA,
    light: Illumination = Illumination(),
    seed: int = SEED,
) -> np.ndarray:
    """Simulate a camera frame (uint16 ADU) of a phantom in [0, 1].

    Parameters
    ----------
    phantom : numpy.ndarray
        Noise-free intensities in [0, 1].
    camera : CameraModel
        Gain, offset and read noise.
    light : Illumination
        Photon budget.
    seed : int
        Seed of the noise.

    Returns
    -------
    numpy.ndarray
        uint16 array of the same shape.

    Examples
    --------
    >>> import numpy as np
    >>> simulate_camera(np.zeros((2, 2))).dtype
    dtype('uint16')
    """
    rng = np.random.default_rng(seed + 7)
    photons = rng.poisson(_photon_rate(phantom, light))
    adu = (
        camera.gain * photons
        + camera.offset
        + camera.read_noise * rng.standard_normal(phantom.shape)
    )
    return np.clip(np.rint(adu), 0, 65535).astype(np.uint16)
