"""The QnR sweep with drift correction (issue 19): the drift of the frames swept is estimated
once and every reconstruction (even and odd halves, all frames) and the widefield mean are
corrected with it. Oracles: the simulator's drift, and the same sweep on the stack corrected
beforehand with that trace (correct_drift)."""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack, true_drift
from job_helpers import stop_after

from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf import SweepParams, correct_drift, iter_sweep
from napari_gpuscope.compute.jobs import run_job

GRID = {"radii": (1.0, 2.0), "sensitivities": (1.0,), "magnification": 2}


@pytest.fixture(scope="module")
def drifting():
    truth = true_drift(120, seed=4)
    stack, _ = blinking_drifting_stack(truth, shape=(64, 64), n_emitters=200, seed=5)
    return stack, truth


def test_the_sweep_corrects_every_reconstruction_with_one_estimate(drifting, cpu_device):
    stack, truth = drifting
    params = SweepParams(**GRID, drift_correction=True, drift_time_averaging=20)
    result = run_job(iter_sweep(stack, params, device=cpu_device))
    error = result.drift.shifts - (truth - truth[0])
    assert np.sqrt(np.mean(error**2)) < 0.15
    corrected = correct_drift(stack, result.drift.shifts, device=cpu_device)
    plain = SweepParams(**GRID)
    again = run_job(iter_sweep(corrected, plain, device=cpu_device))
    np.testing.assert_allclose(result.rsp, again.rsp, rtol=1e-4)
    np.testing.assert_allclose(result.frc_resolution, again.frc_resolution, rtol=1e-3)
    assert result.best_params().drift_correction  # "Use best" keeps the correction on
    assert result.summary()["drift"]["frames"] == 120


def test_too_few_frames_for_the_drift_blocks_name_the_parameters(drifting, cpu_device):
    stack, _ = drifting
    params = SweepParams(**GRID, drift_correction=True, sweep_frames=60, drift_time_averaging=50)
    with pytest.raises(InvalidInputError, match=r"sweep_frames.*drift_time_averaging=50"):
        iter_sweep(stack, params, device=cpu_device)


def test_stop_during_the_sweeps_drift_estimate_measures_nothing(drifting, cpu_device):
    stack, _ = drifting
    params = SweepParams(**GRID, drift_correction=True, drift_time_averaging=20)
    result, _ = stop_after(iter_sweep(stack, params, device=cpu_device), 1)
    assert result.stopped_early and result.cells_done == 0 and result.best is None
    assert "stopped before its first setting" in result.describe()
