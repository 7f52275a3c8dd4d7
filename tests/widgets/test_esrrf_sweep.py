"""The sweep panel's decorrelation-resolution heatmap (issue 19): drawn with its unit and
direction, filled as cells stream in and when the sweep ends, and quoted when a cell is used."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute.esrrf import EsrrfParams
from napari_gpuscope.compute.esrrf._sweep import SweepResult
from napari_gpuscope.compute.jobs import Output, Progress
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

NAMES = ("frc_resolution", "rsp", "qnr", "decorr_resolution")


@pytest.fixture
def panel(viewer, qtbot, cpu_device):
    dock = EsrrfDock(viewer)
    qtbot.addWidget(dock)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    panel = dock.sweep
    panel.radii, panel.sensitivities = (1.0, 2.0), (1.0,)
    panel.unit = "µm"
    return panel


def test_the_fourth_heatmap_is_the_decorrelation_resolution(panel):
    panel.grids = {name: np.full((1, 2), np.nan) for name in NAMES}
    panel._draw()
    titles = [ax.get_title() for ax in panel._axes]
    assert titles[-1] == "Decorrelation resolution (µm, lower is better)"
    assert len(panel.figure.axes) == 4  # no colorbar while it is empty


def test_streamed_cells_fill_the_map_and_a_click_quotes_it(panel):
    panel.grids = {name: np.full((1, 2), np.nan) for name in NAMES}
    region = (slice(0, 1), slice(1, 2))
    update = Progress(
        0.5,
        "setting 1/2",
        outputs={
            "decorr_resolution": Output(np.array([[0.123]]), region=region, shape=(1, 2)),
            "rsp": Output(np.array([[0.9]]), region=region, shape=(1, 2)),
        },
    )
    panel._on_progress(update)
    assert panel.grids["decorr_resolution"][0, 1] == pytest.approx(0.123)
    assert np.isnan(panel.grids["decorr_resolution"][0, 0])
    assert len(panel.figure.axes) == 6  # four heatmaps, two colorbars
    panel.apply_cell(0, 1)
    # each measure named once with its unit (issue 30: it nested the heatmaps' titles)
    assert "RSP 0.900, decorrelation 0.123 µm" in panel.status.text()
    assert "lower is better" not in panel.status.text()


def test_the_finished_sweep_fills_all_four_maps(panel):
    grid = np.array([[3.0, 2.0]])
    result = SweepResult(
        radii=(1.0, 2.0),
        sensitivities=(1.0,),
        frc_resolution=grid,
        rsp=np.array([[0.8, 0.9]]),
        qnr=np.array([[0.5, 0.7]]),
        params=EsrrfParams(),
        frames=10,
        decorr_resolution=np.array([[0.25, 0.2]]),
    )
    panel._on_done(result, 1.0)
    assert set(panel.grids) == set(NAMES)
    np.testing.assert_array_equal(panel.grids["decorr_resolution"], [[0.25, 0.2]])
    assert "FRC 2 input px, RSP 0.900, decorrelation 0.2 input px" in panel.status.text()
