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
P^4`` (the same for every slice), so one inverse FFT per slice gives both (:class:`~._grid._Crop`).

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

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch

from .._types import Device
from ..fourier import fft2, ifft2
from ._grid import (
    DEFAULT_STEEPNESS,
    GRID_PLANES,
    GRID_TEMPORARIES,
    OpticsKey,
    _Grid,
    crop_indices,
    key_for,
    oversampling_factor,
    z_positions,
)
from ._wotf import (
    TransferFunctions,
    _inverse_norm,
    _nbytes,
    defocused_pupil,
    illumination_pupil,
    transfer_functions,
    wotf,
)

# The model's parts live in ._grid (frequencies, crop) and ._wotf (pupils, transfer
# functions); they stay importable from here, where the cache that builds them lives.
__all__ = [
    "BUILD_GROUP_ELEMENTS",
    "DEFAULT_STEEPNESS",
    "FFT_WORK_PLANES",
    "GRID_PLANES",
    "GRID_TEMPORARIES",
    "OpticsCache",
    "OpticsKey",
    "TransferFunctions",
    "build_group",
    "clear_shared_caches",
    "crop_indices",
    "defocused_pupil",
    "illumination_pupil",
    "key_for",
    "oversampling_factor",
    "shared_cache",
    "transfer_functions",
    "wotf",
    "z_positions",
]

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
            q_hat = fft2(q)
            made.append(q_hat)
        else:
            q_hat = spectra[index]
        sq_hat = fft2(q.mul_(source))
        del q
        h1 = ifft2(sq_hat.conj_physical_().mul_(q_hat))
        del sq_hat
        h_plus, h_minus = grid.crop(h1)
        del h1
        torch.add(h_plus, h_minus, out=absorption[start:stop]).mul_(inv)
        torch.sub(h_plus, h_minus, out=phase[start:stop]).mul_(inv * 1j)
    return TransferFunctions(absorption, phase), tuple(made) if spectra is None else spectra
