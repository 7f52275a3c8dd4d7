"""The phase dock's automatic regularization: "auto" by default (the box at its minimum, as
the eSRRF dock's automatic block length), the value a preview or a run chose shown beside the
control, the slider setting a fixed value, and the box's minimum bringing "auto" back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_gpuscope.compute import phase
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets.phase.dock import PhaseDock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "phase"
OPTICS = {
    "wavelength": 0.45,
    "na_illumination": 0.4,
    "na_detection": 0.55,
    "index_of_refraction": 1.0,
    "yx_pixel_size": 0.325,
    "z_pixel_size": 1.0,
}


@pytest.fixture(scope="module")
def stack():
    return np.load(FIXTURES / "waveorder_recon.npz")["stack_flat"]


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    widget = PhaseDock(viewer)
    qtbot.addWidget(widget)
    qtbot.waitUntil(lambda: not widget.is_running(), timeout=10_000)
    return widget


def _input(viewer, dock, stack):
    viewer.add_image(stack, name="bf", scale=(1.0, 0.325, 0.325))
    dock.reset_choices()
    dock.input_layer = next(c for c in dock.input.combo.choices if c.name == "bf")
    dock.set_params(phase.PhaseParams(**OPTICS, tilt_mode="none"))


def test_auto_is_the_default_and_the_slider_or_box_switch_it(viewer, dock):
    form = dock.form
    assert dock.params().regularization is None
    assert form.widgets["regularization"].native.text() == "auto"
    assert dock.reg_chosen.value.startswith("auto")
    dock.reg_slider.setValue(100)  # a fixed value: the middle of 1e-5 .. 1e-1
    assert dock.params().regularization == pytest.approx(1e-3)
    assert dock.reg_chosen.value == ""
    form.widgets["regularization"].value = form.widgets["regularization"].min
    assert dock.params().regularization is None
    dock.set_params(dock.params().replace(regularization=2e-3))
    assert dock.params().regularization == pytest.approx(2e-3)
    dock.set_params(dock.params().replace(regularization="auto"))
    assert dock.params().regularization is None


def test_a_run_shows_the_chosen_value_beside_the_control(viewer, qtbot, dock, stack):
    _input(viewer, dock, stack)
    expected = phase.reconstruct(stack, **OPTICS, tilt_mode="none", device="cpu")
    chosen = expected.regularization_chosen
    assert chosen is not None
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    name = f"phase · bf [reg=auto {chosen:.2g}]"
    np.testing.assert_array_equal(viewer.layers[name].data, expected.phase)
    assert dock.reg_chosen.value == f"auto → {chosen:.2g}"
    record = viewer.layers[name].metadata[PROVENANCE_KEY]
    assert record["parameters"]["regularization"] is None
    assert record["result"]["regularization_chosen"] == pytest.approx(chosen)


def test_the_preview_chooses_as_a_run_does(viewer, qtbot, dock, stack):
    _input(viewer, dock, stack)
    expected = phase.reconstruct(stack, **OPTICS, tilt_mode="none", device="cpu")
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "phase preview · bf" in viewer.layers, timeout=20_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=20_000)
    np.testing.assert_allclose(
        viewer.layers["phase preview · bf"].data[0], expected.phase, atol=1e-5
    )
    assert dock.reg_chosen.value == f"auto → {expected.regularization_chosen:.2g}"
