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
not wrap, then restricted to the data's frequencies. ``H2(u) = conj(H1(-u))`` and ``N_z = sum S
P^4`` (the same for every slice), so one inverse FFT per slice gives both (:class:`_Crop`).

Caching (:class:`OpticsCache`): the frequency grid, pupil and axial frequency depend on the
optics and the shape; the illumination pupil on the tilt angles; the defocus spectra
``FFT2(Q_z)`` on the z positions; the cropped transfer functions on all of them. The same
optics again (another stack, another regularization, the next position of a batch) build
nothing; a change of z rebuilds the defocus spectra and the correlation, a change of angle only
the pupil and the correlation.

Every reconstruction without a cache of its own uses this process's cache of its device
(:func:`shared_cache`): its entries are keyed by the optics themselves (:class:`OpticsKey`:
shape, pixel size, wavelength, refractive index, apertures, device; the z positions and the
angles), so a dock's runs, its live preview and a batch worker's positions reuse what an
earlier job built with the same optics, and a changed optic builds its own.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import Device

__all__ = [
    "BUILD_GROUP_ELEMENTS",
    "FFT_WORK_PLANES",
    "GRID_PLANES",
    "OpticsCache",
    "OpticsKey",
    "TransferFunctions",
    "build_group",
    "clear_shared_caches",
    "crop_indices",
    "oversampling_factor",
    "shared_cache",
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
    sq_hat = torch.fft.fft2(source * pupil)
    if pupil_hat is None:
        pupil_hat = torch.fft.fft2(pupil)
    h1 = torch.fft.ifft2(torch.conj(sq_hat) * pupil_hat)
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


BUILD_GROUP_ELEMENTS = 1 << 22
"""Oversampled elements the no-grad build handles per step: slices are grouped to about this
many, so its temporaries (three complex arrays of a group and an FFT's work area) stay near
128 MiB per array whatever the number of slices, and small tiles still get batched FFTs."""
FFT_WORK_PLANES = 1
"""Work area of one FFT in arrays of its output's size (cuFFT allocates it through torch's
caching allocator; the memory plan counts it)."""


def build_group(key: OpticsKey) -> int:
    """Slices per step of the transfer-function build of ``key``."""
    oversampled = key.shape[0] * key.shape[1] * key.factor**2
    return max(1, BUILD_GROUP_ELEMENTS // oversampled)


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _default_max_bytes(device: torch.device) -> int:
    """A quarter of the device's memory: the stack, its spectra and the normal equations of a
    reconstruction need the rest."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory // 4
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4


class OpticsCache:
    """Device-resident optics, with the shared, angle, z and transfer-function parts cached.

    The grid (frequencies, detection pupil) depends on the optics and the shape; the
    illumination pupil on the tilt angles; the defocused pupils' spectra on the z positions;
    the cropped transfer functions on all of them. A second reconstruction with the same
    optics, tilt and slices (another stack, another regularization) builds nothing; a new
    tilt rebuilds the illumination pupil and the correlations, a new focus the defocus
    spectra and the correlations. :attr:`builds` counts what was built.

    Parameters
    ----------
    max_entries : int
        Grids and illumination pupils kept (least recently used dropped first).
    max_bytes : int, optional
        Device bytes the transfer functions and defocus spectra may hold together (least
        recently used dropped first; a larger entry is built but not kept): a tile map keeps
        one set per tile. Default: a quarter of the device's memory.

    Examples
    --------
    >>> cache = OpticsCache()
    >>> key = OpticsKey((32, 32), 0.325, 0.45, 1.0, 0.4, 0.55, 1e4, "cpu")
    >>> tf = cache.transfer_functions(key, z_positions(5, 1.0), 0.1, 0.5)
    >>> tuple(tf.phase.shape)
    (5, 32, 32)
    >>> tf = cache.transfer_functions(key, z_positions(5, 1.0), 0.1, 0.5)  # another stack
    >>> cache.builds
    {'grid': 1, 'source': 1, 'defocus': 1, 'transfer': 1}
    """

    def __init__(self, max_entries: int = 8, max_bytes: int | None = None) -> None:
        # Jobs of several threads may share one cache (shared_cache: two docks' runners).
        self._lock = threading.RLock()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._grids: OrderedDict[Hashable, _Grid] = OrderedDict()
        self._sources: OrderedDict[Hashable, torch.Tensor] = OrderedDict()
        self._large: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        self.builds = {"grid": 0, "source": 0, "defocus": 0, "transfer": 0}

    def _get(
        self, store: OrderedDict, key: Hashable, make: Callable[[], object], kind: str
    ) -> Any:
        with self._lock:
            return self._get_locked(store, key, make, kind)

    def _get_locked(
        self, store: OrderedDict, key: Hashable, make: Callable[[], object], kind: str
    ) -> Any:
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
        with self._lock:
            self._grids.clear()
            self._sources.clear()
            self._large.clear()

    @property
    def nbytes(self) -> int:
        """Bytes held by the transfer functions and defocus spectra."""
        with self._lock:
            return sum(size for size, _ in self._large.values())

    def limit(self, device: Device) -> int:
        """The byte limit of the large entries on ``device``."""
        if self.max_bytes is not None:
            return int(self.max_bytes)
        return _default_max_bytes(torch.device(device))

    def _lookup(self, key: Hashable) -> Any:
        with self._lock:
            return self._lookup_locked(key)

    def _lookup_locked(self, key: Hashable) -> Any:
        entry = self._large.get(key)
        if entry is None:
            return None
        self._large.move_to_end(key)
        return entry[1]

    def _keep(self, key: Hashable, value: Any, size: int, device: Device) -> None:
        limit = self.limit(device)
        if size > limit:
            return
        with self._lock:
            self._large[key] = (size, value)
            self._large.move_to_end(key)
            while self.nbytes > limit and len(self._large) > 1:
                del self._large[next(iter(self._large))]  # the least recently used

    def grid(self, key: OpticsKey) -> _Grid:
        """The shared grid of ``key``."""
        return self._get(self._grids, key, lambda: _Grid(key), "grid")

    def source(self, key: OpticsKey, zenith: float, azimuth: float) -> torch.Tensor:
        """The illumination pupil at fixed (frozen) angles, cached."""
        grid = self.grid(key)

        def make() -> torch.Tensor:
            return illumination_pupil(grid, float(zenith), float(azimuth))

        return self._get(self._sources, (key, float(zenith), float(azimuth)), make, "source")

    def has_grid(self, key: OpticsKey) -> bool:
        """Whether the grid of ``key`` is cached."""
        return key in self._grids

    def has_source(self, key: OpticsKey, zenith: float, azimuth: float) -> bool:
        """Whether the illumination pupil of ``key`` at these angles is cached."""
        return (key, float(zenith), float(azimuth)) in self._sources

    def has(self, key: OpticsKey, z: torch.Tensor, zenith: float, azimuth: float) -> bool:
        """Whether the transfer functions of these optics, slices and angles are cached."""
        return ("transfer", key, _z_key(z), float(zenith), float(azimuth)) in self._large

    def has_spectra(self, key: OpticsKey, z: torch.Tensor) -> bool:
        """Whether the defocus spectra of these slices are cached."""
        return ("defocus", key, _z_key(z)) in self._large

    def transfer_functions(
        self, key: OpticsKey, z: torch.Tensor, zenith: float, azimuth: float, *, keep: bool = True
    ) -> TransferFunctions:
        """Transfer functions ``(Z, Y, X)`` at fixed angles and z positions, no autograd.

        Cached per optics, slices and angles; ``keep=False`` builds without keeping anything
        new (a reconstruction whose slices come in chunks: its memory plan has no room for
        them). Slices are built a group at a time (:func:`build_group`).
        """
        with self._lock:  # one build at a time: another thread then finds it built
            return self._transfer_functions(key, z, zenith, azimuth, keep)

    def _transfer_functions(
        self, key: OpticsKey, z: torch.Tensor, zenith: float, azimuth: float, keep: bool
    ) -> TransferFunctions:
        tf_key = ("transfer", key, _z_key(z), float(zenith), float(azimuth))
        cached = self._lookup(tf_key)
        if cached is not None:
            return cached
        with torch.no_grad():
            grid = self.grid(key)
            source = self.source(key, zenith, azimuth)
            spectra_key = ("defocus", key, _z_key(z))
            spectra = self._lookup(spectra_key)
            made = spectra is None
            tf, spectra = _build(grid, key, source, z.to(grid.kz.device), spectra)
        if made:
            self.builds["defocus"] += 1
        self.builds["transfer"] += 1
        if keep:
            if made:
                self._keep(spectra_key, spectra, _nbytes(*spectra), key.device)
            self._keep(tf_key, tf, tf.nbytes, key.device)
        return tf


_SHARED: dict[str, OpticsCache] = {}
_SHARED_LOCK = threading.Lock()


def shared_cache(device: Device) -> OpticsCache:
    """This process's optics cache of ``device`` (made on first use).

    A reconstruction, a tilt-corrected solve or a live preview given no cache of its own uses
    it: the same optics (another stack, another regularization, the next position of a batch,
    the dock's next run) build nothing again. Its entries are keyed by the optics, so one cache
    serves any number of optics (least recently used dropped first, see :class:`OpticsCache`).

    Examples
    --------
    >>> shared_cache("cpu") is shared_cache(torch.device("cpu"))
    True
    """
    name = str(torch.device(device))
    with _SHARED_LOCK:
        cache = _SHARED.get(name)
        if cache is None:
            cache = _SHARED[name] = OpticsCache()
        return cache


def clear_shared_caches() -> None:
    """Free the device memory of every :func:`shared_cache` (e.g. when the dock closes)."""
    with _SHARED_LOCK:
        caches = list(_SHARED.values())
    for cache in caches:
        cache.clear()


def _z_key(z: torch.Tensor) -> tuple:
    return (tuple(float(v) for v in z.detach().reshape(-1).cpu()), tuple(z.shape))


def _build(
    grid: _Grid,
    key: OpticsKey,
    source: torch.Tensor,
    z: torch.Tensor,
    spectra: tuple[torch.Tensor, ...] | None,
) -> tuple[TransferFunctions, tuple[torch.Tensor, ...]]:
    """Transfer functions of the slices ``z (Z,)`` without autograd, a group at a time.

    Per group of ``g`` slices the temporaries are ``Q`` (then ``S Q`` in place), its spectrum
    (then ``conj(FFT(S Q)) FFT(Q)`` in place) and the correlation: three complex arrays of
    ``g`` oversampled planes and an FFT's work area; ``FFT(Q)`` is returned for the cache.
    """
    n_z = int(z.shape[-1])
    group = build_group(key)
    shape = (n_z, *key.shape)
    absorption = torch.empty(shape, dtype=torch.complex64, device=z.device)
    phase = torch.empty_like(absorption)
    inv = _inverse_norm(grid, source)
    made: list[torch.Tensor] = []
    for index, start in enumerate(range(0, n_z, group)):
        stop = min(n_z, start + group)
        q = defocused_pupil(grid, z[start:stop])
        if spectra is None:
            q_hat = torch.fft.fft2(q)
            made.append(q_hat)
        else:
            q_hat = spectra[index]
        sq_hat = torch.fft.fft2(q.mul_(source))
        del q
        h1 = torch.fft.ifft2(sq_hat.conj_physical_().mul_(q_hat))
        del sq_hat
        h_plus, h_minus = grid.crop(h1)
        del h1
        torch.add(h_plus, h_minus, out=absorption[start:stop]).mul_(inv)
        torch.sub(h_plus, h_minus, out=phase[start:stop]).mul_(inv * 1j)
    return TransferFunctions(absorption, phase), tuple(made) if spectra is None else spectra


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
