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
