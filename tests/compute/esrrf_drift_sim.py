"""A simulated drifting blinking acquisition with known drift (the drift tests' sample)."""

from __future__ import annotations

import numpy as np
from scipy.special import erf


def true_drift(
    n_frames: int, seed: int = 0, jitter: float = 0.03, scale: float = 1.0
) -> np.ndarray:
    """Smooth sub-pixel drift (oscillation + trend, ~4 px in all, times ``scale``; the
    workflow example's is 1.5 times larger) with per-frame jitter."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_frames) / n_frames
    shifts = scale * np.column_stack(
        [2.0 * np.sin(2 * np.pi * 0.6 * t) + 1.2 * t, -3.5 * t + 1.0 * t**2]
    )
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


def blinking_drifting_stack(
    shifts,
    shape=(128, 128),
    n_emitters=300,
    seed=1,
    switch_off=0.5,
    switch_on=0.15,
    initially_on=0.3,
):
    """uint16: blinking emitters (2-state Markov: an on emitter switches off with probability
    ``switch_off`` a frame, an off one on with ``switch_on``; ``initially_on`` of them on in
    frame 0) moved by ``+shifts[t]``,
    background 20 photons, Poisson noise, camera offset 100; and the emitter positions of
    frame 0. An emitter's state persists: consecutive frames correlate by
    ``1 - switch_off - switch_on`` (0.35 here; the workflow example's 0.45 and 0.05: 0.5)."""
    rng = np.random.default_rng(seed)
    pos = np.column_stack(
        [rng.uniform(6, shape[0] - 6, n_emitters), rng.uniform(6, shape[1] - 6, n_emitters)]
    )
    state = rng.random(n_emitters) < initially_on
    out = np.empty((len(shifts), *shape), np.uint16)
    for t, shift in enumerate(shifts):
        on = np.nonzero(state)[0]
        amp = 400.0 * rng.gamma(4.0, 0.25, on.size)
        out[t] = rng.poisson(20.0 + render(pos[on] + shift, amp, shape)) + 100
        flip = rng.random(n_emitters)
        state = np.where(state, flip >= switch_off, flip < switch_on)
    return out, pos
