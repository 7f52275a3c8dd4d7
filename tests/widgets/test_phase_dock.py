"""The phase dock on the CPU test device: optics from the layer, runs against waveorder's
fixtures, the tilt estimate streaming its vectors and loss, and the live regularization."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_gpuscope.compute import phase
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets.phase.dock import PhaseDock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "phase"
AIR = {
    "wavelength": 0.45,
    "na_illumination": 0.4,
    "na_detection": 0.55,
    "index_of_refraction": 1.0,
}


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURES / "waveorder_recon.npz"))


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    widget = PhaseDock(viewer)
    qtbot.addWidget(widget)
    qtbot.waitUntil(lambda: not widget.is_running(), timeout=10_000)
    return widget


def _add_stack(viewer, reference, key="stack_flat", name="bf"):
    return viewer.add_image(
        reference[key],
        name=name,
        scale=(1.0, 0.325, 0.325),
        metadata={"sample": dict(AIR)},
    )


def _select(dock, name):
    dock.reset_choices()
    dock.input_layer = next(c for c in dock.input.combo.choices if c.name == name)


def test_optics_from_the_layer_and_tilt_rows(viewer, dock, reference):
    _add_stack(viewer, reference)
    _select(dock, "bf")
    params = dock.params()
    assert params.yx_pixel_size == pytest.approx(0.325)
    assert params.z_pixel_size == pytest.approx(1.0)
    assert params.na_detection == pytest.approx(0.55)
    assert "From the layer scale" in dock.scale_label.value
    form = dock.form
    form.widgets["tilt_mode"].value = "tiles"
    assert not form.widgets["tilt_zenith"].native.isVisibleTo(dock)
    assert form.widgets["tiles_x"].native.isVisibleTo(dock)
    form.widgets["tilt_mode"].value = "manual"
    assert form.widgets["tilt_zenith"].native.isVisibleTo(dock)
    form.widgets["na_illumination"].value = 0.6  # above the detection NA: a note, no error
    assert dock.params().effective_na_illumination == pytest.approx(0.495)
    assert "0.9 x na_detection" in dock.optics_note.value
    assert dock.optics_note.native.isVisibleTo(dock)
    form.widgets["na_illumination"].value = 0.4
    dock.params()
    assert not dock.optics_note.native.isVisibleTo(dock)
    dock.reg_slider.setValue(100)  # the middle of 1e-5 .. 1e-1
    assert dock.params().regularization == pytest.approx(1e-3)
    form.widgets["regularization"].value = 0.01
    assert dock.reg_slider.value() == 150


def test_run_without_tilt_equals_waveorder(viewer, qtbot, dock, reference):
    _add_stack(viewer, reference)
    _select(dock, "bf")
    dock.set_param("tilt_mode", "none")
    dock.set_param("regularization", 1e-3)  # waveorder's (the default is "auto")
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    phase_layer = viewer.layers["phase · bf [reg=0.001]"]
    np.testing.assert_allclose(phase_layer.data, reference["flat_zero_tilt_phase"], atol=1e-5)
    assert phase_layer.scale == pytest.approx((0.325, 0.325))
    record = phase_layer.metadata[PROVENANCE_KEY]
    assert record["method"] == "phase"
    assert "absorption · bf [reg=0.001]" in viewer.layers
    assert "no tilt" in dock.panel.status.text()
    # The visible result is selected, not the hidden absorption napari added last (issue 18).
    assert viewer.layers.selection.active.name == "phase · bf [reg=0.001]"
    assert not viewer.layers["absorption · bf [reg=0.001]"].visible


def test_global_estimate_streams_loss_and_vectors(viewer, qtbot, dock, reference):
    _add_stack(viewer, reference, "stack_tilt")
    _select(dock, "bf")
    widgets = dock.form.widgets
    widgets["tilt_mode"].value = "global"
    widgets["optimizer"].value = "newton"
    widgets["iterations"].value = 8
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    vectors = viewer.layers["tilt · bf"]
    assert vectors.data.shape == (1, 2, 2)
    zenith = np.hypot(*vectors.data[0, 1]) / (0.5 * 64 / 0.25)
    assert abs(zenith - 0.2) < 0.035  # the fixture's true tilt (noise biases it to 0.18)
    assert len(dock.panel.plot.values("tilt objective")) == 8  # the live loss plot
    result = dock.last_results[0].metadata[PROVENANCE_KEY]["result"]
    assert len(result["estimate"]["loss_history"]) == 8
    assert dock._known_tilt(dock.input_layer) is not None  # the preview uses it


def test_the_estimate_tilt_job_runs_from_the_dock_and_sets_the_manual_tilt(
    viewer, qtbot, dock, reference
):
    """The registry's estimate_tilt job on the dock's runner: its result equals the job called
    directly (the oracle), its layers join the viewer (maps hidden, arrows shown), a global
    estimate fills the manual tilt rows, and a run asked for meanwhile is refused."""
    stack = _add_stack(viewer, reference, "stack_tilt")
    _select(dock, "bf")
    widgets = dock.form.widgets
    widgets["tilt_mode"].value = "global"
    widgets["optimizer"].value = "newton"
    widgets["iterations"].value = 6
    params = dock.params()
    assert dock.estimate_tilt()
    assert not dock.run() and "estimate" in dock.panel.status.text()  # one job at a time
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    direct = phase.estimate_tilt(stack.data, params=params, device="cpu")
    zenith = float(direct.tilt_map.zenith.item())
    assert abs(zenith - 0.2) < 0.035  # the fixture's true tilt
    assert viewer.layers["tilt · bf"].visible and not viewer.layers["tilt zenith · bf"].visible
    np.testing.assert_allclose(viewer.layers["tilt zenith · bf"].data, [[zenith]], rtol=1e-6)
    assert viewer.layers["tilt zenith · bf"].metadata[PROVENANCE_KEY]["method"] == "phase"
    after = dock.params()
    assert after.tilt_mode == "manual"
    assert after.tilt_zenith == pytest.approx(zenith, abs=1e-4)
    assert after.tilt_azimuth == pytest.approx(float(direct.tilt_map.azimuth.item()), abs=1e-4)
    assert "set as the manual tilt" in dock.panel.status.text()
    assert viewer.layers.selection.active.name == "bf"  # the stack stays the input


def test_live_regularization_reuses_the_normal_equations(viewer, qtbot, dock, reference):
    _add_stack(viewer, reference)
    _select(dock, "bf")
    dock.set_param("tilt_mode", "none")
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "phase preview · bf" in viewer.layers, timeout=20_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=20_000)
    solver = dock._solvers._solver
    dock.set_param("regularization", 0.05)

    def previewed_at_new_value():  # after the debounce, however long a loaded machine takes
        record = viewer.layers["phase preview · bf"].metadata[PROVENANCE_KEY]
        return record["parameters"]["regularization"] == 0.05 and not dock.is_running()

    qtbot.waitUntil(previewed_at_new_value, timeout=20_000)
    assert dock._solvers._solver is solver
    preview = viewer.layers["phase preview · bf"].data[0]
    expected = phase.reconstruct(
        reference["stack_flat"],
        **AIR,
        yx_pixel_size=0.325,
        z_pixel_size=1.0,
        regularization=0.05,
        tilt_mode="none",
        device="cpu",
    )
    np.testing.assert_allclose(preview, expected.phase, atol=1e-5)


def test_the_dock_starts_by_estimating_a_global_tilt_and_says_which_tilt_it_used(
    viewer, qtbot, dock, reference
):
    """Issue 18: the model's default 'manual, 0, 0' gave shadows and a checkerboard on the
    tilted sample. The dock starts (and resets) with a global estimate; the API and recipes
    keep the model's default."""
    assert dock.params().tilt_mode == "global"
    assert phase.PhaseParams.info("tilt_mode").default == "manual"  # the model is unchanged
    assert not dock.changes.isVisibleTo(dock)  # the dock's default is not a change
    dock.set_param("tilt_mode", "manual")
    assert "Tilt manual (default estimate (global))" in dock.changes.text.text()  # its words
    dock.changes.button.click()
    assert dock.params().tilt_mode == "global"
    _add_stack(viewer, reference, "stack_tilt")
    _select(dock, "bf")
    dock.set_param("optimizer", "newton")
    dock.set_param("iterations", 6)
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    status = dock.panel.status.text()
    assert "global tilt zenith" in status
    zenith = float(status.split("global tilt zenith ")[1].split(" rad")[0])
    assert abs(zenith - 0.2) < 0.035  # the fixture's true tilt


def test_a_changed_automatic_field_names_its_default_as_the_control_shows_it(dock):
    """Regularization's default is automatic (None in the model, "auto" in the box): the
    changes row says "default auto", the control's word, not Python's None."""
    assert phase.PhaseParams().regularization is None
    dock.set_param("regularization", 0.001)
    changed = dock.show_changes()
    assert "regularization" in changed
    text = dock.binding.changes.text.text()
    assert "Regularization 0.001 (default auto)" in text
    assert "None" not in text
