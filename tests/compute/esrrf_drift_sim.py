"""A simulated drifting blinking acquisition with known drift (the drift tests' sample)."""

from __future__ import annotations

import numpy as np
from scipy.special import erf


def true_drift(n_frames: int, seed: int = 0, jitter: float = 0.03) -> np.ndarray:
    """Smooth sub-pixel drift (oscillation + trend, ~4 px in all) with per-frame jitter."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_frames) / n_frames
    shifts = np.column_stack([2.0 * np.sin(2 * np.pi * 0.6 * t) + 1.2 * t, -3.5 * t + 1.0 * t**2])
    shifts += rng.normal(0.0, jitter, shifts.shape)
    return shifts - shifts[0]


def render(positions: np.ndarray, amplitudes: np.ndarray, shape, sigma: float = 1.3):
    """Pixel-integrated Gaussian spots (the camera's view of point emitters)."""
    s2 = np.sqrt(2.0) * sigma

    def profile(n, centres):
        grid = np.arange(n)[None, :]
        return 0.5 * (
            erf((grid + 0.5 - centres[:, None]) / s2) - erf((grid - 0.5 - centres[:, None]) / s2)
        )

    return np.einsum(
        "n,nr,nc->rc",
        amplitudes,
        profile(shape[0], positions[:, 0]),
        profile(shape[1], positions[:, 1]),
    )


def blinking_drifting_stack(shifts, shape=(128, 128), n_emitters=300, seed=1):
    """uint16: blinking emitters (2-state Markov) moved by ``+shifts[t]``, background 20
    photons, Poisson noise, camera offset 100; and the emitter positions of frame 0."""
    rng = np.random.default_rng(seed)
    pos = np.column_stack(
        [rng.uniform(6, shape[0] - 6, n_emitters), rng.uniform(6, shape[1] - 6, n_emitters)]
    )
    state = rng.random(n_emitters) < 0.3
    out = np.empty((len(shifts), *shape), np.uint16)
    for t, shift in enumerate(shifts):
        on = np.nonzero(state)[0]
        amp = 400.0 * rng.gamma(4.0, 0.25, on.size)
        out[t] = rng.poisson(20.0 + render(pos[on] + shift, amp, shape)) + 100
        flip = rng.random(n_emitters)
        state = np.where(state, flip >= 0.5, flip < 0.15)
    return out, pos
