"""Our BaSiC fit against BaSiCPy 2.0.0 on the same tiles (fixtures made by
``tests/fixtures/flatfield/make_basicpy_fixtures.py`` in BaSiCPy's own environment)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from napari_gpuscope.compute.flatfield import fit_basic
from napari_gpuscope.sample_data._shading import shaded_tiles

FIXTURE = Path(__file__).parents[1] / "fixtures" / "flatfield" / "basicpy_reference.npz"
BASICPY_SETTINGS = {
    "optimization_tol": 1e-3,
    "max_reweight_iterations": 10,
    "reweighting_tol": 1e-2,
}


@pytest.fixture(scope="module")
def reference():
    data = np.load(FIXTURE)
    return data, json.loads(str(data["facts"]))


def rel_rmse(estimate: np.ndarray, truth: np.ndarray) -> float:
    estimate = estimate / estimate.mean()
    return float(np.sqrt(((estimate - truth / truth.mean()) ** 2).mean()))


def tiles_of(reference, name):
    data, facts = reference
    config = facts["configs"][name]
    tiles = shaded_tiles(
        config["tiles"], tuple(config["shape"]), seed=0, dark_offset=config["dark_offset"]
    )
    assert tiles.images.mean() == pytest.approx(float(data[f"{name}_mean"]), rel=1e-3)
    return tiles, config, data[f"{name}_flatfield"]


@pytest.mark.parametrize("name", ["flat_only", "offset_no_dark"])
def test_same_settings_same_flatfield(reference, name):
    """With BaSiCPy's tolerances our fit is BaSiCPy's (where its bugs do not bite)."""
    tiles, config, theirs = tiles_of(reference, name)
    ours = fit_basic(tiles.images, device="cpu", **config["keywords"], **BASICPY_SETTINGS)
    assert rel_rmse(ours.flatfield, theirs) < 0.002
    assert ours.smoothness_flatfield[0] == pytest.approx(config["smoothness_flatfield"], rel=2e-3)


@pytest.mark.parametrize("name", ["flat_only", "offset_no_dark", "offset_dark"])
def test_defaults_within_half_a_point_of_basicpy(reference, name):
    tiles, config, theirs = tiles_of(reference, name)
    ours = fit_basic(tiles.images, device="cpu", **config["keywords"])
    error = rel_rmse(ours.flatfield, tiles.flatfield)
    assert rel_rmse(theirs, tiles.flatfield) == pytest.approx(config["flat_rel_rmse"], abs=2e-3)
    assert error <= config["flat_rel_rmse"] + 0.005
    assert ours.all_converged


def test_many_dim_tiles_with_darkfield_beat_basicpy(reference):
    """The >= 1000-tile darkfield regression: BaSiCPy 2.0's counter bug (B1) returns an almost
    flat flatfield here; ours recovers the shading."""
    tiles, config, theirs = tiles_of(reference, "many_tiles_dark")
    assert theirs.std() < 0.03  # the bug, as recorded: almost flat (truth: std 0.2)
    ours = fit_basic(tiles.images, device="cpu", **config["keywords"])
    error = rel_rmse(ours.flatfield, tiles.flatfield)
    assert error < 0.5 * config["flat_rel_rmse"]
    assert ours.flatfield.std() > 0.15  # the truth's is 0.2
    assert 50 < ours.darkfield.mean() < 160  # truth 114
    assert ours.all_converged
    assert max(ours.alm_iterations) < ours.params.max_iterations  # the counter counts
