"""The oversampled frequency grid of the ``isotropic_thin_3d`` model and its crop.

What the optics fix before any tilt or slice (:class:`OpticsKey`): the frequencies of a grid
oversampled by ``F = ceil(pixel / (lambda / (2 (NA_ill + NA_det))))`` so that the pupil
autocorrelations do not wrap, the detection pupil, the axial frequency and the Ewald sphere
(:class:`_Grid`), the slice positions (:func:`z_positions`), and the gather of the data's
frequencies from the oversampled ones (:class:`_Crop`). The model itself is described in
:mod:`._optics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import Device

__all__ = [
    "DEFAULT_STEEPNESS",
    "GRID_PLANES",
    "GRID_TEMPORARIES",
    "ILLUMINATION_SLOPE",
    "OpticsKey",
    "crop_indices",
    "key_for",
    "oversampling_factor",
    "z_positions",
]

ILLUMINATION_SLOPE = 4.0
"""Roll-off of the tilted illumination pupil in frequency pixels (waveorder's ``slope``)."""
DEFAULT_STEEPNESS = 1e4
"""Detection-pupil sigmoid steepness (waveorder's default: a hard edge)."""


def oversampling_factor(pixel: float, wavelength: float, na_ill: float, na_det: float) -> int:
    """Anti-wrap factor ``ceil(pixel / nyquist)``, ``nyquist = lambda / (2 (NA_ill + NA_det))``."""
    return math.ceil(pixel / (wavelength / (2 * (na_ill + na_det))))


def z_positions(
    n_slices: int,
    z_step: float,
    focus_offset: float | torch.Tensor = 0.0,
    *,
    descending: bool = True,
    device: Device | None = None,
) -> torch.Tensor:
    """Slice positions ``(Z//2 - i + offset) * dz`` (waveorder's order: slice 0 = highest z).

    ``focus_offset`` may be a tensor of shape ``(B,)`` (per-tile focus), giving ``(B, Z)``.
    ``descending=False`` is the reversed stack (slice 0 = lowest z).
    """
    index = torch.arange(n_slices, device=device, dtype=torch.float32)
    steps = (n_slices // 2) - index if descending else index - (n_slices - 1 - n_slices // 2)
    offset = torch.as_tensor(focus_offset, dtype=torch.float32, device=device)
    if offset.ndim:
        return (steps[None, :] + offset[:, None]) * z_step
    return (steps + offset) * z_step


@dataclass(frozen=True)
class OpticsKey:
    """What the shared (angle- and z-independent) optics depend on."""

    shape: tuple[int, int]
    pixel: float
    wavelength: float
    index: float
    na_ill: float
    na_det: float
    steepness: float
    device: str
    factor: int = 0
    """Anti-wrap oversampling factor; 0 = from the NAs of the key."""

    def __post_init__(self) -> None:
        if self.factor <= 0:
            factor = oversampling_factor(self.pixel, self.wavelength, self.na_ill, self.na_det)
            object.__setattr__(self, "factor", factor)


GRID_PLANES = 4
"""Oversampled float32 planes a grid keeps: the pupil squared, the axial frequency, and the
Ewald sphere's height and mask (the frequencies are broadcast views)."""
GRID_TEMPORARIES = 4
"""Oversampled float32 temporaries the grid and the illumination pupil need while made."""


class _Grid:
    """Frequencies, detection pupil squared and axial frequency on the oversampled grid."""

    def __init__(self, key: OpticsKey) -> None:
        f = key.factor
        ny, nx = key.shape[0] * f, key.shape[1] * f
        pixel = key.pixel / f
        device = torch.device(key.device)
        fy = torch.fft.fftfreq(ny, pixel, device=device, dtype=torch.float32)
        fx = torch.fft.fftfreq(nx, pixel, device=device, dtype=torch.float32)
        self.fyy, self.fxx = torch.meshgrid(fy, fx, indexing="ij")  # views: no memory
        radial = torch.sqrt(self.fyy**2 + self.fxx**2)
        pupil = torch.sigmoid(key.steepness * (key.na_det / key.wavelength - radial))
        self.pupil_squared = pupil * pupil
        medium = key.wavelength / key.index
        # k_z = sqrt(1 - (lambda_m nu)^2) / lambda_m, the defocus phase per unit z (cycles).
        self.kz = torch.sqrt(torch.clamp(1 - medium**2 * radial**2, min=0.0)) / medium
        # Ewald sphere of radius n / lambda for the illumination pupil.
        sphere = key.index / key.wavelength
        fz_sq = sphere**2 - radial**2
        self.inside = (fz_sq >= 0).to(torch.float32)
        self.fz = torch.sqrt(torch.clamp(fz_sq, min=0.0))
        self.sphere = sphere
        # fx[1] as fftfreq rounds it, computed on the host (reading it back would sync)
        self.pixel_slope = ILLUMINATION_SLOPE / float(np.float32(1.0 / (nx * pixel)))
        self.cos_alpha = math.sqrt(max(0.0, 1 - (key.na_ill / key.index) ** 2))
        self.shape = (ny, nx)
        self.crop = _Crop(self.shape, key.shape, device)


def _central_crop(tf: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The data's frequencies of an oversampled ``tf (..., Yo, Xo)`` (FFT order both).

    Reference implementation of :class:`_Crop` (tests compare the two): frequency index ``k``
    of an ``n``-point grid is index ``k mod N`` of the ``N``-point one.
    """
    rows = crop_indices(tf.shape[-2], shape[0], tf.device)
    cols = crop_indices(tf.shape[-1], shape[1], tf.device)
    return tf.index_select(-2, rows).index_select(-1, cols)


def crop_indices(big: int, small: int, device: Device | None = None) -> torch.Tensor:
    """Indices into an FFT-ordered ``big``-point axis of the ``small``-point axis' frequencies.

    ``fftfreq(small) * small`` (``0, 1, ..., -1``) modulo ``big``. An fftshift-and-slice crop
    is the same for even ``small`` but one frequency off for odd ``small`` and even ``big``.

    Examples
    --------
    >>> crop_indices(8, 4).tolist(), crop_indices(6, 3).tolist()
    ([0, 1, 6, 7], [0, 1, 5])
    """
    k = torch.arange(small, device=device)
    k = torch.where(k < (small + 1) // 2, k, k - small)
    return torch.remainder(k, big)


class _Crop:
    """Gather of the data's frequencies of ``h`` and of ``conj(h(-u))``, with one index pass.

    The two correlations of the model are ``h1 = IFFT2(conj(FFT2(S Q)) FFT2(Q))`` and
    ``h2 = IFFT2(FFT2(S Q) conj(FFT2(Q)))``; since ``IFFT(conj X)(u) = conj(IFFT(X)(-u))``,
    ``h2(u) = conj(h1(-u))``: one inverse FFT gives both. The indices of ``u`` and ``-u`` are
    gathered together (their union: at most one more row and column than the data's), so the
    full oversampled arrays are read once and never shifted or copied.
    """

    def __init__(self, big: tuple[int, int], small: tuple[int, int], device: Device) -> None:
        parts = []
        for n_big, n_small in zip(big, small, strict=True):
            plus = crop_indices(n_big, n_small)
            minus = torch.remainder(-plus, n_big)
            union, inverse = torch.unique(torch.cat((plus, minus)), return_inverse=True)
            parts += [union, inverse[:n_small], inverse[n_small:]]
        # Made on the host and copied once (a device unique() and each copy wait for it).
        flat = torch.cat(parts).to(device)
        views = torch.split(flat, [len(p) for p in parts])
        self.axes = [views[:3], views[3:]]

    def __call__(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h(u), conj(h(-u)))`` at the data's frequencies ``u``."""
        (rows, r_plus, r_minus), (cols, c_plus, c_minus) = self.axes
        union = h.index_select(-2, rows).index_select(-1, cols)
        plus = union.index_select(-2, r_plus).index_select(-1, c_plus)
        minus = union.index_select(-2, r_minus).index_select(-1, c_minus)
        return plus, minus.conj()


def key_for(
    params: Any, shape: Sequence[int], device: Device, steepness: float = DEFAULT_STEEPNESS
):
    """The :class:`OpticsKey` of :class:`PhaseParams` for a ``(Y, X)`` shape on ``device``."""
    return OpticsKey(
        shape=(int(shape[-2]), int(shape[-1])),
        pixel=float(params.yx_pixel_size),
        wavelength=float(params.wavelength),
        index=float(params.index_of_refraction),
        na_ill=float(params.effective_na_illumination),
        na_det=float(params.na_detection),
        steepness=float(steepness),
        device=str(torch.device(device)),
        # From the NA as given (waveorder sizes the grid before clamping the illumination NA).
        factor=oversampling_factor(
            params.yx_pixel_size, params.wavelength, params.na_illumination, params.na_detection
        ),
    )
