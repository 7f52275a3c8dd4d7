"""The flat-field dock's side panels are their recipes (issue 25 item 2): after Autotune, Run
and the recipe saved then fit the autotune's profile, Run also corrects the input with it (fit
and apply, issue 30 item 5), and ``napari-gpuscope run`` corrects every position with it as
the dock corrected its tiles; the Apply panel's "Save recipe..." saves what Apply did (the apply job
with the profile beside it as its artifact), and the run writes Apply's result byte for byte
with the same measurements in the position's attributes.

Sizes: 12 tiles of 32 x 32 (the autotune fits 17 smoothness values at once; a few seconds on
the CPU), a 10-frame 32 x 32 movie corrected by Apply.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tifffile
from dock_helpers import open_dock, select_input
from recipe_helpers import measured, position, run_recipe, same_bytes

from napari_gpuscope.batch.recipes import load_recipe
from napari_gpuscope.compute.flatfield import ShadingProfile, batch_hooks, iter_apply_profile
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.sample_data._shading import shaded_tiles
from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock

SHADING = {"shading_cv_before", "shading_cv_after"}
"""What Apply measures of the shading before and after."""


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    return open_dock(FlatfieldDock, viewer, qtbot)


def _json(facts):
    """As a position's attributes hold it (JSON: tuples become lists)."""
    return json.loads(json.dumps(facts))


def _fit(dock, qtbot) -> ShadingProfile:
    assert dock.run(), dock.panel.status.text()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=240_000)
    assert dock.profile is not None, dock.panel.status.text()
    return dock.profile


def test_autotuned_parameters_run_and_their_recipe_fit_the_autotunes_profile(
    viewer, dock, qtbot, tmp_path, client
):
    truth = shaded_tiles(12, (32, 32), seed=9, dark_offset=50.0)
    tiles = truth.images.astype(np.float32)
    viewer.add_image(tiles, name="tiles")
    viewer.add_image(truth.darkfield.astype(np.float32), name="dark")
    select_input(dock, "tiles")
    dock.set_param("working_size", 32)
    dock.reset_choices()
    dock.dark_frame.value = viewer.layers["dark"]  # the run's input: the autotune takes it too
    assert dock.autotune(), dock.autotune_status.text()
    qtbot.waitUntil(lambda: not dock.tuning, timeout=240_000)
    tuned = dock.profile
    assert tuned is not None, dock.autotune_status.text()
    assert "Autotune chose smoothness" in dock.autotune_status.text()
    chosen = dock.params().smoothness_flatfield
    assert chosen is not None and tuned.smoothness_flatfield == (chosen,)
    assert tuned.darkfield_source == "frame"

    assert dock.also_apply.isChecked()  # fit and apply, the dock's default
    profile = _fit(dock, qtbot)  # Run with the autotuned parameters: the autotune's profile
    assert profile.flatfield.tobytes() == tuned.flatfield.tobytes()
    assert profile.darkfield.tobytes() == tuned.darkfield.tobytes()
    flat_layer = next(ly for ly in viewer.layers if ly.name.startswith("flatfield · tiles"))
    shown = flat_layer.metadata[PROVENANCE_KEY]["result"]  # the fit's layers' facts
    # ... and the input corrected with it: the apply job on the fitted profile, byte for byte.
    corrected = viewer.layers["flat-field corrected · tiles"]
    direct = run_job(iter_apply_profile(tiles, profile, dock.params(), device="cpu")).image
    same_bytes(np.asarray(corrected.data), direct)
    assert "Then corrected 12 images" in dock.panel.status.text()

    folder = tmp_path / "recipe"
    folder.mkdir()
    path = dock.recipe_row.save(folder / "tuned.yaml")
    recipe = load_recipe(path)
    assert recipe.params["smoothness_flatfield"] == chosen
    assert [a.name for a in recipe.artifacts] == ["dark_frame"]
    (tmp_path / "in").mkdir()
    for index, tile in enumerate(tiles):
        tifffile.imwrite(tmp_path / "in" / f"tile{index:02d}.tif", tile)
    out = tmp_path / "out.zarr"
    run_recipe(path, tmp_path / "in" / "*.tif", out, client)
    params = recipe.params_model()
    for index in (0, 5, 11):
        image, _, attrs = position(out, f"tile{index:02d}")
        expected = run_job(
            batch_hooks.job(tiles[index], params, prepared=profile, device="cpu", cache_key="")
        ).image
        same_bytes(image.reshape(expected.shape), expected)
        # The position is the dock's corrected tile (fit and apply = the recipe's run).
        same_bytes(image.reshape(tiles[index].shape), np.asarray(corrected.data[index]))
        # The profile the run fitted is the dock's: the same facts in every position.
        assert attrs["provenance"]["result"]["profile"] == _json(profile.summary())
    assert shown == _json(profile.summary())


def test_the_apply_panels_recipe_runs_what_apply_did(viewer, dock, qtbot, tmp_path, client):
    truth = shaded_tiles(12, (32, 32), seed=11)
    viewer.add_image(truth.images.astype(np.float32), name="tiles")
    select_input(dock, "tiles")
    dock.set_param("working_size", 32)
    profile = _fit(dock, qtbot)
    # Another acquisition with the same shading: a 10-frame movie, corrected by Apply.
    movie = shaded_tiles(10, (32, 32), seed=12).images.astype(np.uint16)
    source = tmp_path / "movie.tif"
    tifffile.imwrite(source, movie, imagej=True, metadata={"axes": "TYX"})
    viewer.add_image(movie, name="movie")
    panel = dock.apply_panel
    panel.target.layer = viewer.layers["movie"]
    panel.dtype.value = "same"
    panel.clip.value = True
    assert panel.apply(), panel.status.text()
    qtbot.waitUntil(lambda: not panel.running, timeout=120_000)
    corrected = viewer.layers[-1]
    assert corrected.name.startswith("flat-field corrected · movie"), panel.status.text()
    shown = corrected.metadata[PROVENANCE_KEY]["result"]

    folder = tmp_path / "recipe"
    folder.mkdir()
    path = panel.save_recipe(folder / "apply.yaml")
    assert path is not None, panel.status.text()
    recipe = load_recipe(path)
    assert recipe.job == "apply"
    assert (recipe.params["output_dtype"], recipe.params["clip_negative"]) == ("same", True)
    (artifact,) = recipe.artifacts
    assert (artifact.name, artifact.path) == ("profile", "apply-profile.tif")
    assert [f.path for f in artifact.files] == ["apply-profile.json"]
    assert recipe.check_artifacts(folder) == []
    saved = ShadingProfile.load(folder / "apply-profile.tif")
    assert saved.flatfield.tobytes() == profile.flatfield.tobytes()
    assert saved.darkfield.tobytes() == profile.darkfield.tobytes()
    assert recipe.input.ndim == 3 and recipe.input.dtype == "uint16"

    out = tmp_path / "out.zarr"
    run_recipe(path, source, out, client)
    image, _, attrs = position(out, "movie")
    same_bytes(image, corrected.data)
    written = measured(attrs["provenance"]["result"])
    # Every fact, the shading left before and after included: batch measures it as Apply does.
    assert set(written) >= SHADING
    assert written == measured(shown)
    assert written["profile"] == _json(profile.summary())


def test_apply_corrects_a_4d_layer_along_the_axis_its_profile_was_fitted_on(viewer, dock, qtbot):
    """A (C, T, Y, X) layer fitted with the independent axis 0 is applied with it: before, the
    panel passed no axis and the apply job refused the 4D layer it had just been fitted on."""
    from napari_gpuscope.compute.flatfield import iter_apply_profile

    truth = shaded_tiles(8, (32, 32), seed=13)
    stack = np.stack([truth.images, 3 * truth.images]).astype(np.float32)  # (C, T, Y, X)
    viewer.add_image(stack, name="channels")
    select_input(dock, "channels")
    dock.set_param("working_size", 32)
    dock.set_param("batch_axis", 0)
    profile = _fit(dock, qtbot)
    assert profile.batch_axis == 0 and profile.flatfield.shape == (2, 32, 32)
    panel = dock.apply_panel
    assert panel.target.layer == viewer.layers["channels"]  # the fitted layer, by default
    assert panel.apply(), panel.status.text()
    qtbot.waitUntil(lambda: not panel.running, timeout=120_000)
    corrected = viewer.layers[-1]
    assert corrected.name.startswith("flat-field corrected · channels"), panel.status.text()
    direct = run_job(
        iter_apply_profile(stack, profile, panel.params(), batch_axis=0, device="cpu")
    ).image
    same_bytes(np.asarray(corrected.data), direct)


def test_autotune_with_a_fit_on_mask_gives_the_profile_run_fits(viewer, dock, qtbot):
    """The autotune takes the "Fit on" mask as Run does: Run after Autotune fits the autotune's
    profile byte for byte (before, the autotune fitted every pixel and said Run would differ)."""
    truth = shaded_tiles(12, (32, 32), seed=19)
    viewer.add_image(truth.images.astype(np.float32), name="tiles")
    mask = np.ones((32, 32), np.uint8)
    mask[8:16, 20:28] = 0  # leave a patch out of the fit
    viewer.add_labels(mask, name="background")
    select_input(dock, "tiles")
    dock.set_param("working_size", 32)
    dock.reset_choices()
    dock.fit_mask.value = viewer.layers["background"]
    assert dock.autotune(), dock.autotune_status.text()
    qtbot.waitUntil(lambda: not dock.tuning, timeout=240_000)
    tuned = dock.profile
    assert tuned is not None, dock.autotune_status.text()
    assert "differs" not in dock.autotune_status.text()
    profile = _fit(dock, qtbot)
    assert profile.flatfield.tobytes() == tuned.flatfield.tobytes()
