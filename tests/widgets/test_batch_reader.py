"""Batch results open in napari at their true scale, named, with their provenance (issue 18).

The store is written as a batch task writes it (the TV result's layers with the input TIFF's
geometry, through :meth:`BatchStore.write_position`); the oracle of the scale is the 0.1 um
pixel size written into the input TIFF, and of the pixels the direct TV call.
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import zarr

from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.reader import get_reader
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute import phase, tv
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.sample_data.phase import OPTICS, tilted_brightfield_stack
from napari_gpuscope.sample_data.tv import noisy_cells_2d

PIXEL_UM = 0.1


@pytest.fixture
def store(tmp_path):
    image = noisy_cells_2d()[0][0][:96, :128]
    result = run_job(tv.iter_denoise(image, params=tv.TVParams(strength=1.0), device="cpu"))
    geometry = Geometry(scale=(PIXEL_UM, PIXEL_UM), units=("um", "um"), axis_labels=("y", "x"))
    record = {"method": "tv", "params": result.params.to_dict()}
    layers = result.layers("cells", geometry, metadata={"napari_gpuscope": record})
    out = tmp_path / "out.zarr"
    attrs = {
        "recipe": {"method": "tv"},
        "recipe_hash": "abc",
        "provenance": record,
        "position": "A01",
        "source": "cells.tif",
    }
    store = BatchStore(out)
    store.prepare({"recipe_hash": "abc", "positions": [{"name": "A01"}]})  # the root group
    store.write_position("A01", layers, attrs)
    return out, result


def test_only_positions_of_a_batch_store_are_claimed(tmp_path, store):
    out, _ = store
    assert get_reader(str(out / "A01")) is not None
    assert get_reader(str(out)) is not None  # the store's root: its positions
    assert get_reader(str(out / "A01" / "extra")) is None  # a position's layers: no store
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w").create_array("0", data=np.ones((4, 4)))
    assert get_reader(str(tmp_path / "other.zarr")) is None
    tifffile.imwrite(tmp_path / "a.tif", np.ones((4, 4), np.uint16))
    assert get_reader(str(tmp_path / "a.tif")) is None


def test_a_position_opens_at_its_true_scale_with_provenance(viewer, store):
    """What ``napari --plugin napari-gpuscope OUT.zarr/A01`` (docs/batch.md) does. napari's
    builtins reader claims the folder too (and reads it at scale 1), so the command names the
    plugin: napari then opens it without a reader dialog."""
    out, result = store
    layers = viewer.open(str(out / "A01"), plugin="napari-gpuscope")
    assert len(layers) == 1
    layer = layers[0]
    assert layer.name == result.layers("cells")[0][1]["name"]
    np.testing.assert_allclose(layer.scale, (PIXEL_UM, PIXEL_UM))
    assert tuple(str(u) for u in layer.units) == ("micrometer", "micrometer")
    assert tuple(layer.axis_labels) == ("y", "x")
    assert layer.metadata[ATTRIBUTE]["method"] == "tv"
    assert layer.metadata["batch"]["position"] == "A01"
    np.testing.assert_array_equal(np.asarray(layer.data), result.image)


def test_extra_layers_open_hidden_beside_the_result(viewer, tmp_path):
    stack = tilted_brightfield_stack()[0][0][:, :64, :64]
    params = phase.PhaseParams(**OPTICS, tilt_zenith=0.2, tilt_azimuth=1.0)
    result = phase.reconstruct(stack, params=params, device="cpu")
    geometry = Geometry(scale=(1.0, 0.325, 0.325), axis_labels=("z", "y", "x"))
    out = tmp_path / "out.zarr"
    BatchStore(out).write_position("B02", result.layers("stack", geometry), {"provenance": {}})
    layers = viewer.open(str(out / "B02"), plugin="napari-gpuscope")
    assert [layer.visible for layer in layers] == [True, False]
    assert "phase" in layers[0].name and "absorption" in layers[1].name
    for layer in layers:
        np.testing.assert_allclose(layer.scale, (0.325, 0.325))
