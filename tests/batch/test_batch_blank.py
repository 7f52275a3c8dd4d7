"""Batch positions with nothing to measure (issue 26 items 1 and 12): a blank position's tilt
estimate or drift estimate fails that position with the reason instead of marking it done;
the position beside it with a sample is done."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


def test_a_blank_tilt_position_fails_with_the_reason(tmp_path, client):
    from napari_gpuscope.compute import phase
    from napari_gpuscope.sample_data.phase import OPTICS, tilted_brightfield_stack

    stack = np.asarray(tilted_brightfield_stack()[0][0][:, :64, :64], np.float32)
    tifffile.imwrite(tmp_path / "a_sample.tif", stack)
    tifffile.imwrite(tmp_path / "b_blank.tif", np.full(stack.shape, 1000, np.float32))
    params = phase.PhaseParams(**OPTICS, optimizer="newton", iterations=2)
    recipe = Recipe.from_params(params, job="estimate_tilt")

    report = run_batch(recipe, discover(str(tmp_path / "*.tif")), tmp_path / "out.zarr", client)

    assert report.done == ["a_sample"]
    assert list(report.failed) == ["b_blank"]
    assert "not measurable" in report.failed["b_blank"]
    assert "constant" in report.failed["b_blank"]



def test_a_noise_only_tilt_position_fails_with_the_reason(tmp_path, client):
    from napari_gpuscope.compute import phase
    from napari_gpuscope.sample_data.phase import OPTICS, tilted_brightfield_stack

    stack = np.asarray(tilted_brightfield_stack()[0][0][:, :64, :64], np.float32)
    tifffile.imwrite(tmp_path / "a_sample.tif", stack)
    noise = np.random.default_rng(5).poisson(1000.0, stack.shape).astype(np.float32)
    tifffile.imwrite(tmp_path / "b_noise.tif", noise)
    params = phase.PhaseParams(**OPTICS, optimizer="newton", iterations=2)
    recipe = Recipe.from_params(params, job="estimate_tilt")

    report = run_batch(recipe, discover(str(tmp_path / "*.tif")), tmp_path / "out.zarr", client)

    assert report.done == ["a_sample"]
    assert "share no structure above the noise" in report.failed["b_noise"]

def test_a_blank_drift_position_fails_with_the_reason(tmp_path, client):
    from esrrf_drift_sim import blinking_drifting_stack, true_drift

    from napari_gpuscope.compute import esrrf

    shifts = true_drift(60, seed=1)
    stack, _ = blinking_drifting_stack(shifts, shape=(64, 64), n_emitters=120, seed=2)
    tifffile.imwrite(tmp_path / "a_sample.tif", stack)
    blank = (100 + np.random.default_rng(0).poisson(20, stack.shape)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "b_blank.tif", blank)
    recipe = Recipe.from_params(esrrf.DriftParams(time_averaging=20))

    report = run_batch(recipe, discover(str(tmp_path / "*.tif")), tmp_path / "out.zarr", client)

    assert report.done == ["a_sample"]
    assert list(report.failed) == ["b_blank"]
    assert "no structure" in report.failed["b_blank"]
