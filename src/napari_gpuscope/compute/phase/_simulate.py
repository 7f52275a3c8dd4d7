"""The forward model: a through-focus brightfield stack of a thin sample (for tests and samples)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._types import Device
from ..fourier import fft2, ifft2
from ._optics import OpticsCache, key_for, z_positions
from ._params import PhaseParams

__all__ = ["simulate_stack"]


def simulate_stack(
    phase: Any,
    absorption: Any,
    params: PhaseParams,
    n_slices: int,
    *,
    tilt_zenith: float = 0.0,
    tilt_azimuth: float = 0.0,
    device: Device = "cpu",
) -> np.ndarray:
    """Noise-free normalised intensity ``1 + Re IFFT2(A_z a + P_z phi)``, ``(Z, Y, X)`` float32.

    The same transfer functions as the reconstruction (waveorder's ``apply_transfer_function``
    with a background of 1 instead of 10), in the stack order of ``params.z_order``, with the
    tilt in the forward-model convention.

    Examples
    --------
    >>> import numpy as np
    >>> p = PhaseParams(wavelength=0.45, yx_pixel_size=0.325, z_pixel_size=1.0,
    ...                 na_illumination=0.4, na_detection=0.55, index_of_refraction=1.0)
    >>> stack = simulate_stack(np.zeros((16, 16)), np.zeros((16, 16)), p, 5)
    >>> stack.shape, float(stack.mean())
    ((5, 16, 16), 1.0)
    """
    with torch.no_grad():
        phase_t = torch.as_tensor(np.asarray(phase, np.float32), device=device)
        absorption_t = torch.as_tensor(np.asarray(absorption, np.float32), device=device)
        key = key_for(params, phase_t.shape, phase_t.device)
        z = z_positions(
            n_slices,
            params.z_pixel_size,
            params.z_focus_offset,
            descending=params.z_order == "descending",
            device=phase_t.device,
        )
        if params.invert_phase_contrast:
            z = -z
        tf = OpticsCache().transfer_functions(key, z, tilt_zenith, tilt_azimuth)
        spectrum = tf.absorption * fft2(absorption_t) + tf.phase * fft2(phase_t)
        return (1.0 + ifft2(spectrum).real).cpu().numpy().astype(np.float32)
