"""The flat-field dock is the fit job (issue 25 item 2): its dark-frame layer, its background
mask ("Fit on") and its independent axis are what a recipe saved from it carries, and
``napari-gpuscope run`` of that recipe fits exactly the dock's profile."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from dock_helpers import open_dock, select_input

from napari_gpuscope.compute.flatfield import BasicParams, batch_hooks, fit_basic
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.sample_data._shading import shaded_tiles
from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    return open_dock(FlatfieldDock, viewer, qtbot)


def _run(dock, qtbot):
    assert dock.run(), dock.panel.status.text()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=240_000)
    assert dock.profile is not None, dock.panel.status.text()
    return dock.profile


def test_a_recipe_saved_from_the_dock_runs_its_dark_frame_and_mask(viewer, dock, qtbot, tmp_path):
    from napari_gpuscope.batch.recipes import load_recipe
    from napari_gpuscope.cli import main

    truth = shaded_tiles(32, (128, 128), seed=6, dark_offset=100.0)
    tiles = truth.images.astype(np.float32)
    yy, xx = np.mgrid[:128, :128]
    disc = (yy - 42) ** 2 + (xx - 85) ** 2 < 25**2
    tiles[:, disc] += 0.5 * tiles.mean()  # an object in every tile, masked out below
    mask = (~disc).astype(np.uint8)
    dark = truth.darkfield.astype(np.float32)
    viewer.add_image(tiles, name="tiles")
    viewer.add_image(dark, name="dark")
    viewer.add_labels(mask, name="background")
    select_input(dock, "tiles")
    dock.reset_choices()
    dock.dark_frame.value = viewer.layers["dark"]
    dock.fit_mask.value = viewer.layers["background"]
    profile = _run(dock, qtbot)
    params = dock.params()
    # The dock runs the registry's fit job with these inputs: the direct call, byte for byte.
    direct = fit_basic(tiles, params, dark_frame=dark, fitting_weight=mask, device="cpu")
    assert profile.flatfield.tobytes() == direct.flatfield.tobytes()
    assert profile.darkfield.tobytes() == direct.darkfield.tobytes()
    assert profile.darkfield_source == "frame"

    # Saved from the dock, the recipe carries both layers as artifacts beside it.
    folder = tmp_path / "recipe"
    folder.mkdir()
    path = dock.recipe_row.save(folder / "flat.yaml")
    assert path is not None, dock.panel.status.text()
    recipe = load_recipe(path)
    assert {a.name: a.path for a in recipe.artifacts} == {
        "dark_frame": "flat.dark_frame.tif",
        "fitting_weight": "flat.fitting_weight.tif",
    }
    assert recipe.check_artifacts(folder) == []
    assert np.array_equal(tifffile.imread(folder / "flat.fitting_weight.tif"), mask)
    artifacts = {a.name: folder / a.path for a in recipe.artifacts}
    readers = [lambda t=t: t for t in tiles]
    prepared = batch_hooks.prepare(
        recipe.params_model(), readers, device="cpu", artifacts=artifacts
    )
    assert prepared.flatfield.tobytes() == profile.flatfield.tobytes()
    assert prepared.darkfield.tobytes() == profile.darkfield.tobytes()

    # napari-gpuscope run: every position corrected with the dock's profile, byte for byte.
    (tmp_path / "in").mkdir()
    for index, tile in enumerate(tiles):
        tifffile.imwrite(tmp_path / "in" / f"tile{index:02d}.tif", tile)
    out = tmp_path / "out.zarr"
    argv = ["run", str(path), str(tmp_path / "in" / "*.tif"), "--out", str(out)]
    assert main([*argv, "--device", "cpu", "--workers", "1"]) == 0
    import zarr

    for index in (0, 17, 31):
        written = np.asarray(zarr.open_array(str(out / f"tile{index:02d}" / "0"), mode="r"))
        expected = run_job(
            batch_hooks.job(tiles[index], params, prepared=profile, device="cpu", cache_key="")
        ).image
        assert written.reshape(expected.shape).tobytes() == expected.tobytes()


def test_the_independent_axis_is_a_parameter_of_the_dock_and_its_recipes(
    viewer, dock, qtbot, tmp_path
):
    from napari_gpuscope.batch.recipes import load_recipe

    truth = shaded_tiles(8, (64, 64), seed=7)
    stack = np.stack([truth.images, 3 * truth.images]).astype(np.float32)  # (C, T, Y, X)
    viewer.add_image(stack, name="channels")
    select_input(dock, "channels")
    dock.set_param("working_size", 64)
    dock.set_param("batch_axis", 0)
    assert dock.params().batch_axis == 0
    profile = _run(dock, qtbot)
    direct = fit_basic(stack, BasicParams(working_size=64, batch_axis=0), device="cpu")
    assert profile.flatfield.shape == (2, 64, 64) and profile.batch_axis == 0
    assert profile.flatfield.tobytes() == direct.flatfield.tobytes()

    path = dock.recipe_row.save(tmp_path / "axis.yaml")
    assert load_recipe(path).params["batch_axis"] == 0
    dock.reset_to_defaults()
    assert dock.params().batch_axis is None  # the form shows "none" at its minimum
    dock.recipe_row.load(path)
    assert dock.params().batch_axis == 0


def test_a_mask_of_the_wrong_shape_names_the_layer_and_the_valid_shapes(viewer, dock, qtbot):
    truth = shaded_tiles(6, (64, 64), seed=8)
    viewer.add_image(truth.images, name="tiles")
    viewer.add_labels(np.ones((32, 64), np.uint8), name="small")
    select_input(dock, "tiles")
    dock.reset_choices()
    dock.fit_mask.value = viewer.layers["small"]
    with pytest.raises(ValueError) as info:
        dock.make_job(viewer.layers["tiles"], dock.params(), "cpu")
    assert str(info.value) == (
        "mask layer 'small' (Fit on) has shape (32, 64); a mask must be (Y, X) = (64, 64) (one "
        "mask for every image) or the images' shape (6, 64, 64)"
    )


def test_a_dark_frame_is_not_an_input_while_the_darkfield_is_estimated(viewer, dock):
    # Its row is disabled then: neither the run nor a saved recipe takes the layer (a recipe
    # with both is refused: tests/batch/test_batch_flatfield_inputs.py).
    viewer.add_image(np.zeros((8, 8), np.float32), name="dark")
    dock.reset_choices()
    dock.dark_frame.value = viewer.layers["dark"]
    assert set(dock.recipe_artifacts()) == {"dark_frame"}
    dock.set_param("get_darkfield", True)
    assert not dock.dark_frame.enabled and dock.recipe_artifacts() == {}
