"""Batch stores open in napari with this plugin's reader without ``--plugin`` (issue 30 item 6),
and a store's root opens its positions.

The stores are written by the batch runner itself (:func:`run_batch` on an in-process Dask
worker) from TIFFs with 0.1 um pixels; the oracles are that pixel size (napari's builtins
reader shows the folder at scale 1), the arrays the run wrote, and napari's own reader
resolution: ``viewer.open(path, plugin=None)``, which is what ``napari OUT.zarr``, File > Open
and drag and drop call (``viewer.open``'s own default, ``plugin="napari"``, is the builtins
reader whatever the preferences), :func:`get_preferred_reader` and
:func:`napari.plugins._npe2.get_readers`. napari's settings are a fresh in-memory copy per
test: the user's reader preferences are never read or written.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import tifffile

from napari_gpuscope.batch import reader_store
from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.reader_store import TooManyPositions, read_store
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.napari_reader import (
    PLUGIN,
    get_reader,
    open_store,
    prefer_store,
    store_pattern,
)

PIXEL_UM = 0.1
POSITIONS = ["field00", "field01", "field02"]


@pytest.fixture(autouse=True)
def settings(monkeypatch):
    """napari's settings for this test only, in memory (not the user's file)."""
    from napari import settings as napari_settings
    from napari.settings import NapariSettings

    fresh = NapariSettings(config_path=None)
    monkeypatch.setattr(napari_settings, "_SETTINGS", fresh)
    return fresh


def _write_inputs(folder, count):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for index in range(count):
        image = rng.poisson(200 + 50 * index, (48, 64)).astype(np.uint16)
        tifffile.imwrite(
            folder / f"field{index:02d}.tif",
            image,
            imagej=True,
            resolution=(1 / PIXEL_UM, 1 / PIXEL_UM),
            metadata={"unit": "um", "axes": "YX"},
        )


@pytest.fixture(scope="module")
def store(tmp_path_factory, inprocess_client):
    """``out.zarr`` of a TV run on three positions, written by the batch runner."""
    root = tmp_path_factory.mktemp("store")
    _write_inputs(root / "in", len(POSITIONS))
    out = root / "out.zarr"
    recipe = Recipe.from_defaults("tv", strength=1.0)
    report = run_batch(recipe, discover(str(root / "in" / "*.tif")), out, inprocess_client)
    assert report.done == POSITIONS, report.failed
    return out


def _readers(path):
    from napari.plugins import _initialize_plugins, _npe2

    _initialize_plugins()
    return set(_npe2.get_readers(str(path)))


def test_napari_asks_for_a_folder_until_a_store_was_opened_with_this_reader(viewer, store):
    """Every folder reader is offered every folder (npe2 ignores patterns for folders), so
    napari asks; once one position was opened with this reader (the reader dialog's choice, or
    ``--plugin``), every part of the store opens with it, at its true scale."""
    from napari.errors import MultipleReaderError
    from napari.plugins.utils import get_preferred_reader

    assert {PLUGIN, "napari"} <= _readers(store / "field00")
    with pytest.raises(MultipleReaderError):
        viewer.open(str(store / "field00"), plugin=None)

    viewer.open(str(store / "field00"), plugin=PLUGIN)

    assert get_preferred_reader(str(store)) == PLUGIN
    assert get_preferred_reader(str(store / "field02")) == PLUGIN
    assert get_preferred_reader(str(store.parent / "in")) is None  # nothing outside the store
    (layer,) = viewer.open(str(store / "field02"), plugin=None)  # no plugin named
    np.testing.assert_allclose(layer.scale, (PIXEL_UM, PIXEL_UM))
    assert "field02" in layer.name and layer.metadata["batch"]["position"] == "field02"
    np.testing.assert_array_equal(
        np.asarray(layer.data), BatchStore(store).read_position("field02")
    )
    assert len(viewer.open(str(store), plugin=None)) == len(POSITIONS)  # the root too


def test_a_store_preferred_after_its_run_opens_at_the_first_try(viewer, store):
    """:func:`prefer_store` (what a script calls after a run) makes the first open direct."""
    assert prefer_store(store)
    layers = viewer.open(str(store), plugin=None)
    assert [layer.metadata["batch"]["position"] for layer in layers] == POSITIONS


def test_a_store_written_by_the_command_opens_at_the_first_try(viewer, tmp_path, capsys):
    """``napari-gpuscope run`` saves the preference for its store: the very first
    ``napari OUT.zarr`` asks nothing and opens at the true scale; a dry run saves nothing."""
    from napari.plugins.utils import get_preferred_reader

    from napari_gpuscope.cli import main

    _write_inputs(tmp_path / "in", 2)
    recipe = Recipe.from_defaults("tv", strength=1.0).save(tmp_path / "tv.yaml")
    out = tmp_path / "out.zarr"
    argv = ["run", str(recipe), str(tmp_path / "in" / "*.tif"), "--out", str(out)]
    assert main([*argv, "--device", "cpu", "--dry-run"]) == 0
    assert get_preferred_reader(str(out)) is None

    assert main([*argv, "--device", "cpu", "--workers", "1", "--no-progress"]) == 0

    assert f"napari {out} opens it with napari-gpuscope" in capsys.readouterr().out
    layers = viewer.open(str(out), plugin=None)
    assert [layer.metadata["batch"]["position"] for layer in layers] == POSITIONS[:2]
    np.testing.assert_allclose(layers[0].scale, (PIXEL_UM, PIXEL_UM))
    assert get_preferred_reader(str(tmp_path / "in")) is None  # nothing outside the store


def test_a_users_choice_of_another_reader_for_the_store_is_kept(viewer, store, settings):
    pattern = store_pattern(store)
    settings.plugins.extension2reader = {pattern: "napari"}
    assert not prefer_store(store)
    assert settings.plugins.extension2reader == {pattern: "napari"}
    open_store(str(store))  # opened with this reader on request: still no override
    assert settings.plugins.extension2reader == {pattern: "napari"}


def test_the_root_opens_every_position_named_by_it_at_its_true_scale(viewer, store):
    assert get_reader(str(store)) is open_store
    layers = viewer.open(str(store), plugin=PLUGIN)
    assert len(layers) == len(POSITIONS)
    written = BatchStore(store)
    for layer, position in zip(layers, POSITIONS, strict=True):
        assert position in layer.name
        np.testing.assert_allclose(layer.scale, (PIXEL_UM, PIXEL_UM))
        np.testing.assert_array_equal(np.asarray(layer.data), written.read_position(position))
    # The fields of view lie at the same coordinates: the first shows, the others wait.
    assert [layer.visible for layer in layers] == [True, False, False]


def test_a_store_of_too_many_positions_opens_none_and_lists_them(viewer, store, monkeypatch):
    monkeypatch.setattr(reader_store, "MAX_POSITIONS", 2)
    with pytest.raises(TooManyPositions) as refused:
        read_store(str(store))
    message = str(refused.value)
    assert all(position in message for position in POSITIONS)
    assert f"napari {store / POSITIONS[0]}" in message
    assert get_reader(str(store)) is open_store  # claiming it never raises
    with pytest.raises(ValueError, match="field02"):  # napari's error carries the list
        viewer.open(str(store), plugin=PLUGIN)
    assert len(viewer.layers) == 0


def test_a_damaged_position_is_named_and_the_others_open(store, tmp_path):
    copy = tmp_path / "out.zarr"
    shutil.copytree(store, copy)
    shutil.rmtree(copy / "field01" / "0")  # its only image: nothing of it is readable
    with pytest.warns(UserWarning, match="position 'field01' not opened"):
        layers = read_store(str(copy))
    assert [kwargs["name"] for _, kwargs, _ in layers] == [
        kwargs["name"] for _, kwargs, _ in read_store(str(store)) if "field01" not in kwargs["name"]
    ]


def test_a_staging_folder_and_other_folders_are_no_positions(store, tmp_path):
    copy = tmp_path / "out.zarr"
    shutil.copytree(store, copy)
    shutil.copytree(copy / "field00", copy / ".writing-1@host@abc-field00")  # a torn write
    (copy / "notes").mkdir()
    (copy / "notes" / "zarr.json").write_text(json.dumps({"node_type": "group"}))
    opened = {kwargs["metadata"]["batch"]["position"] for _, kwargs, _ in read_store(str(copy))}
    assert opened == set(POSITIONS)
    assert get_reader(str(copy / "notes")) is None
    assert get_reader(str(tmp_path)) is None  # the folder holding a store: no store


def test_a_file_is_not_offered_to_this_reader(viewer, store):
    """No file is a batch store: a TIFF opens with napari's builtins without a reader choice
    (the manifest's former ``filename_patterns: ["*"]`` made napari ask for every file)."""
    tiff = store.parent / "in" / "field00.tif"
    assert PLUGIN not in _readers(tiff)
    (layer,) = viewer.open(str(tiff), plugin=None)
    np.testing.assert_array_equal(np.asarray(layer.data), tifffile.imread(tiff))


def test_napari_s_reader_hook_never_raises(store, tmp_path):
    (tmp_path / "file.zarr").write_text("not a folder")
    (tmp_path / "empty.zarr").mkdir()
    (tmp_path / "empty.zarr" / "zarr.json").write_text("[]")
    for path in (
        str(tmp_path / "file.zarr"),
        str(tmp_path / "empty.zarr"),
        str(tmp_path / "missing.zarr"),
        [str(store), str(store)],  # a stack: not a store
        123,
    ):
        assert get_reader(path) is None
    assert get_reader([str(store)]) is open_store
