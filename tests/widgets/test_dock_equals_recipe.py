"""The dock is the job: a recipe saved from a dock and run by ``napari-gpuscope run`` writes the
dock's result byte for byte, with the same measurements in the position's attributes (issue 25
item 2).

Each test runs the dock on the CPU test device, saves its recipe (the Recipe row's Save...),
writes the input layer as an ImageJ TIFF and runs the real command line on it (on the
module's in-process Dask cluster, so no worker process is spawned); the oracle is the dock's
own result layers and provenance. Sizes are realistic but CPU-affordable: a 60-frame 48 x 48
blinking stack (eSRRF), a 9-slice 64 x 64 brightfield stack (phase), a 128 x 128 noisy image
(TV).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tifffile
import zarr
from dock_helpers import open_dock, select_input

from napari_gpuscope.batch.recipes import load_recipe
from napari_gpuscope.cli import main
from napari_gpuscope.provenance import PROVENANCE_KEY

ATTRIBUTE = "napari_gpuscope"  # the position group's attribute (docs/batch.md, Output)
RUN_FACTS = ("chunks", "kernel_paths")
"""How a run went, not what it measured: eSRRF's frame chunks are the dock's smaller ones
(the image streams as it builds up; the result does not depend on them)."""


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


def _run_recipe(recipe: Path, source: Path, out: Path, client: Any) -> None:
    argv = ["run", str(recipe), str(source), "--out", str(out), "--device", "cpu"]
    argv += ["--no-progress", "--cluster", client.scheduler.address]
    assert main(argv) == 0


def _position(out: Path, name: str) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
    """The written image, the extra layers by name, and the group attribute."""
    group = zarr.open_group(str(out / name), mode="r")
    extra = {}
    if (out / name / "extra").is_dir():
        for child in sorted(p for p in (out / name / "extra").iterdir() if p.is_dir()):
            sub = zarr.open_group(str(child), mode="r")
            extra[sub.attrs["ome"]["multiscales"][0]["name"]] = np.asarray(sub["0"][...])
    return np.asarray(group["0"][...]), extra, dict(group.attrs[ATTRIBUTE])


def _measured(facts: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in facts.items() if key not in RUN_FACTS}


def _same_bytes(written: np.ndarray, shown: Any) -> None:
    shown = np.asarray(shown)
    assert written.dtype == shown.dtype and written.shape == shown.shape
    assert written.tobytes() == shown.tobytes()


def _blinking(frames: int = 60, side: int = 48) -> np.ndarray:
    """Blinking emitters on two lines and scattered points, drifting by a smooth sub-pixel
    path (Gaussian PSF sigma 1.3 px, ~30 % on per frame, Poisson noise), uint16 ADU."""
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
    return stack


def test_esrrf_dock_with_an_estimated_trace_and_its_resolution_equals_its_recipe(
    viewer, qtbot, cpu_device, tmp_path, client
):
    from napari_gpuscope.compute.esrrf import load_drift_trace
    from napari_gpuscope.widgets.esrrf_dock import EsrrfDock

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
    assert "decorrelation resolution" in dock.panel.status.text()

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


def test_phase_dock_with_an_estimated_tilt_equals_its_recipe(
    viewer, qtbot, cpu_device, tmp_path, client
):
    from napari_gpuscope.compute import phase
    from napari_gpuscope.sample_data.phase import tilted_brightfield_stack
    from napari_gpuscope.widgets.phase_dock import PhaseDock

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


def test_tv_dock_equals_its_recipe(viewer, qtbot, cpu_device, tmp_path, client):
    from napari_gpuscope.widgets.tv_dock import TVDenoiseDock

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
    out = tmp_path / "out.zarr"
    _run_recipe(recipe_path, source, out, client)
    written_image, _, attrs = _position(out, "cells")
    _same_bytes(written_image, result.data)
    assert _measured(attrs["provenance"]["result"]) == _measured(shown)


def test_saving_a_recipe_says_what_it_cannot_carry_of_the_esrrf_dock(
    viewer, qtbot, cpu_device, tmp_path, monkeypatch
):
    """A loaded trace, or an estimate made with other drift options, is not what a recipe
    run does (it estimates each position's drift with the recipe's options): Save... says so;
    an estimate with the recipe's options needs no note."""
    from napari_gpuscope.compute.esrrf import DriftResult
    from napari_gpuscope.widgets.esrrf_dock import EsrrfDock

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
    assert "loaded from a file, which a recipe does not carry" in dock.panel.status.text()
    assert load_recipe(tmp_path / "loaded.yaml").params["drift_correction"] is True
