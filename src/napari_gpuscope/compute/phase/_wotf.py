"""The pupils and weak-object transfer functions of the ``isotropic_thin_3d`` model.

The tilted illumination pupil ``S`` and the defocused detection pupil ``Q_z`` on a
:class:`~._grid._Grid`, and from them the absorption and phase transfer functions
(:func:`wotf`, differentiable: the tilt optimiser's path and :func:`transfer_functions`).
The model is described in :mod:`._optics`, whose cache builds the same values without
autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..fourier import fft2, ifft2
from ._grid import OpticsKey, _Grid

__all__ = [
    "TransferFunctions",
    "defocused_pupil",
    "illumination_pupil",
    "transfer_functions",
    "wotf",
]


def illumination_pupil(
    grid: _Grid, zenith: torch.Tensor | float, azimuth: torch.Tensor | float
) -> torch.Tensor:
    """The tilted illumination pupil ``(..., Yo, Xo)`` for angle tensors of shape ``(...)``.

    Frequencies on the Ewald cap within the condenser cone around the tilt direction
    ``(sin z cos a, sin z sin a, cos z)``; differentiable in the angles. Plain floats give
    one pupil with no host-to-device copy (the cache's frozen angles).
    """
    if isinstance(zenith, torch.Tensor):
        zenith = zenith[..., None, None]
        azimuth = torch.as_tensor(azimuth)[..., None, None]
        sx = torch.sin(zenith) * torch.cos(azimuth)
        sy = torch.sin(zenith) * torch.sin(azimuth)
        sz = torch.cos(zenith)
    else:
        # float32 like the tensor path's angles, so both give the same pupil
        zen, azi = float(np.float32(zenith)), float(np.float32(azimuth))
        sx = float(np.float32(np.sin(np.float32(zen)) * np.cos(np.float32(azi))))
        sy = float(np.float32(np.sin(np.float32(zen)) * np.sin(np.float32(azi))))
        sz = float(np.cos(np.float32(zen)))
    dot = grid.fxx * sx + grid.fyy * sy + grid.fz * sz
    return torch.sigmoid(grid.pixel_slope * (dot - grid.sphere * grid.cos_alpha)) * grid.inside


def defocused_pupil(grid: _Grid, z: torch.Tensor) -> torch.Tensor:
    """``Q_z = P^2 exp(i 2 pi z k_z)`` for z of shape ``(..., Z)``: ``(..., Z, Yo, Xo)``."""
    phase = (2 * math.pi) * z[..., None, None] * grid.kz
    # polar(P^2, phase) rounds like P^2 * polar(1, phase) without the two temporaries.
    return torch.polar(grid.pupil_squared.expand_as(phase), phase)


def _inverse_norm(grid: _Grid, source: torch.Tensor) -> torch.Tensor:
    """``1 / N``, ``N = sum S |Q_z|^2 = sum S P^4`` (``|exp(i 2 pi z k_z)| = 1``: one value for
    every slice, so it is summed over one plane instead of ``Z``)."""
    weighted = source * grid.pupil_squared
    norm = (weighted * grid.pupil_squared).sum(dim=(-2, -1), keepdim=True)
    return 1.0 / norm


def wotf(
    grid: _Grid, source: torch.Tensor, pupil: torch.Tensor, pupil_hat: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cropped absorption and phase WOTFs from ``S (..., 1, Yo, Xo)`` and ``Q (..., Z, Yo, Xo)``.

    Differentiable (the tilt optimiser's path); :meth:`OpticsCache.transfer_functions` builds
    the same values without autograd, in place and a few slices at a time.
    """
    sq_hat = fft2(source * pupil)
    if pupil_hat is None:
        pupil_hat = fft2(pupil)
    h1 = ifft2(torch.conj(sq_hat) * pupil_hat)
    h_plus, h_minus = grid.crop(h1)
    inv = _inverse_norm(grid, source)
    return (h_plus + h_minus) * inv, (h_plus - h_minus) * (inv * 1j)


@dataclass(frozen=True)
class TransferFunctions:
    """Absorption and phase transfer functions ``(..., Z, Y, X)`` complex64 (FFT order)."""

    absorption: torch.Tensor
    phase: torch.Tensor

    @property
    def nbytes(self) -> int:
        """Device bytes held."""
        return _nbytes(self.absorption, self.phase)


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def transfer_functions(
    key: OpticsKey,
    z: torch.Tensor,
    zenith: torch.Tensor | float,
    azimuth: torch.Tensor | float,
    *,
    grid: _Grid | None = None,
) -> TransferFunctions:
    """Transfer functions, differentiable in the angles and z (no caching of angle parts).

    ``zenith`` and ``azimuth`` may be ``(B,)`` tensors and ``z`` ``(Z,)`` or ``(B, Z)``: the
    result is then ``(B, Z, Y, X)``.
    """
    grid = grid or _Grid(key)
    device = grid.pupil_squared.device
    zenith = torch.as_tensor(zenith, dtype=torch.float32, device=device)
    azimuth = torch.as_tensor(azimuth, dtype=torch.float32, device=device)
    source = illumination_pupil(grid, zenith, azimuth)[..., None, :, :]
    q = defocused_pupil(grid, z.to(device))
    absorption, phase = wotf(grid, source, q)
    return TransferFunctions(absorption, phase)
