"""Transfer functions of the ``isotropic_thin_3d`` model, built on the device, with caches.

The model (waveorder 3.0.5, Soto et al. 2017): a thin sample with absorption ``a`` and phase
``phi`` imaged through focus with partially coherent illumination gives, per slice ``z`` and
spatial frequency ``u``, the normalised intensity spectrum ``A_z(u) a(u) + P_z(u) phi(u)``
with

- ``H1 = IFFT2(conj(FFT2(S Q_z)) FFT2(Q_z))``, ``H2 = IFFT2(FFT2(S Q_z) conj(FFT2(Q_z)))``,
- ``A_z = (H1 + H2) / N_z``, ``P_z = i (H1 - H2) / N_z``, ``N_z = sum S |Q_z|^2``,

where ``S`` is the (tilted) illumination pupil on the Ewald sphere and ``Q_z = P^2 exp(i 2 pi z
k_z)`` the defocused detection pupil. The transfer functions are computed on a grid oversampled
by ``F = ceil(pixel / (lambda / (2 (NA_ill + NA_det))))`` so that the pupil autocorrelations do
not wrap, then cropped to the data's frequencies.

Caching: the frequency grid, pupil and axial frequency depend on the optics and the shape; the
illumination pupil on the tilt angles; the defocus factor on the z positions. A change of z
rebuilds only the defocus factor and the correlation, a change of angle only the pupil and the
correlation (:class:`OpticsCache`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "OpticsCache",
    "OpticsKey",
    "TransferFunctions",
    "oversampling_factor",
    "transfer_functions",
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
    device: Any = None,
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


class _Grid:
    """Frequencies, detection pupil squared and axial frequency on the oversampled grid."""

    def __init__(self, key: OpticsKey) -> None:
        f = key.factor
        ny, nx = key.shape[0] * f, key.shape[1] * f
        pixel = key.pixel / f
        device = torch.device(key.device)
        fy = torch.fft.fftfreq(ny, pixel, device=device, dtype=torch.float32)
        fx = torch.fft.fftfreq(nx, pixel, device=device, dtype=torch.float32)
        self.fyy, self.fxx = torch.meshgrid(fy, fx, indexing="ij")
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
        self.pixel_slope = ILLUMINATION_SLOPE / float(abs(fx[1] - fx[0]))
        self.cos_alpha = math.sqrt(max(0.0, 1 - (key.na_ill / key.index) ** 2))
        self.shape = (ny, nx)


def illumination_pupil(grid: _Grid, zenith: torch.Tensor, azimuth: torch.Tensor) -> torch.Tensor:
    """The tilted illumination pupil ``(..., Yo, Xo)`` for angle tensors of shape ``(...)``.

    Frequencies on the Ewald cap within the condenser cone around the tilt direction
    ``(sin z cos a, sin z sin a, cos z)``; differentiable in the angles.
    """
    zenith = zenith[..., None, None]
    azimuth = azimuth[..., None, None]
    sx = torch.sin(zenith) * torch.cos(azimuth)
    sy = torch.sin(zenith) * torch.sin(azimuth)
    sz = torch.cos(zenith)
    dot = grid.fxx * sx + grid.fyy * sy + grid.fz * sz
    return torch.sigmoid(grid.pixel_slope * (dot - grid.sphere * grid.cos_alpha)) * grid.inside


def defocused_pupil(grid: _Grid, z: torch.Tensor) -> torch.Tensor:
    """``Q_z = P^2 exp(i 2 pi z k_z)`` for z of shape ``(..., Z)``: ``(..., Z, Yo, Xo)``."""
    phase = (2 * math.pi) * z[..., None, None] * grid.kz
    return grid.pupil_squared * torch.polar(torch.ones_like(phase), phase)


def _central_crop(tf: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    ny, nx = tf.shape[-2:]
    y0, x0 = (ny - shape[0]) // 2, (nx - shape[1]) // 2
    shifted = torch.fft.fftshift(tf, dim=(-2, -1))[..., y0 : y0 + shape[0], x0 : x0 + shape[1]]
    return torch.fft.ifftshift(shifted, dim=(-2, -1))


def wotf(
    source: torch.Tensor, pupil: torch.Tensor, pupil_hat: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorption and phase WOTFs from ``S (..., 1, Yo, Xo)`` and ``Q (..., Z, Yo, Xo)``."""
    sq_hat = torch.fft.fft2(source * pupil)
    if pupil_hat is None:
        pupil_hat = torch.fft.fft2(pupil)
    h1 = torch.fft.ifft2(torch.conj(sq_hat) * pupil_hat)
    h2 = torch.fft.ifft2(sq_hat * torch.conj(pupil_hat))
    norm = (source * (pupil.real**2 + pupil.imag**2)).sum(dim=(-2, -1), keepdim=True)
    inv = 1.0 / norm
    return (h1 + h2) * inv, (h1 - h2) * (inv * 1j)


@dataclass(frozen=True)
class TransferFunctions:
    """Absorption and phase transfer functions ``(..., Z, Y, X)`` complex64 (FFT order)."""

    absorption: torch.Tensor
    phase: torch.Tensor


class OpticsCache:
    """Device-resident optics with the angle and z parts cached separately.

    Parameters
    ----------
    max_entries : int
        Entries kept per cache (least recently used dropped first).

    Examples
    --------
    >>> cache = OpticsCache()
    >>> key = OpticsKey((32, 32), 0.325, 0.45, 1.0, 0.4, 0.55, 1e4, "cpu")
    >>> tf = cache.transfer_functions(key, z_positions(5, 1.0), 0.1, 0.5)
    >>> tuple(tf.phase.shape)
    (5, 32, 32)
    """

    def __init__(self, max_entries: int = 8) -> None:
        self.max_entries = max_entries
        self._grids: OrderedDict[Any, _Grid] = OrderedDict()
        self._sources: OrderedDict[Any, torch.Tensor] = OrderedDict()
        self._pupils: OrderedDict[Any, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self.builds = {"grid": 0, "source": 0, "defocus": 0}

    def _get(self, store: OrderedDict, key: Any, make: Any, kind: str) -> Any:
        if key in store:
            store.move_to_end(key)
            return store[key]
        value = make()
        self.builds[kind] += 1
        store[key] = value
        while len(store) > self.max_entries:
            store.popitem(last=False)
        return value

    def clear(self) -> None:
        """Free every cached tensor."""
        self._grids.clear()
        self._sources.clear()
        self._pupils.clear()

    def grid(self, key: OpticsKey) -> _Grid:
        """The shared grid of ``key``."""
        return self._get(self._grids, key, lambda: _Grid(key), "grid")

    def source(self, key: OpticsKey, zenith: float, azimuth: float) -> torch.Tensor:
        """The illumination pupil at fixed (frozen) angles, cached."""
        grid = self.grid(key)
        device = grid.fxx.device

        def make() -> torch.Tensor:
            z = torch.tensor(float(zenith), device=device)
            a = torch.tensor(float(azimuth), device=device)
            return illumination_pupil(grid, z, a)

        return self._get(self._sources, (key, float(zenith), float(azimuth)), make, "source")

    def pupil(self, key: OpticsKey, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``Q_z`` and ``FFT2(Q_z)`` for fixed z positions, cached."""
        grid = self.grid(key)
        zkey = (key, tuple(float(v) for v in z.detach().reshape(-1).cpu()), tuple(z.shape))

        def make() -> tuple[torch.Tensor, torch.Tensor]:
            q = defocused_pupil(grid, z.to(grid.kz.device))
            return q, torch.fft.fft2(q)

        return self._get(self._pupils, zkey, make, "defocus")

    def transfer_functions(
        self, key: OpticsKey, z: torch.Tensor, zenith: float, azimuth: float
    ) -> TransferFunctions:
        """Transfer functions at fixed angles and z positions (both parts cached)."""
        source = self.source(key, zenith, azimuth)
        q, q_hat = self.pupil(key, z)
        absorption, phase = wotf(source[..., None, :, :], q, q_hat)
        return TransferFunctions(
            _central_crop(absorption, key.shape), _central_crop(phase, key.shape)
        )


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
    device = grid.fxx.device
    zenith = torch.as_tensor(zenith, dtype=torch.float32, device=device)
    azimuth = torch.as_tensor(azimuth, dtype=torch.float32, device=device)
    source = illumination_pupil(grid, zenith, azimuth)[..., None, :, :]
    q = defocused_pupil(grid, z.to(device))
    absorption, phase = wotf(source, q)
    return TransferFunctions(_central_crop(absorption, key.shape), _central_crop(phase, key.shape))


def key_for(params: Any, shape: Sequence[int], device: Any, steepness: float = DEFAULT_STEEPNESS):
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
