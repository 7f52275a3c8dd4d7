"""An independent forward model of a brightfield z-stack: Abbe's sum over source points.

Not the plugin's weak-object transfer functions: each point of the (tilted) condenser disk
illuminates the thin sample ``t = exp(-absorption + i phase)`` with a plane wave, the field is
cut by the detection pupil and propagated to each plane (angular spectrum), and the intensities
of the source points add up (incoherent source). It is exact for a thin sample (no weak-object
linearisation), so a reconstruction from it also meets the model error a real stack has.
Source points sit on the FFT grid (every ``source_step``-th frequency), so each tilt is an exact
circular shift of the sample's spectrum.
"""

from __future__ import annotations

import math

import numpy as np


def abbe_stack(
    phase: np.ndarray,
    absorption: np.ndarray,
    *,
    wavelength: float,
    na_illumination: float,
    na_detection: float,
    index_of_refraction: float,
    yx_pixel_size: float,
    z_positions: np.ndarray,
    tilt_zenith: float = 0.0,
    tilt_azimuth: float = 0.0,
    source_step: int = 3,
) -> np.ndarray:
    """Intensities ``(Z, Y, X)`` float64 (background ~1) at the planes ``z_positions``.

    The tilt moves the condenser disk's centre to ``n sin(zenith) / wavelength`` along
    ``(cos azimuth, sin azimuth)`` in ``(fx, fy)`` (illumination direction
    ``(sin z cos a, sin z sin a, cos z)``).
    """
    ny, nx = phase.shape
    fy = np.fft.fftfreq(ny, yx_pixel_size)[:, None]
    fx = np.fft.fftfreq(nx, yx_pixel_size)[None, :]
    k = index_of_refraction / wavelength
    rho2 = fx**2 + fy**2
    pupil = rho2 <= (na_detection / wavelength) ** 2
    kz = np.sqrt(np.maximum(k**2 - rho2, 0.0))
    sample_hat = np.fft.fft2(np.exp(-absorption + 1j * phase))
    centre = (
        k * math.sin(tilt_zenith) * math.cos(tilt_azimuth),
        k * math.sin(tilt_zenith) * math.sin(tilt_azimuth),
    )
    dfx, dfy = 1.0 / (nx * yx_pixel_size), 1.0 / (ny * yx_pixel_size)
    radius = na_illumination / wavelength
    sources = [
        (iy, ix)
        for iy in range(-ny // 2, ny // 2, source_step)
        for ix in range(-nx // 2, nx // 2, source_step)
        if (ix * dfx - centre[0]) ** 2 + (iy * dfy - centre[1]) ** 2 <= radius**2
    ]
    if not sources:
        raise ValueError("no source point on the grid: use a smaller source_step")
    stack = np.zeros((len(z_positions), ny, nx))
    for iy, ix in sources:
        # Plane wave of frequency q: the spectrum of t e^{2 pi i q r} is T shifted by q.
        shifted = np.roll(sample_hat, (iy, ix), axis=(0, 1))
        q_kz = math.sqrt(max(k**2 - (ix * dfx) ** 2 - (iy * dfy) ** 2, 0.0))
        for index, z in enumerate(z_positions):
            propagate = np.exp(2j * np.pi * z * (kz - q_kz))
            field = np.fft.ifft2(shifted * pupil * propagate)
            stack[index] += field.real**2 + field.imag**2
    return stack / len(sources)
