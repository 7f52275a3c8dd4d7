"""A batch position's drift trace in napari (issue 19: the batch writes the trace beside each
position's result): ``viewer.open(OUT.zarr/<position>)`` shows it as the drift track over the
widefield image, and the eSRRF dock's "Load trace..." takes the position's ``drift.csv`` for
the original stack.

The position is written by the batch task itself (:func:`run_position`, no cluster) from a
simulated drifting blinking TIFF (0.1 um pixels, tests/compute/esrrf_drift_sim.py); the
oracles are the simulated drift, the input's pixel size and the CSV's rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from dock_helpers import open_dock, select_input

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compute"))

from esrrf_drift_sim import blinking_drifting_stack, true_drift

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.store import marker_key
from napari_gpuscope.batch.task_spec import TaskSpec
from napari_gpuscope.batch.tasks import run_position
from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf import load_drift_trace
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

PIXEL_UM = 0.1
T, SIDE = 100, 64


@pytest.fixture(scope="module")
def position(tmp_path_factory):
    """``OUT.zarr/fov`` written by a batch task (eSRRF with drift correction), the stack and its
    true drift."""
    folder = tmp_path_factory.mktemp("batch_drift_napari")
    truth = true_drift(T)
    stack = blinking_drifting_stack(truth, shape=(SIDE, SIDE), n_emitters=150, seed=7)[0]
    tifffile.imwrite(
        folder / "fov.tif",
        stack,
        imagej=True,
        resolution=(1 / PIXEL_UM, 1 / PIXEL_UM),
        metadata={"unit": "um", "axes": "TYX"},
    )
    params = esrrf.EsrrfParams(magnification=2, drift_correction=True, drift_time_averaging=20)
    recipe = Recipe.from_params(params)
    task = TaskSpec(recipe.model_dump(mode="json"), recipe.hash(), str(folder / "out.zarr"))
    (fov,) = discover(str(folder / "fov.tif"))
    summary = run_position(task, fov, marker_key(task.recipe_hash, fov.identity()))
    assert summary["status"] == "done", summary
    return folder / "out.zarr" / "fov", stack, truth


def test_opening_a_position_shows_its_drift_track_over_the_widefield(viewer, position):
    folder, _, truth = position
    layers = viewer.open(str(folder), plugin="napari-gpuscope")
    track = next(layer for layer in layers if type(layer).__name__ == "Tracks")
    widefield = next(layer for layer in layers if layer.name.startswith("widefield mean"))
    assert track.name == "drift · fov"
    np.testing.assert_allclose(track.scale, (1.0, PIXEL_UM, PIXEL_UM))
    shifts = load_drift_trace(folder / "drift.csv")
    centre = (SIDE - 1) / 2
    np.testing.assert_allclose(track.data[:, 2:], centre + shifts)
    assert float(np.sqrt(np.mean((shifts - truth) ** 2))) < 0.2  # 0.12-0.16 px on this stack
    # Over the widefield image: its (y, x) world extent holds the whole path.
    low, high = widefield.extent.world[:, -2:]
    path = track.data[:, 2:] * PIXEL_UM
    assert (path >= low).all() and (path <= high).all()
    assert track.color_by == "frame"


def test_the_docks_load_trace_takes_the_positions_csv(viewer, qtbot, cpu_device, position):
    folder, stack, _ = position
    dock = open_dock(EsrrfDock, viewer, qtbot)
    viewer.add_image(stack, name="fov", scale=(1.0, PIXEL_UM, PIXEL_UM))
    select_input(dock, "fov")
    assert dock.drift.load(folder / "drift.csv"), dock.panel.status.text()
    assert dock.drift.current_mode == "trace" and dock.params().drift_correction
    np.testing.assert_array_equal(dock.drift.trace.shifts, load_drift_trace(folder / "drift.csv"))
    assert "Loaded the drift trace drift.csv" in dock.panel.status.text()
