"""The flat-field (BaSiC) dock on the CPU test device: fit, live flatfield, apply, save/load."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute.flatfield import ShadingProfile, correct, fit_basic
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.sample_data._shading import shaded_tiles
from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    widget = FlatfieldDock(viewer)
    qtbot.addWidget(widget)
    qtbot.waitUntil(lambda: not widget.is_running(), timeout=10_000)
    return widget


def _select(dock, name):
    dock.reset_choices()
    dock.input_layer = next(c for c in dock.input.combo.choices if c.name == name)


def test_fit_streams_flatfield_and_apply_corrects(viewer, dock, qtbot, tmp_path):
    truth = shaded_tiles(24, (64, 64), seed=0, dark_offset=100.0)
    viewer.add_image(truth.images, name="tiles")
    viewer.add_image(truth.darkfield, name="dark")
    _select(dock, "tiles")
    dock.set_param("working_size", 64)
    dock.reset_choices()
    dock.dark_frame.value = viewer.layers["dark"]
    seen = []
    dock.runner.progressed.connect(
        lambda update: seen.append(update.step) if "flatfield" in update.outputs else None
    )
    dock.also_apply.setChecked(False)  # fit only: Apply below corrects
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    assert not any(ly.name.startswith("flat-field corrected") for ly in viewer.layers)
    assert len(seen) >= 2  # the flatfield arrived after every reweighting pass
    flat_layer = next(layer for layer in viewer.layers if layer.name.startswith("flatfield · "))
    expected = fit_basic(truth.images, dark_frame=truth.darkfield, working_size=64, device="cpu")
    np.testing.assert_allclose(flat_layer.data, expected.flatfield, atol=1e-5)
    record = flat_layer.metadata[PROVENANCE_KEY]
    assert record["method"] == "flatfield" and record["result"]["darkfield_source"] == "frame"
    assert "Converged" in dock.panel.status.text()
    assert dock.profile is not None and dock.apply_panel.apply_button.isEnabled()

    panel = dock.apply_panel
    panel.target.layer = viewer.layers["tiles"]
    assert panel.apply()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    corrected = viewer.layers["flat-field corrected · tiles"]
    np.testing.assert_allclose(
        corrected.data, correct(truth.images, expected, device="cpu"), rtol=1e-5, atol=1e-3
    )
    assert "CV" in panel.status.text() and not panel.figure.isHidden()
    # Displayed from its percentiles, not min-max (a few outliers made the tiles nearly black).
    np.testing.assert_allclose(
        corrected.contrast_limits, np.percentile(corrected.data, (0.5, 99.5)), rtol=1e-6
    )
    assert (
        corrected.metadata[PROVENANCE_KEY]["result"]["shading_cv_after"]
        < (corrected.metadata[PROVENANCE_KEY]["result"]["shading_cv_before"])
    )

    panel.save(str(tmp_path / "scope.tif"))
    loaded = ShadingProfile.load(tmp_path / "scope.tif")
    np.testing.assert_array_equal(loaded.flatfield, dock.profile.flatfield)
    panel.load(str(tmp_path / "scope.json"))
    assert "loaded from" in panel.profile_label.text()


def test_timelapse_apply_and_bad_input(viewer, dock, qtbot):
    viewer.add_image(np.ones((1, 32, 32), np.float32), name="one")
    _select(dock, "one")
    assert not dock.run()
    assert "at least 2" in dock.panel.status.text() or "2" in dock.panel.status.text()
    truth = shaded_tiles(12, (32, 32), seed=2)
    movie = truth.images * np.linspace(1.0, 0.5, 12)[:, None, None]
    viewer.add_image(movie.astype(np.float32), name="movie")
    dock.apply_panel.set_profile(ShadingProfile.from_arrays(truth.flatfield), "given")
    dock.apply_panel.target.layer = viewer.layers["movie"]
    dock.apply_panel.timelapse.value = True
    assert dock.apply_panel.apply()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    out = viewer.layers["flat-field corrected · movie"].data
    np.testing.assert_array_equal(viewer.layers["movie"].data, movie.astype(np.float32))
    profile = dock.apply_panel.profile
    np.testing.assert_allclose(
        out, correct(movie.astype(np.float32), profile, timelapse=True, device="cpu"), atol=1e-3
    )


def test_autotune_button_sets_the_smoothness(viewer, dock, qtbot):
    truth = shaded_tiles(20, (48, 48), seed=3)
    viewer.add_image(truth.images, name="tiles")
    _select(dock, "tiles")
    assert dock.autotune()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    chosen = dock.form.value("smoothness_flatfield")
    assert chosen is not None and chosen > 0, dock.autotune_status.text()
    assert "autotune chose" in dock.autotune_status.text().lower()
    assert dock.apply_panel.profile is dock.profile


def test_apply_options_are_parameters_and_apply_gives_what_batch_gives(
    viewer, dock, qtbot, tmp_path
):
    # The Apply panel shows the apply fields of BasicParams; they are the dock's parameters
    # (settings, recipes: their fit-form rows are hidden), and a batch job with those
    # parameters writes exactly the image Apply adds.
    from napari_gpuscope.batch.recipes import load_recipe
    from napari_gpuscope.compute.flatfield import APPLY_FIELDS, batch_hooks
    from napari_gpuscope.compute.jobs import run_job

    truth = shaded_tiles(6, (32, 32), seed=5, dark_offset=100.0)
    tiles = np.clip(np.round(truth.images), 0, 65535).astype(np.uint16)
    viewer.add_image(tiles, name="tiles")
    profile = ShadingProfile.from_arrays(truth.flatfield, camera_offset=250.0)  # some < 0
    panel = dock.apply_panel
    panel.set_profile(profile, "given")
    panel.target.layer = viewer.layers["tiles"]
    panel.dtype.value = "uint16"
    panel.clip.value = True
    assert all(dock.form.widgets[name].native.isHidden() for name in APPLY_FIELDS)
    params = dock.params()
    assert (params.output_dtype, params.clip_negative, params.timelapse_baseline) == (
        "uint16",
        True,
        False,
    )
    assert panel.apply()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    corrected = viewer.layers["flat-field corrected · tiles"]
    batch = run_job(batch_hooks.job(tiles, params, prepared=profile, device="cpu", cache_key=""))
    assert corrected.data.dtype == np.uint16 and (tiles < 250).any()
    assert corrected.data.tobytes() == batch.image.tobytes()
    record = corrected.metadata[PROVENANCE_KEY]
    assert record["parameters"] == {
        "timelapse_baseline": False,
        "clip_negative": True,
        "output_dtype": "uint16",
    }
    assert record["result"]["profile"] == profile.summary()

    # A recipe saved from the dock carries them; reset and load bring them back to the panel.
    path = dock.recipe_row.save(tmp_path / "flat.yaml")
    assert load_recipe(path).params["output_dtype"] == "uint16"
    dock.reset_to_defaults()
    assert panel.dtype.value == "float32" and not panel.clip.value
    dock.recipe_row.load(path)
    assert panel.dtype.value == "uint16" and panel.clip.value
    assert "Not set" not in dock.panel.status.text()


def test_fit_apply_and_autotune_share_the_dock_runner(viewer, dock, qtbot):
    truth = shaded_tiles(24, (64, 64), seed=0)
    viewer.add_image(truth.images, name="tiles")
    _select(dock, "tiles")
    dock.set_param("working_size", 64)
    panel = dock.apply_panel
    panel.set_profile(ShadingProfile.from_arrays(truth.flatfield), "given")
    panel.target.layer = viewer.layers["tiles"]

    assert dock.run()  # the fit holds the device: nothing starts beside it
    assert panel.apply() is False
    assert "Flat-field (BaSiC) is running on 'tiles'; start the apply" in panel.status.text()
    assert dock.autotune() is False and "start the autotune" in dock.autotune_status.text()
    dock.cancel()

    assert panel.apply()  # and the other way round
    assert not panel.apply_button.isEnabled() and panel.cancel_button.isEnabled()
    assert dock.run() is False
    assert dock.panel.status.text().startswith("The flat-field correction is running on 'tiles'")
    assert dock.autotune() is False
    panel.cancel_button.click()
    assert not dock.is_running() and panel.apply_button.isEnabled()
