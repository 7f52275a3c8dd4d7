"""napari's status bar after a dock's run names what is there, not the streamed layer.

napari recomputes its status only on a mouse move: the TV dock's run left "TV running · cells"
in the status bar after the run ended (the streamed layer renamed to the result)."""

from __future__ import annotations

import numpy as np
from dock_helpers import WorkerGate, open_dock, select_input

from napari_gpuscope.widgets.tv.dock import TVDenoiseDock


def _cells(shape=(96, 96), seed=0):
    rng = np.random.default_rng(seed)
    clean = np.zeros(shape, np.float32)
    clean[24:72, 24:72] = 1.0
    return (clean + rng.normal(0, 0.2, shape)).astype(np.float32)


def _run_with_status_on_the_running_layer(viewer, qtbot, monkeypatch):
    dock = open_dock(TVDenoiseDock, viewer, qtbot)
    viewer.add_image(_cells(), name="cells")
    select_input(dock, "cells")
    # the worker waits once it has handed the GUI its first image
    gate = WorkerGate(monkeypatch, counting=lambda update: bool(update.outputs))
    assert dock.run()
    gate.wait_paused()
    qtbot.waitUntil(lambda: any("running" in layer.name for layer in viewer.layers), timeout=30_000)
    running = next(layer for layer in viewer.layers if "running" in layer.name)
    viewer.status = running.get_status(position=(48, 48), world=True)  # the cursor on it
    assert viewer.status["layer_name"] == running.name
    gate.release()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    return dock


def test_the_status_off_the_canvas_drops_the_running_layer(viewer, qtbot, monkeypatch, cpu_device):
    viewer.mouse_over_canvas = False
    _run_with_status_on_the_running_layer(viewer, qtbot, monkeypatch)
    assert not any("running" in layer.name for layer in viewer.layers)
    assert viewer.status == "Ready"


def test_the_status_on_the_canvas_names_the_result(viewer, qtbot, monkeypatch, cpu_device):
    viewer.mouse_over_canvas = True
    viewer.cursor.position = (48.0, 48.0)
    dock = _run_with_status_on_the_running_layer(viewer, qtbot, monkeypatch)
    (result,) = dock.last_results
    assert viewer.status["layer_name"] == result.name
    assert "running" not in result.name
