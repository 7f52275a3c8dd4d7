"""Batch with drift (issue 19): a recipe carries eSRRF's drift options, each position is
corrected with its own drift, and its trace is stored beside its result (the group's
provenance, and drift.csv: test_batch_drift_csv.py); the "drift" job estimates each position's
trace. The oracle is the job called directly on the position's file."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import zarr

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.recipes import Recipe, load_recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.jobs import run_job


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


@pytest.fixture(scope="module")
def drifting_files(tmp_path_factory):
    from esrrf_drift_sim_batch import drifting_stacks

    folder = tmp_path_factory.mktemp("drift")
    stacks = drifting_stacks()
    for index, stack in enumerate(stacks):
        tifffile.imwrite(folder / f"fov{index}.tif", stack)
    return folder, stacks


def _result_facts(out, position):
    attrs = zarr.open_group(str(out / position), mode="r").attrs[ATTRIBUTE]
    return attrs, attrs["provenance"]["result"]


def test_esrrf_with_drift_correction_writes_each_positions_trace(tmp_path, client, drifting_files):
    folder, stacks = drifting_files
    params = esrrf.EsrrfParams(magnification=2, drift_correction=True, drift_time_averaging=30)
    path = Recipe.from_params(params).save(tmp_path / "drift.yaml")
    recipe = load_recipe(path)
    assert recipe.params_model() == params  # the drift options travel in the recipe
    out = tmp_path / "out.zarr"

    report = run_batch(recipe, discover(str(folder / "*.tif")), out, client)

    assert report.failed == {} and report.done == ["fov0", "fov1"]
    for index, stack in enumerate(stacks):
        direct = run_job(esrrf.iter_esrrf(stack, params=params, device="cpu"))
        written = BatchStore(out).read_position(f"fov{index}")
        np.testing.assert_allclose(written, direct.image, rtol=1e-6, atol=1e-6)
        attrs, facts = _result_facts(out, f"fov{index}")
        trace = esrrf.DriftResult.from_summary(facts["drift"]).shifts
        np.testing.assert_allclose(trace, direct.drift.shifts, atol=1e-12)
        assert trace.shape == (len(stack), 2)
        # The track's data is the group's drift.csv (tests/batch/test_batch_drift_csv.py).
        assert attrs["layers_in_files"] == {f"drift · fov{index} (tracks)": "drift.csv"}
        assert "layers_not_written" not in attrs
    # Each position's own drift: the two traces differ.
    first = esrrf.DriftResult.from_summary(_result_facts(out, "fov0")[1]["drift"]).shifts
    second = esrrf.DriftResult.from_summary(_result_facts(out, "fov1")[1]["drift"]).shifts
    assert np.abs(first - second).max() > 0.5


def test_the_drift_job_writes_the_aligned_mean_and_the_trace(tmp_path, client, drifting_files):
    folder, stacks = drifting_files
    params = esrrf.DriftParams(time_averaging=30, reference="previous")
    recipe = Recipe.from_params(params)
    assert recipe.job == "drift"
    out = tmp_path / "out.zarr"

    report = run_batch(recipe, discover(str(folder / "*.tif")), out, client)

    assert report.failed == {} and report.done == ["fov0", "fov1"]
    for index, stack in enumerate(stacks):
        direct = esrrf.estimate_drift(stack, params=params, device="cpu")
        written = BatchStore(out).read_position(f"fov{index}")
        np.testing.assert_allclose(written, direct.aligned_mean, rtol=1e-6)
        _, facts = _result_facts(out, f"fov{index}")
        np.testing.assert_allclose(
            esrrf.DriftResult.from_summary(facts).shifts, direct.shifts, atol=1e-12
        )
        # the trace beside the image, as eSRRF's runs write it
        csv_trace = esrrf.load_drift_trace(out / f"fov{index}" / "drift.csv")
        np.testing.assert_allclose(csv_trace, direct.shifts, atol=1e-12)
