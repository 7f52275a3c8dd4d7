"""Every dock refuses an input with its own method's axis layouts, in words, said once in the
dock (issue 30 item 4: phase said "expected 3 to 3 (e.g. (Y, X), ...)", eSRRF "single-channel"
though it takes channels, and each message came as status, notification and log line)."""

from __future__ import annotations

import numpy as np
import pytest
from dock_helpers import open_dock, select_input

from napari_gpuscope.widgets.esrrf.dock import EsrrfDock
from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock
from napari_gpuscope.widgets.phase.dock import PhaseDock
from napari_gpuscope.widgets.tv.dock import TVDenoiseDock

# What each method accepts, as its docs say (docs/<method>.md), written out independently of
# the docks' declarations.
TAKES = {
    PhaseDock: "(Z, Y, X), with Z = z-slices",
    EsrrfDock: "(T, Y, X), (C, T, Y, X) or (T, C, Y, X), with T = time (frames), C = channels",
    FlatfieldDock: "(T, Y, X), (C, T, Y, X) or (T, Z, Y, X)",
    TVDenoiseDock: "(Y, X), (Z, Y, X), (T, Y, X) or (T, Z, Y, X)",
}
# A shape each refuses for its number of axes.
REFUSED = {
    PhaseDock: (16, 16),
    EsrrfDock: (16, 16),
    FlatfieldDock: (16, 16),
    TVDenoiseDock: (2, 2, 2, 4, 4),
}


@pytest.mark.parametrize("dock_class", list(TAKES), ids=lambda c: c.__name__)
def test_a_refused_shape_names_the_layer_its_shape_and_the_methods_layouts(
    viewer, qtbot, cpu_device, errors, dock_class
):
    dock = open_dock(dock_class, viewer, qtbot)
    shape = REFUSED[dock_class]
    viewer.add_image(np.ones(shape, np.float32), name="bad")
    select_input(dock, "bad")
    assert dock.run() is False
    status = dock.panel.status.text()
    assert f"'bad' has shape {shape}, {len(shape)} dimensions" in status, status
    assert f"{dock.title} takes an image layer shaped {TAKES[dock_class]}" in status, status
    assert "e.g." not in status and "to 4" not in status and "single-channel" not in status
    assert errors == []  # once, in the dock: no notification (nor napari's ERROR line)
    assert [layer.name for layer in viewer.layers] == ["bad"]  # nothing was started


def test_run_disabled_names_the_layouts_before_run_is_pressed(viewer, qtbot, cpu_device, errors):
    dock = open_dock(PhaseDock, viewer, qtbot)
    viewer.add_image(np.ones((32, 32), np.float32), name="widefield")
    select_input(dock, "widefield")
    assert not dock.panel.run_button.isEnabled()
    status = dock.panel.status.text()
    assert status.startswith("Run is disabled: Layer 'widefield' has shape (32, 32)"), status
    assert "(Z, Y, X)" in status and errors == []
