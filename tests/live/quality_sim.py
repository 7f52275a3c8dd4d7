"""Simulated blinking filaments and the error of a reconstruction against their truth: the
oracle of "acquire until good enough" (``tests/live/test_live_quality.py``,
``benchmarks/live_good_enough.py``), written independently of the plugin's eSRRF."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["simulate", "true_error"]


def _pixel_integrated(centres: np.ndarray, size: int, sigma: float) -> np.ndarray:
    """``(emitters, size)``: each emitter's Gaussian integrated over each pixel (one axis)."""
    from scipy.special import erf

    edges = np.arange(size + 1) - 0.5
    cdf = 0.5 * (1 + erf((edges[None, :] - centres[:, None]) / (math.sqrt(2) * sigma)))
    return np.diff(cdf, axis=1)


def simulate(frames, *, size, density, on, photons, background, seed, sigma=1.3, blink_seed=None):
    """Blinking emitters on four smooth filaments: the stack and the emitters (input px).

    Parameters
    ----------
    frames, size : int
        The stack's frames and its side (px).
    density, on, photons, background : float
        Emitters per px of filament, the stationary on-fraction, photons of an emitter that is
        on, and the background (photons a px).
    seed : int
        The sample: the filaments and the emitters' positions (and, without ``blink_seed``,
        the blinking and the shot noise too, from the same generator, drawn after them).
    sigma : float
        The PSF's Gaussian sigma (px).
    blink_seed : int, optional
        The blinking and the Poisson noise from ``np.random.default_rng(blink_seed)`` instead:
        another acquisition of the same sample. None (the default) gives the stack it always
        gave for ``seed``.

    Returns
    -------
    stack : numpy.ndarray
        ``(frames, size, size)`` uint16.
    points : numpy.ndarray
        ``(emitters, 2)``: each emitter's row and column (input px).
    """
    rng = np.random.default_rng(seed)
    emitters = []
    for _ in range(4):
        x = np.linspace(4, size - 4, 2000)
        y = rng.uniform(0.25, 0.75) * size + rng.uniform(-0.5, 0.5) * (x - size / 2)
        y += rng.uniform(2, 5) * np.sin(x / rng.uniform(20, 40) * 2 * np.pi + rng.uniform(0, 6))
        if rng.random() < 0.5:
            x, y = y, x
        keep = (y > 4) & (y < size - 4)
        path = np.stack([y[keep], x[keep]], axis=1)
        arc = np.r_[0, np.cumsum(np.hypot(*np.diff(path, axis=0).T))]
        s = rng.uniform(0, arc[-1], rng.poisson(density * arc[-1]))
        emitters.append(np.stack([np.interp(s, arc, path[:, 0]), np.interp(s, arc, path[:, 1])], 1))
    points = np.concatenate(emitters)
    if blink_seed is not None:  # the same sample, another acquisition of it
        rng = np.random.default_rng(blink_seed)
    rows = _pixel_integrated(points[:, 0], size, sigma)
    cols = _pixel_integrated(points[:, 1], size, sigma)
    # Two-state blinking with a stationary on-fraction `on` (mean on-time 2 frames).
    off_rate = 0.5
    on_rate = off_rate * on / (1 - on)
    lit = rng.random(len(points)) < on
    stack = np.empty((frames, size, size), np.uint16)
    for t in range(frames):
        flip = rng.random(len(points))
        lit = np.where(lit, flip > off_rate, flip < on_rate)
        mean = background + photons * np.einsum("ky,kx->yx", rows[lit], cols[lit])
        stack[t] = rng.poisson(mean)
    return stack, points


def true_error(image: np.ndarray, points: np.ndarray, magnification: int) -> float:
    """1 - Pearson correlation of a reconstruction with the emitters drawn on its grid and
    blurred to 1.5 output px (sigma): the resolution eSRRF reaches at best here (the PSF's
    sigma, 1.3 input px, halved), the pixel grid's half-pixel offset (NanoPyx's geometry)
    within it."""
    from scipy import ndimage

    truth = np.zeros(image.shape)
    index = np.clip(((points + 0.5) * magnification).astype(int), 0, image.shape[0] - 1)
    np.add.at(truth, (index[:, 0], index[:, 1]), 1.0)
    truth = ndimage.gaussian_filter(truth, 1.5)
    return 1.0 - float(np.corrcoef(image.ravel(), truth.ravel())[0, 1])
