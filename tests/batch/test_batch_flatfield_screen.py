"""Flat-field fit mode checks every position before the fit (issue 17, item 1): a NaN pixel, a
corrupt TIFF or a wrong-shaped file costs its own position only, failed with a reason naming
the file; the others equal a run without the bad files, and the run exits 1."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


def test_bad_positions_are_left_out_of_the_fit_and_the_others_are_unchanged(tmp_path, client):
    from napari_gpuscope.sample_data._shading import shaded_tiles

    tiles = shaded_tiles(6, (48, 56), seed=3).images
    good, mixed = tmp_path / "good", tmp_path / "mixed"
    for folder in (good, mixed):
        folder.mkdir()
        for index, tile in enumerate(tiles):
            tifffile.imwrite(folder / f"tile{index}.tif", tile)
    nan = tiles[0].astype(np.float32)
    nan[10, 20] = np.nan
    tifffile.imwrite(mixed / "tile_nan.tif", nan)
    tifffile.imwrite(mixed / "tile_small.tif", tiles[1][:40])
    whole = (good / "tile2.tif").read_bytes()
    (mixed / "tile_cut.tif").write_bytes(whole[: len(whole) // 2])  # a truncated TIFF

    recipe = Recipe.from_defaults("flatfield")
    clean = run_batch(recipe, discover(str(good / "*.tif")), tmp_path / "clean.zarr", client)
    report = run_batch(recipe, discover(str(mixed / "*.tif")), tmp_path / "mixed.zarr", client)

    assert clean.failed == {} and clean.exit_code == 0
    assert sorted(report.failed) == ["tile_cut", "tile_nan", "tile_small"]
    assert report.exit_code == 1
    reasons = report.failed
    assert reasons["tile_nan"] == (
        f"left out of the fit: {mixed / 'tile_nan.tif'}: contains 1 NaN or infinite pixel(s) "
        "(first at (10, 20))"
    )
    assert reasons["tile_small"].startswith(f"left out of the fit: {mixed / 'tile_small.tif'}: ")
    assert "shape (40, 56), most positions have (48, 56)" in reasons["tile_small"]
    assert reasons["tile_cut"].startswith(f"left out of the fit: {mixed / 'tile_cut.tif'}: ")
    assert "unreadable" in reasons["tile_cut"]
    assert sorted(report.done) == sorted(clean.done)
    for name in clean.done:
        expected = BatchStore(tmp_path / "clean.zarr").read_position(name)
        actual = BatchStore(tmp_path / "mixed.zarr").read_position(name)
        assert actual.tobytes() == expected.tobytes(), name
    store = BatchStore(tmp_path / "mixed.zarr")
    assert store.failed_record("tile_nan")["reason"] == reasons["tile_nan"]
    assert not (tmp_path / "mixed.zarr" / "tile_nan").exists()


def test_a_resumed_fit_uses_every_position_as_the_first_run_did(tmp_path, client):
    from napari_gpuscope.sample_data._shading import shaded_tiles

    folder = tmp_path / "in"
    folder.mkdir()
    for index, tile in enumerate(shaded_tiles(6, (48, 56), seed=4).images):
        tifffile.imwrite(folder / f"tile{index}.tif", tile)
    recipe = Recipe.from_defaults("flatfield")
    positions = discover(str(folder / "*.tif"))
    out = tmp_path / "out.zarr"
    store = BatchStore(out)
    assert run_batch(recipe, positions, out, client).exit_code == 0
    before = store.read_position("tile3")
    (store.markers / "done" / "tile3.json").unlink()  # as if killed before its marker

    again = run_batch(recipe, positions, out, client, resume=True)

    assert again.done == ["tile3"] and len(again.skipped) == 5
    # The profile was fitted on all six positions again, not on the one left to compute.
    assert store.read_position("tile3").tobytes() == before.tobytes()
