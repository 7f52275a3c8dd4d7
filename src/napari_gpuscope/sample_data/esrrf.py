"""Sample data of the eSRRF dock: blinking emitters on filaments, as a camera records them.

Deterministic (seeded). Emitters sit along a few smooth filaments, two of which run closer
than the diffraction limit; each blinks (two-state Markov chain, about 10 % on), and every frame
is the pixel-integrated Gaussian PSF of the emitters that are on, with Poisson photon noise,
camera gain, offset and read noise (:data:`~._camera.DEFAULT_CAMERA`), as uint16. The true
emitter positions are kept in the layer's metadata.
"""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from napari_gpuscope.compute.camera import CameraModel
from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

from ._camera import DEFAULT_CAMERA
from ._phantoms import SEED

__all__ = ["PSF_SIGMA", "blinking_filaments", "blinking_filaments_stack", "demo_params"]

PSF_SIGMA = 1.3
"""PSF standard deviation in input pixels (FWHM 3.06 px: Nyquist-sampled widefield)."""
PIXEL_SIZE_UM = 0.1


def _filaments(shape: tuple[int, int], rng: np.random.Generator) -> list[np.ndarray]:
    """Centre lines ``(n, 2)`` (row, col), sampled every 0.02 px: a few gentle curves plus a
    pair running 1.5 px (150 nm, half the PSF's FWHM) apart."""
    rows, cols = shape
    t = np.linspace(0.0, 1.0, 4000)
    lines = []
    for k in range(3):
        start = rng.uniform(0.1, 0.3) * rows + k * rows * 0.25
        bend = rng.uniform(-0.15, 0.15) * rows
        r = start + (0.45 * rows) * t + bend * np.sin(np.pi * t)
        c = 0.05 * cols + 0.9 * cols * t
        lines.append(np.column_stack([r, c]))
    c = 0.15 * cols + 0.7 * cols * t
    r = 0.78 * rows + 0.04 * rows * np.sin(2 * np.pi * t)
    lines.append(np.column_stack([r, c]))
    lines.append(np.column_stack([r + 1.5, c]))
    return lines


def _emitters(shape: tuple[int, int], density: float, rng: np.random.Generator) -> np.ndarray:
    """Emitter positions: ``density`` per pixel of filament length, uniformly along it."""
    points = []
    for line in _filaments(shape, rng):
        steps = np.linalg.norm(np.diff(line, axis=0), axis=1)
        arc = np.concatenate([[0.0], np.cumsum(steps)])
        n = rng.poisson(density * arc[-1])
        where = np.sort(rng.uniform(0, arc[-1], n))
        points.append(np.column_stack([np.interp(where, arc, line[:, i]) for i in range(2)]))
    found = np.concatenate(points)
    inside = np.all((found > 2) & (found < np.array(shape) - 3), axis=1)
    return found[inside]


def _pixel_profiles(n: int, centres: np.ndarray, sigma: float) -> np.ndarray:
    """``(len(centres), n)`` pixel-integrated 1D Gaussian (pixel k covers [k - 0.5, k + 0.5))."""
    grid = np.arange(n)[None, :]
    s2 = np.sqrt(2.0) * sigma
    c = centres[:, None]
    return 0.5 * (erf((grid + 0.5 - c) / s2) - erf((grid - 0.5 - c) / s2))


def blinking_filaments_stack(
    n_frames: int = 100,
    shape: tuple[int, int] = (64, 64),
    *,
    density: float = 4.0,
    photons: float = 200.0,
    background: float = 60.0,
    duty: tuple[float, float] = (0.05, 0.45),
    camera: CameraModel = DEFAULT_CAMERA,
    seed: int = SEED,
) -> tuple[np.ndarray, np.ndarray]:
    """Camera frames of blinking emitters on filaments, and the true emitter positions.

    Parameters
    ----------
    n_frames : int
        Frames.
    shape : tuple of int
        Frame shape (rows, cols).
    density : float
        Emitters per pixel of filament length.
    photons : float
        Mean photons per emitter per frame while on (gamma-distributed brightness).
    background : float
        Background photons per pixel per frame.
    duty : tuple of float
        ``(P(off -> on), P(on -> off))`` per frame.
    camera : CameraModel
        Gain, offset and read noise.
    seed : int
        Random seed (the result is deterministic).

    Returns
    -------
    frames : numpy.ndarray
        uint16 ``(n_frames, rows, cols)`` in ADU.
    positions : numpy.ndarray
        float64 ``(n, 2)`` true emitter positions (row, col) in pixel-centre coordinates
        (pixel ``k`` is centred at ``k``).

    Examples
    --------
    >>> frames, truth = blinking_filaments_stack(5, (32, 32))
    >>> frames.shape, frames.dtype.name, truth.shape[1]
    ((5, 32, 32), 'uint16', 2)
    """
    rng = np.random.default_rng(seed)
    positions = _emitters(shape, density, rng)
    ey = _pixel_profiles(shape[0], positions[:, 0], PSF_SIGMA)
    ex = _pixel_profiles(shape[1], positions[:, 1], PSF_SIGMA)
    p_on, p_off = duty
    state = rng.random(len(positions)) < p_on / (p_on + p_off)
    frames = np.empty((n_frames, *shape), np.uint16)
    for t in range(n_frames):
        amplitude = photons * rng.gamma(4.0, 0.25, len(positions)) * state
        expected = background + (ey * amplitude[:, None]).T @ ex
        electrons = rng.poisson(expected) * camera.gain
        noisy = electrons + camera.offset + camera.read_noise * rng.standard_normal(shape)
        frames[t] = np.clip(np.rint(noisy), 0, 65535).astype(np.uint16)
        flip = rng.random(len(positions))
        state = np.where(state, flip >= p_off, flip < p_on)
    return frames, positions


def blinking_filaments() -> list[LayerDataTuple]:
    """napari sample: 100 uint16 frames of 64 x 64 pixels (0.1 um) of blinking emitters on
    filaments (two of them 150 nm apart); the true positions are in the layer's metadata
    (``metadata["sample"]["true_positions_px"]``, pixel-centre coordinates)."""
    frames, positions = blinking_filaments_stack()
    scale = (1.0, PIXEL_SIZE_UM, PIXEL_SIZE_UM)
    geometry = Geometry(scale=scale, units=("s", "um", "um"), axis_labels=("t", "y", "x"))
    metadata = {
        "intensity_unit": "ADU",
        "sample": {
            "psf_sigma_px": PSF_SIGMA,
            "camera_gain_adu_per_photon": DEFAULT_CAMERA.gain,
            "camera_offset_adu": DEFAULT_CAMERA.offset,
            "read_noise_adu": DEFAULT_CAMERA.read_noise,
            "true_positions_px": positions.round(4).tolist(),
        },
    }
    return [image_layer(frames, "blinking filaments", geometry, metadata=metadata, colormap="gray")]


def demo_params(sample_kwargs: dict) -> object:
    """Parameters of the headless demo on the eSRRF sample: the defaults at magnification 4 on
    the pixel-centred grid (so the result overlays the input)."""
    from napari_gpuscope.compute import esrrf

    return esrrf.EsrrfParams(magnification=4, geometry="centred")
