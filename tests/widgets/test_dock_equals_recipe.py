"""The dock is the job: a recipe saved from a dock and run by ``napari-gpuscope run`` writes the
dock's result byte for byte, with the same measurements in the position's attributes (issue 25
item 2).

Each test runs the dock on the CPU test device, saves its recipe (the Recipe row's Save...),
writes the input layer as an ImageJ TIFF and runs the real command line on it (on the
module's in-process Dask cluster, so no worker process is spawned); the oracle is the dock's
own result layers and provenance. Sizes are realistic but CPU-affordable: a 60-frame 48 x 48
blinking stack (eSRRF), a 9-slice 64 x 64 brightfield stack (phase), a 128 x 128 noisy image
(TV). The side panels: eSRRF's drift (a trace estimated, or loaded from a file and carried as
the recipe's drift_trace artifact) and sweep (a cell picked), phase's "Estimate tilt"; the
flat-field panels are in test_flatfield_panels_equal_recipe.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from dock_helpers import open_dock, select_input
from recipe_helpers import measured as _measured
from recipe_helpers import position as _position
from recipe_helpers import run_recipe as _run_recipe
from recipe_helpers import same_bytes as _same_bytes

from napari_gpuscope.batch.recipes import load_recipe
from napari_gpuscope.cli import main
from napari_gpuscope.provenance import PROVENANCE_KEY


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


def _blinking(frames: int = 60, side: int = 48) -> np.ndarray:
    """Blinking emitters on two lines and scattered points, drifting by a smooth sub-pixel
    path (Gaussian PSF sigma 1.3 px, ~30 % on per frame, Poisson noise), uint16 ADU."""
    return _drifting(frames, side)[0]


def _drifting(frames: int = 60, side: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_blinking`'s stack and its true drift, (dy, dx) per frame in pixels."""
    rng = np.random.default_rng(3)
    s = np.linspace(0, 1, 60)
    points = np.concatenate(
        [
            np.stack([8 + 30 * s, 10 + 26 * s], 1),
            np.stack([38 - 28 * s, 8 + 32 * s], 1),
            rng.uniform(10, side - 10, size=(30, 2)),
        ]
    )
    t = np.arange(frames) / (frames - 1)
    drift = np.stack([1.6 * t + 0.4 * np.sin(3 * t), -2.2 * t**2 + 0.3 * t], axis=1)
    y, x = np.mgrid[:side, :side].astype(np.float64)
    stack = np.empty((frames, side, side), np.uint16)
    for k, (dy, dx) in enumerate(drift):
        image = np.zeros((side, side))
        for py, px in points[rng.random(len(points)) < 0.3] + (dy, dx):
            image += 300 * np.exp(-((y - py) ** 2 + (x - px) ** 2) / (2 * 1.3**2))
        stack[k] = rng.poisson(image + 20)
    return stack, drift - drift[0]


def test_esrrf_dock_with_an_estimated_trace_and_its_resolution_equals_its_recipe(
    viewer, qtbot, cpu_device, tmp_path, client
):
    from napari_gpuscope.compute.esrrf import load_drift_trace
    from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

    stack = _blinking()
    source = tmp_path / "drifting.tif"
    tifffile.imwrite(
        source, stack, imagej=True, resolution=(10, 10), metadata={"unit": "um", "axes": "TYX"}
    )
    viewer.add_image(stack, name="drifting", scale=(1.0, 0.1, 0.1))
    dock = open_dock(EsrrfDock, viewer, qtbot)
    select_input(dock, "drifting")
    dock.set_param("magnification", 2)
    dock.set_param("drift_time_averaging", 10)
    dock.drift.set_mode("estimate")
    assert dock.drift.estimate()  # the dock's "Estimate drift": the run then uses this trace
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    assert dock.drift.current_mode == "trace"
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
    sr, widefield, track = dock.last_results[:3]
    shown = sr.metadata[PROVENANCE_KEY]["result"]
    assert shown["params"]["measure_resolution"] is True  # the dock's default
    assert shown["decorrelation"]["esrrf"]["resolution_px"] > 0
    assert "decorrelation" in dock.panel.status.text()

    recipe_path = dock.recipe_row.save(tmp_path / "esrrf.yaml")
    recipe = load_recipe(recipe_path)
    assert recipe.params["drift_correction"] is True
    assert recipe.params["measure_resolution"] is True
    out = tmp_path / "out.zarr"
    _run_recipe(recipe_path, source, out, client)

    image, extra, attrs = _position(out, "drifting")
    _same_bytes(image, sr.data)
    _same_bytes(extra["widefield mean · drifting"], widefield.data)
    written = attrs["provenance"]["result"]
    assert _measured(written) == _measured(shown)  # decorrelation, drift trace, parameters
    assert written["decorrelation"] == shown["decorrelation"]
    assert written["drift"] == shown["drift"]  # the blocks and parameters of the estimate too
    trace = load_drift_trace(out / "drifting" / "drift.csv")
    _same_bytes(trace, np.asarray(shown["drift"]["shifts_px"]))
    np.testing.assert_allclose(track.data[:, 2:] - 23.5, trace, atol=1e-12)  # the drawn track


def test_esrrf_dock_with_a_loaded_trace_equals_its_recipe_which_carries_it(
    viewer, qtbot, cpu_device, tmp_path, client
):
    """A trace loaded from a file is the run job's drift_trace input: Save... writes it beside
    the recipe (a drift-trace CSV in input pixels, every float exact) and the batch run
    corrects the position with it, byte for byte as the dock did."""
    from napari_gpuscope.compute.esrrf import DriftResult, load_drift_trace
    from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

    stack, truth = _drifting()
    source = tmp_path / "drifting.tif"
    tifffile.imwrite(
        source, stack, imagej=True, resolution=(10, 10), metadata={"unit": "um", "axes": "TYX"}
    )
    # The trace as another tool saves it: in µm only, with its pixel size (0.1 µm).
    saved = DriftResult.from_shifts(truth).to_csv(tmp_path / "truth.csv", pixel_size=0.1)
    viewer.add_image(stack, name="drifting", scale=(1.0, 0.1, 0.1))
    dock = open_dock(EsrrfDock, viewer, qtbot)
    select_input(dock, "drifting")
    dock.set_param("magnification", 2)
    assert dock.drift.load(saved), dock.panel.status.text()
    assert dock.drift.current_mode == "trace"
    loaded = dock.drift.trace.shifts
    np.testing.assert_allclose(loaded, truth, rtol=0, atol=1e-12)  # µm read back in pixels
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
    sr, widefield = dock.last_results[:2]
    shown = sr.metadata[PROVENANCE_KEY]["result"]
    assert _same_trace(shown["drift"]["shifts_px"], loaded)

    folder = tmp_path / "recipe"
    folder.mkdir()
    recipe_path = dock.recipe_row.save(folder / "esrrf.yaml")
    status = dock.panel.status.text()
    assert "which a recipe does not carry" not in status
    assert "carries the drift trace loaded from truth.csv" in status
    recipe = load_recipe(recipe_path)
    assert recipe.params["drift_correction"] is True
    assert [(a.name, a.path) for a in recipe.artifacts] == [
        ("drift_trace", "esrrf.drift_trace.csv")
    ]
    assert recipe.check_artifacts(folder) == []
    carried = load_drift_trace(folder / "esrrf.drift_trace.csv")
    assert carried.tobytes() == loaded.tobytes()  # the run's input, exactly

    out = tmp_path / "out.zarr"
    _run_recipe(recipe_path, source, out, client)
    image, extra, attrs = _position(out, "drifting")
    _same_bytes(image, sr.data)
    _same_bytes(extra["widefield mean · drifting"], widefield.data)
    written = attrs["provenance"]["result"]
    assert _measured(written) == _measured(shown)  # decorrelation, drift trace, parameters
    assert written["drift"] == shown["drift"]
    assert load_drift_trace(out / "drifting" / "drift.csv").tobytes() == loaded.tobytes()


def _same_trace(written: list, trace: np.ndarray) -> bool:
    return np.asarray(written, np.float64).tobytes() == np.asarray(trace).tobytes()


def test_esrrf_dock_with_a_setting_picked_in_the_sweep_equals_its_recipe(
    viewer, qtbot, cpu_device, tmp_path, client
):
    """Parameter sweep: a cell clicked puts its radius and sensitivity into the dock; the run
    with them and the recipe saved then write the same image and measurements."""
    from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

    stack = _blinking(frames=40)
    source = tmp_path / "blinking.tif"
    tifffile.imwrite(source, stack, imagej=True, metadata={"axes": "TYX"})
    viewer.add_image(stack, name="blinking")
    dock = open_dock(EsrrfDock, viewer, qtbot)
    select_input(dock, "blinking")
    dock.set_param("magnification", 2)
    sweep = dock.sweep
    sweep.radii_edit.setText("1, 2.5")
    sweep.sensitivities_edit.setText("1, 3")
    sweep.frames_box.setValue(20)
    assert sweep.run(), sweep.status.text()
    qtbot.waitUntil(lambda: not sweep.running, timeout=180_000)
    assert sweep.result is not None, sweep.status.text()
    row, column = 1, 1  # sensitivity 3, radius 2.5: neither is the default
    sweep.apply_cell(row, column)
    params = dock.params()
    assert (params.radius, params.sensitivity) == (2.5, 3.0)
    assert np.isfinite(sweep.grids["rsp"][row, column])  # the cell was measured
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
    sr, widefield = dock.last_results[:2]
    shown = sr.metadata[PROVENANCE_KEY]["result"]
    assert (shown["params"]["radius"], shown["params"]["sensitivity"]) == (2.5, 3.0)

    recipe_path = dock.recipe_row.save(tmp_path / "picked.yaml")
    recipe = load_recipe(recipe_path)
    assert (recipe.params["radius"], recipe.params["sensitivity"]) == (2.5, 3.0)
    assert recipe.artifacts == []
    out = tmp_path / "out.zarr"
    _run_recipe(recipe_path, source, out, client)
    image, extra, attrs = _position(out, "blinking")
    _same_bytes(image, sr.data)
    _same_bytes(extra["widefield mean · blinking"], widefield.data)
    assert _measured(attrs["provenance"]["result"]) == _measured(shown)


def test_phase_dock_with_an_estimated_tilt_equals_its_recipe(
    viewer, qtbot, cpu_device, tmp_path, client
):
    from napari_gpuscope.compute import phase
    from napari_gpuscope.sample_data.phase import tilted_brightfield_stack
    from napari_gpuscope.widgets.phase.dock import PhaseDock

    data, kwargs, _ = tilted_brightfield_stack()[0]
    stack = np.ascontiguousarray(np.asarray(data)[:, :64, :64])
    source = tmp_path / "well.tif"
    tifffile.imwrite(source, stack, imagej=True, metadata={"axes": "ZYX"})
    viewer.add_image(stack, name="well", scale=kwargs["scale"], metadata=kwargs.get("metadata"))
    dock = open_dock(PhaseDock, viewer, qtbot)
    assert not hasattr(dock, "_optics")  # the optics are compute's, keyed by themselves
    select_input(dock, "well")
    dock.set_param("tilt_mode", "global")
    dock.set_param("optimizer", "newton")
    dock.set_param("iterations", 4)
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
    phase_layer = dock.last_results[0]
    absorption = next(ly for ly in dock.last_results if ly.name.startswith("absorption"))
    shown = phase_layer.metadata[PROVENANCE_KEY]["result"]
    assert shown["estimate"] is not None and shown["tilt_map"]["zenith_rad"][0][0] > 0.05

    recipe_path = dock.recipe_row.save(tmp_path / "phase.yaml")
    assert load_recipe(recipe_path).params["tilt_mode"] == "global"
    cache = phase.shared_cache("cpu")
    builds = dict(cache.builds)
    out = tmp_path / "out.zarr"
    _run_recipe(recipe_path, source, out, client)
    assert cache.builds == builds  # the batch task (same process) reused the dock's optics

    image, extra, attrs = _position(out, "well")
    _same_bytes(image, phase_layer.data)
    (written_absorption,) = (v for k, v in extra.items() if k.startswith("absorption"))
    _same_bytes(written_absorption, absorption.data)
    written = attrs["provenance"]["result"]
    assert _measured(written) == _measured(shown)
    assert written["tilt_map"] == shown["tilt_map"]  # the estimated tilt
    assert written["estimate"] == shown["estimate"]  # and its loss history


def test_phase_dock_after_estimate_tilt_equals_its_recipe(
    viewer, qtbot, cpu_device, tmp_path, client
):
    """The tilt panel: "Estimate tilt" (global) sets its estimate as the manual tilt; the run
    with it and the recipe saved then (tilt_mode manual, the estimate's angles) write the same
    images and tilt."""
    from napari_gpuscope.sample_data.phase import tilted_brightfield_stack
    from napari_gpuscope.widgets.phase.dock import PhaseDock

    data, kwargs, _ = tilted_brightfield_stack()[0]
    stack = np.ascontiguousarray(np.asarray(data)[:, :64, :64])
    source = tmp_path / "well.tif"
    tifffile.imwrite(source, stack, imagej=True, metadata={"axes": "ZYX"})
    viewer.add_image(stack, name="well", scale=kwargs["scale"], metadata=kwargs.get("metadata"))
    dock = open_dock(PhaseDock, viewer, qtbot)
    select_input(dock, "well")
    dock.set_param("tilt_mode", "global")
    dock.set_param("optimizer", "newton")
    dock.set_param("iterations", 4)
    assert dock.estimate_tilt(), dock.panel.status.text()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
    params = dock.params()
    assert params.tilt_mode == "manual", dock.panel.status.text()
    assert params.tilt_zenith > 0.05  # the sample's tilt, set as the manual one
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
    phase_layer = dock.last_results[0]
    absorption = next(ly for ly in dock.last_results if ly.name.startswith("absorption"))
    shown = phase_layer.metadata[PROVENANCE_KEY]["result"]
    assert shown["tilt_map"]["zenith_rad"][0][0] == pytest.approx(params.tilt_zenith)

    recipe_path = dock.recipe_row.save(tmp_path / "phase.yaml")
    recipe = load_recipe(recipe_path)
    assert recipe.params["tilt_mode"] == "manual"
    assert (recipe.params["tilt_zenith"], recipe.params["tilt_azimuth"]) == (
        params.tilt_zenith,
        params.tilt_azimuth,
    )
    out = tmp_path / "out.zarr"
    _run_recipe(recipe_path, source, out, client)
    image, extra, attrs = _position(out, "well")
    _same_bytes(image, phase_layer.data)
    (written_absorption,) = (v for k, v in extra.items() if k.startswith("absorption"))
    _same_bytes(written_absorption, absorption.data)
    written = attrs["provenance"]["result"]
    assert _measured(written) == _measured(shown)
    assert written["tilt_map"] == shown["tilt_map"]


def test_tv_dock_equals_its_recipe(viewer, qtbot, cpu_device, tmp_path, client):
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock

    rng = np.random.default_rng(5)
    y, x = np.mgrid[:128, :128]
    clean = 400 + 300 * ((np.hypot(y - 64, x - 60) < 30) | ((x > 90) & (y > 20) & (y < 100)))
    image = rng.poisson(clean).astype(np.uint16)
    source = tmp_path / "cells.tif"
    tifffile.imwrite(
        source, image, imagej=True, resolution=(10, 10), metadata={"unit": "um", "axes": "YX"}
    )
    viewer.add_image(image, name="cells", scale=(0.1, 0.1), units="um")
    dock = open_dock(TVDenoiseDock, viewer, qtbot)
    select_input(dock, "cells")
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
    result = dock.last_result_layer
    shown = result.metadata[PROVENANCE_KEY]["result"]

    recipe_path = dock.recipe_row.save(tmp_path / "tv.yaml")
    # napari's placeholder labels of an unlabelled layer ("-2", "-1") are no axes: validate
    # passes the file the layer was written to (it once expected axes "-2-1" of every file).
    assert load_recipe(recipe_path).input.axes is None
    assert main(["validate", str(recipe_path), str(source)]) == 0
    out = tmp_path / "out.zarr"
    _run_recipe(recipe_path, source, out, client)
    written_image, _, attrs = _position(out, "cells")
    _same_bytes(written_image, result.data)
    assert _measured(attrs["provenance"]["result"]) == _measured(shown)


def test_saving_a_recipe_says_what_it_cannot_carry_of_the_esrrf_dock(
    viewer, qtbot, cpu_device, tmp_path, monkeypatch
):
    """An estimate made with other drift options is not what a recipe run does (it estimates
    each position's drift with the recipe's options): Save... says so; an estimate with the
    recipe's options needs no note; a loaded trace is carried, and the note says how a batch
    run uses it."""
    from napari_gpuscope.compute.esrrf import DriftResult
    from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

    stack = _blinking(frames=40, side=32)
    viewer.add_image(stack, name="drifting")
    dock = open_dock(EsrrfDock, viewer, qtbot)
    select_input(dock, "drifting")
    dock.set_param("drift_time_averaging", 10)
    dock.drift.set_mode("estimate")
    assert dock.drift.estimate()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    dock.recipe_row.save(tmp_path / "same.yaml")
    assert "Note" not in dock.panel.status.text()

    dock.set_param("drift_time_averaging", 20)  # the trace shown was estimated with 10
    dock.recipe_row.save(tmp_path / "other.yaml")
    assert "estimated with other drift options" in dock.panel.status.text()

    path = DriftResult.from_shifts(np.zeros((40, 2))).to_csv(tmp_path / "trace.csv")
    monkeypatch.setattr(
        "qtpy.QtWidgets.QFileDialog.getOpenFileName", lambda *a, **k: (str(path), "")
    )
    dock.drift.load_button.click()
    assert dock.drift.current_mode == "trace"
    dock.recipe_row.save(tmp_path / "loaded.yaml")
    # A loaded trace travels with the recipe (its drift_trace artifact): the note says that a
    # batch run corrects every position with it.
    status = dock.panel.status.text()
    assert "which a recipe does not carry" not in status
    assert (
        "the recipe carries the drift trace loaded from trace.csv (its drift_trace artifact): "
        "a batch run corrects every position with it, and refuses positions that have not 40 "
        "frames"
    ) in status
    recipe = load_recipe(tmp_path / "loaded.yaml")
    assert recipe.params["drift_correction"] is True
    assert [a.name for a in recipe.artifacts] == ["drift_trace"]

    # Other layers added as channels (More channels) are no part of a recipe: Save... says so.
    viewer.add_image(_blinking(frames=40, side=32)[::-1].copy(), name="second")
    select_input(dock, "drifting")  # the new layer became the active one
    dock.channel_layers.select([viewer.layers["second"]])
    assert dock.channel_layers.selected == [viewer.layers["second"]]
    dock.recipe_row.save(tmp_path / "channels.yaml")
    assert (
        "runs here add 'second' as channels (More channels), which a recipe does not carry"
    ) in dock.panel.status.text()
