"""The channels of a multi-channel batch position open in their colours (issue 30 item 2).

The position is written by the batch runner (eSRRF of a two-channel ``(C, T, Y, X)`` TIFF on
an in-process Dask worker). The writer records no colour, so the channels take the colours the
eSRRF dock gives them (the result's own layers, :meth:`ChannelsResult.layers`, are the
oracle); a group that records OME-NGFF ``omero`` channel colours opens in those (the oracle:
the RGB of the colour written, at the top of napari's colormap).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import tifffile

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.reader import read_position
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.results import Geometry, image_layer
from napari_gpuscope.napari_reader import PLUGIN

PARAMS = esrrf.EsrrfParams(magnification=2)


@pytest.fixture(autouse=True)
def settings(monkeypatch):
    """napari's settings for this test only, in memory (the reader saves a preference)."""
    from napari import settings as napari_settings
    from napari.settings import NapariSettings

    monkeypatch.setattr(napari_settings, "_SETTINGS", NapariSettings(config_path=None))


@pytest.fixture(scope="module")
def position(tmp_path_factory, inprocess_client):
    root = tmp_path_factory.mktemp("channels")
    frames = np.random.default_rng(0).poisson(100, (2, 20, 32, 32)).astype(np.uint16)
    tifffile.imwrite(root / "cells.tif", frames, metadata={"axes": "CTYX"})
    out = root / "out.zarr"
    report = run_batch(
        Recipe.from_params(PARAMS), discover(str(root / "*.tif")), out, inprocess_client
    )
    assert report.done == ["cells"], report.failed
    return out / "cells", frames


def _dock_colours(frames):
    """Each layer name's colormap and visibility as the eSRRF dock shows the result."""
    result = run_job(esrrf.iter_channels(frames, PARAMS, device="cpu"))
    return {
        kwargs["name"]: (kwargs["colormap"], kwargs.get("visible", True))
        for _, kwargs, kind in result.layers("cells")
        if kind == "image"
    }


def test_the_channels_open_in_the_colours_the_dock_gives_them(viewer, position):
    folder, frames = position
    expected = _dock_colours(frames)
    layers = viewer.open(str(folder), plugin=PLUGIN)
    shown = {layer.name: (layer.colormap.name, layer.visible) for layer in layers}
    assert shown == expected
    assert {layer.blending for layer in layers} == {"additive"}  # the channels overlay


def _add_omero(group, colours):
    meta = group / "zarr.json"
    document = json.loads(meta.read_text())
    document["attributes"]["ome"]["omero"] = {"channels": [{"color": c} for c in colours]}
    meta.write_text(json.dumps(document))


def _image_name(group):
    return json.loads((group / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0][
        "name"
    ]


def test_recorded_omero_colours_are_used(viewer, position, tmp_path):
    folder, _ = position
    copy = tmp_path / "cells"
    shutil.copytree(folder, copy)
    (channel_1,) = [
        p
        for p in (copy / "extra").iterdir()
        if p.is_dir() and _image_name(p).startswith("eSRRF · cells ch1")
    ]
    _add_omero(channel_1, ["00FFFF"])
    by_name = {kwargs["name"]: kwargs for _, kwargs, _ in read_position(str(copy))}
    (recorded,) = [k for name, k in by_name.items() if "eSRRF" in name and "ch1" in name]
    assert recorded["colormap"] == "#00ffff" and recorded["visible"]
    layer = viewer.add_image(np.ones((4, 4)), colormap=recorded["colormap"])
    np.testing.assert_allclose(layer.colormap.colors[-1], (0.0, 1.0, 1.0, 1.0))


def test_a_group_with_a_channel_axis_opens_each_channel_in_its_recorded_colour(viewer, tmp_path):
    geometry = Geometry(scale=(1.0, 0.1, 0.1), axis_labels=("c", "y", "x"))
    data = np.stack([np.full((8, 8), 1.0, np.float32), np.full((8, 8), 2.0, np.float32)])
    out = tmp_path / "out.zarr"
    store = BatchStore(out)
    store.prepare({"recipe_hash": "abc", "positions": [{"name": "A01"}]})
    store.write_position("A01", [image_layer(data, "TV · A01", geometry)], {"provenance": {}})
    _add_omero(out / "A01", ["FF0000", "0000FF"])
    layers = viewer.open(str(out / "A01"), plugin=PLUGIN)
    assert len(layers) == 2
    np.testing.assert_allclose(layers[0].colormap.colors[-1], (1.0, 0.0, 0.0, 1.0))
    np.testing.assert_allclose(layers[1].colormap.colors[-1], (0.0, 0.0, 1.0, 1.0))
    np.testing.assert_array_equal(np.asarray(layers[1].data), data[1])
    np.testing.assert_allclose(layers[0].scale, (0.1, 0.1))
