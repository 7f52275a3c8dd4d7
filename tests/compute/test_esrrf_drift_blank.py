"""Drift of frames without sample (issue 26 item 1): a block whose correlation with its
reference has no peak above the noise (a constant, pure Poisson noise, camera background) is
refused, naming the block and its frames, instead of returning a shift of tens of pixels.
The oracle: the stacks below have no structure by construction, and the threshold is the
height pure noise reaches (not a number tuned on them); a drifting blinking stack still
passes."""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack, true_drift

from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf import estimate_drift


@pytest.mark.parametrize("reference", ["first", "mean", "previous"])
def test_a_constant_stack_is_refused(reference):
    stack = np.full((48, 32, 32), 500, np.uint16)
    with pytest.raises(
        InvalidInputError, match=r"block [12] of 2 \(frames [0-9-]+\).*no structure"
    ):
        estimate_drift(stack, time_averaging=20, reference=reference, device="cpu")


@pytest.mark.parametrize("reference", ["first", "mean", "previous"])
def test_pure_poisson_noise_is_refused(reference):
    stack = np.random.default_rng(3).poisson(120.0, (200, 64, 64)).astype(np.uint16)
    with pytest.raises(InvalidInputError, match=r"no structure in common"):
        estimate_drift(stack, time_averaging=20, reference=reference, device="cpu")


def test_a_first_block_of_background_is_named():
    # 160 frames, 96 x 96: the first 20 are camera background (Poisson noise, offset 100,
    # background 20 photons, as the simulator's), the rest a drifting blinking sample.
    shifts = true_drift(160, seed=2)
    stack, _ = blinking_drifting_stack(shifts, shape=(96, 96), n_emitters=200, seed=4)
    rng = np.random.default_rng(5)
    stack[:20] = (100 + rng.poisson(20.0, (20, 96, 96))).astype(np.uint16)
    with pytest.raises(InvalidInputError, match=r"block 1 of 8 \(frames 0-19\)"):
        estimate_drift(stack, time_averaging=20, reference="mean", device="cpu")


@pytest.mark.parametrize("reference", ["first", "mean", "previous"])
def test_a_drifting_sample_still_passes(reference):
    shifts = true_drift(160, seed=2)
    stack, _ = blinking_drifting_stack(shifts, shape=(96, 96), n_emitters=200, seed=4)
    result = estimate_drift(stack, time_averaging=20, reference=reference, device="cpu")
    error = result.shifts - shifts
    assert np.sqrt(np.mean(error**2)) < 0.15
