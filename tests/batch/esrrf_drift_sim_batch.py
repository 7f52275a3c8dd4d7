"""Two small drifting blinking acquisitions with different drifts (the batch drift tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compute"))

from esrrf_drift_sim import blinking_drifting_stack, true_drift


def drifting_stacks(n_frames: int = 120, shape=(48, 48)) -> list[np.ndarray]:
    """uint16 stacks: the second drifts the other way, twice as far."""
    truth = true_drift(n_frames)
    return [
        blinking_drifting_stack(scale * truth, shape=shape, n_emitters=40, seed=seed)[0]
        for scale, seed in ((1.0, 7), (-2.0, 8))
    ]


def drifting_positions(
    n_frames: int = 100, shape=(64, 64), n_emitters: int = 150, drifts=((1.0, 7), (-1.0, 8))
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """uint16 stacks and their true drifts (``(T, 2)`` input pixels, frame t relative to frame
    0, as the drift trace means it): one stack per ``(scale, seed)``, its drift the simulator's
    ``true_drift`` times ``scale``."""
    truth = true_drift(n_frames)
    stacks = [
        blinking_drifting_stack(scale * truth, shape=shape, n_emitters=n_emitters, seed=seed)[0]
        for scale, seed in drifts
    ]
    return stacks, [scale * truth for scale, _ in drifts]
