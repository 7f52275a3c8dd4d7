"""The eSRRF dock on the CPU test device: streaming, geometry, preview, cancel, bad input.

Values are checked against NanoPyx 2.1.5's output (tests/fixtures/esrrf)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dock_helpers import WorkerGate, open_dock, select_input
from matplotlib.colors import to_hex

from napari_gpuscope.dock import outputs as _outputs
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets._controls._plot import theme_colors
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

FIXTURES = np.load(Path(__file__).parents[1] / "fixtures" / "esrrf" / "nanopyx_esrrf.npz")


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    return open_dock(EsrrfDock, viewer, qtbot)


@pytest.fixture
def shown(monkeypatch):
    """Every streamed update the dock puts on screen: (layer data shape, scale, translate)."""
    calls = []
    real = _outputs.OutputLayers.show

    def spy(self, name, output):
        real(self, name, output)
        layer = self.targets[name].layer
        calls.append((layer.data.shape, tuple(layer.scale), tuple(layer.translate)))

    monkeypatch.setattr(_outputs.OutputLayers, "show", spy)
    return calls


def test_run_streams_and_matches_nanopyx_with_aligned_geometry(viewer, qtbot, dock, shown):
    stack = FIXTURES["var_m2_r1_s2_noiw/input"]  # 10 frames of 24 x 24
    layer = viewer.add_image(
        stack.copy(),
        name="blink",
        scale=(1.0, 0.1, 0.1),
        translate=(0, 2, 3),
        units=("s", "um", "um"),
    )
    select_input(dock, "blink")
    settings = {"magnification": 2, "radius": 1.0, "sensitivity": 2.0, "temporal": "VAR"}
    for name, value in {**settings, "intensity_weighting": False}.items():
        dock.set_param(name, value)
    assert dock.radius_label.value.startswith("= 0.1 ")
    assert dock.pixel_label.value == "→ 48×48, 0.05 µm pixels"
    updates = []
    dock.runner.progressed.connect(lambda update: updates.append(update.message))
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)

    # one update per frame here (10 frames: chunks of 1); the image is copied to the screen at
    # most a few times a second, so a quick run shows fewer of them
    assert sum("analysed" in message for message in updates) == 10
    assert len(shown) >= 1
    assert all(s[1] == pytest.approx((10.0, 0.05, 0.05)) for s in shown)  # 1 point, 10 frames
    result = viewer.layers["eSRRF · blink [M2 R1 S2 VAR]"]
    reference = FIXTURES["var_m2_r1_s2_noiw/output"]
    assert result.data.shape == reference.shape
    assert np.abs(result.data - reference).max() <= 1e-5 * reference.max()
    # scale / M; output pixel i centred at input pixel (i + 0.5) / M - 0.5
    assert tuple(result.scale) == pytest.approx((10.0, 0.05, 0.05))
    assert tuple(result.translate) == pytest.approx((4.5, 2 - 0.1 * 0.25, 3 - 0.1 * 0.25))
    qtbot.waitUntil(lambda: viewer.layers[-1].name == result.name)  # over the widefield mean
    assert result.colormap.name == "magma"
    widefield = viewer.layers["widefield mean · blink"]
    np.testing.assert_allclose(widefield.data[0], stack.mean(0), rtol=1e-6)
    assert tuple(widefield.scale) == pytest.approx((10.0, 0.1, 0.1))
    record = result.metadata[PROVENANCE_KEY]
    assert record["method"] == "esrrf" and record["input"] == "blink"
    assert record["parameters"]["magnification"] == 2
    np.testing.assert_array_equal(layer.data, stack)
    assert "super-resolved" in dock.panel.status.text()


def test_cancel_removes_the_streaming_layer(viewer, qtbot, dock, shown):
    stack = np.random.default_rng(0).poisson(100, (200, 32, 32)).astype(np.uint16)
    viewer.add_image(stack, name="long")
    select_input(dock, "long")
    assert dock.run()
    qtbot.waitUntil(lambda: len(shown) >= 2, timeout=60_000)
    dock.cancel()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    qtbot.wait(200)
    assert [ly.name for ly in viewer.layers] == ["long"]


def test_stop_and_keep_returns_the_frames_so_far(viewer, qtbot, dock, shown, monkeypatch):
    stack = np.random.default_rng(1).poisson(100, (200, 32, 32)).astype(np.uint16)
    viewer.add_image(stack, name="long")
    select_input(dock, "long")
    gate = WorkerGate(monkeypatch, after=3)
    assert dock.run()
    gate.wait_paused()  # the worker waits at its third update, whatever the CPU's speed
    dock.stop()
    gate.release()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    (result,) = [ly for ly in viewer.layers if ly.name.startswith("eSRRF · ")]
    summary = result.metadata[PROVENANCE_KEY]["result"]
    assert summary["stopped_early"] and summary["frames_analysed"] < 200
    assert "stopped early" in dock.panel.status.text().lower()


def test_live_preview_shows_the_visible_region_at_its_place(viewer, qtbot, dock):
    stack = FIXTURES["default/input"]
    viewer.add_image(stack.copy(), name="blink", scale=(1.0, 0.1, 0.1))
    select_input(dock, "blink")
    dock.set_param("magnification", 2)
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "eSRRF preview · blink" in viewer.layers, timeout=30_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    preview = viewer.layers["eSRRF preview · blink"]
    assert preview.data.shape[0] == 1 and preview.data.shape[1:] == (48, 48)  # whole 24 x 24
    assert tuple(preview.scale) == pytest.approx((1.0, 0.05, 0.05))
    assert tuple(preview.translate)[1:] == pytest.approx((-0.025, -0.025))
    assert preview.metadata[PROVENANCE_KEY]["result"]["preview"] is True


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (np.zeros((32, 32), np.float32), "shape (32, 32), 2 dimensions"),
        (np.where(np.eye(16)[None] > 0, np.nan, 1.0).repeat(4, 0), "NaN"),
    ],
)
def test_bad_input_is_reported_once_in_the_dock(viewer, dock, errors, data, words):
    viewer.add_image(data, name="bad")
    select_input(dock, "bad")
    assert dock.run() is False
    assert errors == []  # said in the dock only (issue 30: status, notification and log)
    status = dock.panel.status.text()
    assert "'bad'" in status and words in status, status
    # eSRRF's own layouts, with the axis names: channels are accepted, not "single-channel"
    assert "(T, Y, X), (C, T, Y, X) or (T, C, Y, X)" in status and "C = channels" in status


def test_every_control_explains_itself(viewer, dock):
    for name, widget in dock.form.widgets.items():
        assert widget.tooltip, name
    assert json.loads(dock.params().to_json())["geometry"] == "nanopyx"


def test_sweep_panel_streams_cells_and_a_click_applies_the_setting(viewer, qtbot, dock):
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    stack, _ = blinking_filaments_stack(16, (32, 32), density=1.0, photons=60.0, background=60.0)
    viewer.add_image(stack, name="blink", scale=(1.0, 0.1, 0.1), units=("s", "um", "um"))
    select_input(dock, "blink")
    dock.set_param("magnification", 2)
    panel = dock.sweep
    panel.radii_edit.setText("1, 2")
    panel.sensitivities_edit.setText("1, 3")
    cells = []
    dock.runner.progressed.connect(lambda u: cells.append(np.isfinite(panel.grids["rsp"]).sum()))
    assert panel.run()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=60_000)
    assert 1 in cells and 4 in cells  # the cells streamed in one by one
    assert np.isfinite(panel.grids["rsp"]).all() and panel.result.best is not None
    # Issue 18: the heatmaps say their unit and which way is better, in napari's theme.
    titles = [ax.get_title() for ax in panel._axes]
    assert titles[0] == "FRC resolution (µm, lower is better)"
    assert titles[1:] == [
        "RSP (higher is better)",
        "QnR (higher is better)",
        "Decorrelation resolution (µm, lower is better)",
    ]
    background = theme_colors(viewer)["background"]
    assert to_hex(panel.figure.get_facecolor()) == to_hex(background)
    panel.apply_cell(1, 0)  # what a click on (radius 1, sensitivity 3) does
    assert (dock.params().radius, dock.params().sensitivity) == (1.0, 3.0)
    assert "Using radius 1, sensitivity 3" in panel.status.text()
    panel.radii_edit.setText("one")
    assert panel.run() is False and "not a list of numbers" in panel.status.text()


def test_the_sweep_runs_on_the_dock_runner_one_job_at_a_time(viewer, qtbot, dock):
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    stack, _ = blinking_filaments_stack(16, (32, 32), density=1.0, photons=60.0, background=60.0)
    viewer.add_image(stack, name="blink", scale=(1.0, 0.1, 0.1))
    select_input(dock, "blink")
    panel = dock.sweep
    panel.radii_edit.setText("1, 2")
    panel.sensitivities_edit.setText("1, 3")
    assert panel.run()
    assert dock.runner.tag == "sweep" and dock.is_running()
    assert not panel.run_button.isEnabled() and panel.stop_button.isEnabled()
    # no run beside the sweep (nothing is processed until the event loop runs: no race)
    assert dock.run() is False
    assert dock.panel.status.text() == (
        "The eSRRF sweep is running on 'blink'; start it when it has finished (Escape cancels it)."
    )
    assert panel.run() is False and "already running" in panel.status.text()
    dock.cancel()  # the dock's Cancel (Escape) ends the sweep too
    assert not dock.is_running() and panel.run_button.isEnabled()

    assert dock.run()
    assert panel.run() is False
    assert "eSRRF is running on 'blink'; start the sweep when it has finished" in (
        panel.status.text()
    )
    dock.cancel()
    assert not dock.is_running()


def test_an_empty_sweep_heatmap_has_no_placeholder_colorbar(viewer, qtbot, dock):
    """Issue 18: heatmaps with no cell yet showed colorbars of -0.1 .. 0.1."""
    panel = dock.sweep
    panel.radii, panel.sensitivities = (1.0, 2.0), (1.0,)
    panel.grids = {name: np.full((1, 2), np.nan) for name in ("frc_resolution", "rsp", "qnr")}
    panel._draw()
    assert len(panel.figure.axes) == 3  # the three heatmaps, no colorbar axes
    panel.grids["rsp"][0, 0] = 0.8
    panel._draw()
    assert len(panel.figure.axes) == 4  # RSP's colorbar, now that it has a value
