"""Batch eSRRF of multi-channel positions (issue 19): the recipe's ``channel_registration``
registers the channels as the dock does, and an ImageJ hyperstack, ``(T, C, Y, X)``, is read by
its axes, not as ``(C, T, Y, X)``. Oracles: the simulated offset between the channels, and the
compute job on the same frames in ``(C, T, Y, X)`` order."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import zarr

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute import esrrf

OFFSET = np.array([1.3, -1.7])  # channel 1's content relative to channel 0's, input px
PARAMS = esrrf.EsrrfParams(magnification=2, channel_registration="translation")


@pytest.fixture(scope="module")
def channels():
    """(C, T, Y, X) uint16: the same emitters, channel 1 moved by OFFSET, blinking apart."""
    from esrrf_drift_sim_batch import blinking_drifting_stack

    still = np.zeros((60, 2))
    first, _ = blinking_drifting_stack(still, shape=(64, 64), n_emitters=120, seed=4)
    second, _ = blinking_drifting_stack(still + OFFSET, shape=(64, 64), n_emitters=120, seed=4)
    return np.stack([first, np.random.default_rng(5).permutation(second)])


@pytest.mark.parametrize("axes", ["TCYX", "CTYX"])
def test_a_recipe_registers_the_channels_of_a_position_by_its_axes(
    channels, axes, inprocess_client, tmp_path
):
    data = channels if axes == "CTYX" else channels.transpose(1, 0, 2, 3)
    # ImageJ writes hyperstacks in TZCYX order only; CTYX is tifffile's own metadata
    tifffile.imwrite(tmp_path / "cells.tif", data, imagej=axes == "TCYX", metadata={"axes": axes})
    out = tmp_path / "out.zarr"
    recipe = Recipe.from_params(PARAMS)
    report = run_batch(recipe, discover(str(tmp_path / "*.tif")), out, inprocess_client)
    assert report.done == ["cells"], report.failed

    facts = zarr.open_group(str(out / "cells"), mode="r").attrs[ATTRIBUTE]
    result = facts["provenance"]["result"]
    assert facts["recipe"]["params"]["channel_registration"] == "translation"
    assert result["n_channels"] == 2 and result["channel_axis"] == axes.index("C")
    measured = np.array(result["registration"]["shifts"][1])
    assert np.abs(measured - OFFSET).max() < 0.1, measured
    expected = esrrf.esrrf(channels, params=PARAMS, device="cpu")  # (C, T, Y, X) as it is
    np.testing.assert_allclose(BatchStore(out).read_position("cells"), expected[0], atol=1e-5)
