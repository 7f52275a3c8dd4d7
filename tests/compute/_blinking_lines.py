"""A blinking-emitter stack with known structure, written for the eSRRF resolution tests
independently of the plugin's sample and code: a Gaussian PSF integrated over each pixel (erf),
emitters along lines blinking as a two-state Markov chain, Poisson photon noise, a camera
offset.

The structure holds a pair of parallel lines 150 nm apart (half the PSF's 306 nm FWHM: not
resolved by a widefield image, and by no method whose resolution is coarser than 150 nm),
a single line, and a diagonal one.
"""

from __future__ import annotations

import numpy as np
from scipy.special import erf

PIXEL_NM = 100.0
FWHM_NM = 306.0
PAIR_NM = 150.0
SIGMA_PX = FWHM_NM / PIXEL_NM / (2 * np.sqrt(2 * np.log(2)))


def _pixel_integrals(centres: np.ndarray, size: int) -> np.ndarray:
    """``(n, size)``: the fraction of each emitter's Gaussian falling in each pixel."""
    edges = np.arange(size + 1) - 0.5
    cdf = 0.5 * (1 + erf((edges[None, :] - centres[:, None]) / (np.sqrt(2) * SIGMA_PX)))
    return np.diff(cdf, axis=1)


def emitters(size: int, per_px: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Emitter positions ``(n, 2)`` (y, x in pixels, pixel centres at integers) and the x of
    the pair's left line."""
    length = size - 4.0
    x0 = size * 0.3
    pieces = []
    for x in (x0, x0 + PAIR_NM / PIXEL_NM):  # the pair, vertical
        y = rng.uniform(2, 2 + length, int(per_px * length))
        pieces.append(np.stack([y, np.full_like(y, x)], axis=1))
    t = rng.uniform(0, 1, int(per_px * length))  # a single vertical line
    pieces.append(np.stack([2 + length * t, np.full_like(t, size * 0.75)], axis=1))
    t = rng.uniform(0, 1, int(per_px * length * 1.2))  # a diagonal
    pieces.append(np.stack([3 + (size - 6) * t, 4 + (size * 0.5) * t], axis=1))
    return np.concatenate(pieces), x0


def blinking_stack(
    frames: int = 40,
    size: int = 32,
    *,
    per_px: float = 10.0,
    photons: float = 500.0,
    background: float = 15.0,
    seed: int = 0,
) -> tuple[np.ndarray, float]:
    """uint16 ``(frames, size, size)`` of blinking emitters (on ~10 % of frames) and the x (in
    pixels) of the 150 nm pair's left line."""
    rng = np.random.default_rng(seed)
    points, x0 = emitters(size, per_px, rng)
    gy = _pixel_integrals(points[:, 0], size)
    gx = _pixel_integrals(points[:, 1], size)
    on = rng.random(len(points)) < 0.1
    stack = np.empty((frames, size, size), np.uint16)
    for k in range(frames):
        # two-state Markov blinking: off -> on 5 %, on -> off 45 % per frame (~10 % on)
        flip = rng.random(len(points))
        on = np.where(on, flip >= 0.45, flip < 0.05)
        expected = (gy[on].T * photons) @ gx[on] + background
        stack[k] = rng.poisson(expected) + 100
    return stack, x0
