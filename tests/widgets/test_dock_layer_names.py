"""Result layers are named one way while they run and when they are done, and never take
napari's "[1]" suffix (issue 30 item 8: "BaSiC running ·" became "flatfield ·", and redrawn
outputs became "drift · ch0 drifting [1]").

The rule for a re-run (docs/architecture.md, Widgets): a result named as an earlier result of
the same method (same kind, input and settings: the name says them) takes that layer's place;
a re-run with other settings makes new layers beside the earlier ones, to compare them.
"""

from __future__ import annotations

import numpy as np
import pytest
from dock_helpers import open_dock, select_input

from napari_gpuscope.compute.results import result_name
from napari_gpuscope.dock.jobs import RUN, DockJob
from napari_gpuscope.methods import method
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock
from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock
from napari_gpuscope.widgets.phase.dock import PhaseDock
from napari_gpuscope.widgets.tv.dock import TVDenoiseDock


@pytest.fixture
def image(viewer):
    return viewer.add_image(np.arange(48, dtype=np.float32).reshape(6, 8) + 1, name="cells")


def _names(viewer):
    return [layer.name for layer in viewer.layers]


def _run(dock, qtbot):
    assert dock.run() is True
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)


def test_a_rerun_with_the_same_settings_replaces_its_result_in_place(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    _run(dock, qtbot)
    first = viewer.layers["cells [Fake x2]"]
    viewer.add_image(np.zeros((6, 8), np.float32), name="notes")  # a layer above it
    select_input(dock, "cells")  # the picker followed the new layer
    _run(dock, qtbot)
    assert _names(viewer) == ["cells", "cells [Fake x2]", "notes"]  # same place, no "[1]"
    assert viewer.layers["cells [Fake x2]"] is not first  # the new result
    np.testing.assert_allclose(viewer.layers["cells [Fake x2]"].data, image.data * 2.0)

    dock.factor.value = 3.0  # other settings: beside the earlier result, to compare
    _run(dock, qtbot)
    assert _names(viewer) == ["cells", "cells [Fake x2]", "notes", "cells [Fake x3]"]
    _run(dock, qtbot)
    assert _names(viewer) == ["cells", "cells [Fake x2]", "notes", "cells [Fake x3]"]
    assert not any("[1]" in name for name in _names(viewer))


def test_a_result_drawn_by_another_part_of_the_method_is_replaced_not_suffixed(
    viewer, qtbot, image, fake_dock, cpu_device
):
    # e.g. eSRRF's drift section draws "drift · cells", then a run's result draws it again
    drawn = viewer.add_image(
        np.zeros((6, 8), np.float32),
        name="cells [Fake x2]",
        metadata={PROVENANCE_KEY: {"method": "fake"}},
    )
    dock = fake_dock()
    _run(dock, qtbot)
    assert _names(viewer) == ["cells", "cells [Fake x2]"]
    assert drawn not in viewer.layers


def test_a_users_own_layer_of_that_name_is_never_removed(
    viewer, qtbot, image, fake_dock, cpu_device
):
    mine = viewer.add_image(np.zeros((6, 8), np.float32), name="cells [Fake x2]")
    dock = fake_dock()
    _run(dock, qtbot)
    assert mine in viewer.layers  # not ours to replace: napari names the result apart
    assert len(viewer.layers) == 3


@pytest.mark.parametrize(
    ("dock_class", "shape"),
    [
        (TVDenoiseDock, (16, 16)),
        (EsrrfDock, (4, 16, 16)),
        (FlatfieldDock, (4, 16, 16)),
        (PhaseDock, (5, 16, 16)),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_running_layers_start_with_the_kind_their_result_will_have(
    viewer, qtbot, cpu_device, dock_class, shape
):
    dock = open_dock(dock_class, viewer, qtbot)
    layer = viewer.add_image(np.ones(shape, np.float32), name="in")
    select_input(dock, "in")
    kinds = method(dock.method_id).job_spec().output_kinds  # the registry's words
    job = DockJob(RUN, layer, None, "cpu", name="in")
    name_of = dock.job_view._output_layers(job).name_of
    for output, kind in zip(dock.streamed_outputs, kinds, strict=False):
        assert name_of(output) == result_name(f"{kind} running", "in")


def test_tv_run_streams_and_finishes_under_one_kind(viewer, qtbot, cpu_device):
    dock = open_dock(TVDenoiseDock, viewer, qtbot)
    rng = np.random.default_rng(0)
    viewer.add_image(rng.normal(1.0, 0.1, (32, 32)).astype(np.float32), name="cells")
    select_input(dock, "cells")
    inserted = []
    viewer.layers.events.inserted.connect(lambda event: inserted.append(event.value.name))
    _run(dock, qtbot)
    assert inserted == ["TV denoised running · cells"]
    (result,) = [name for name in _names(viewer) if name != "cells"]
    assert result.startswith("TV denoised · cells")
    _run(dock, qtbot)  # the same again: replaced, not "[1]"
    assert _names(viewer) == ["cells", result]


def test_a_redrawn_drift_track_replaces_the_track_a_run_drew(viewer, qtbot):
    """eSRRF's drift section draws "drift · <input>" where a run's result drew it already (it
    became "drift · ch0 drifting [1]")."""
    from napari_gpuscope.widgets.esrrf.drift_trace import TraceLayers

    stack = viewer.add_image(np.zeros((4, 8, 8), np.float32), name="ch0")
    track = np.array([[0.0, t, 4.0, 4.0 + 0.1 * t] for t in range(4)])
    record = {PROVENANCE_KEY: {"method": "esrrf"}}
    by_the_run = viewer.add_tracks(track, name="drift · ch0", metadata=record)

    class Trace:  # what the section reads of a DriftResult
        def layers(self, name, geometry, metadata):
            return [(track, {"name": f"drift · {name}", "metadata": metadata}, "tracks")]

    TraceLayers(None, viewer).show(Trace(), stack, record)
    assert _names(viewer) == ["ch0", "drift · ch0"]
    assert by_the_run not in viewer.layers
