"""The docks' texts use the words their controls use (issue 30 item 7): the "changed from the
defaults" row says a choice by its label, a checkbox as on/off and a number with its unit,
never Python's True/False/None; progress beside "no estimate" reads as no fraction."""

from __future__ import annotations

import numpy as np
from dock_helpers import open_dock, select_input

from napari_gpuscope.compute.jobs import Progress
from napari_gpuscope.dock.messages import progress_text
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock
from napari_gpuscope.widgets.tv.dock import TVDenoiseDock

PYTHON_WORDS = ("True", "False", "None")


def _choice_text(combo, value):
    """What a combo box shows for ``value`` (read from the control itself: the oracle)."""
    native = combo.native
    return native.itemText(next(i for i in range(native.count()) if native.itemData(i) == value))


def test_changes_row_says_choices_and_checkboxes_as_their_controls_do(viewer, qtbot, cpu_device):
    dock = open_dock(TVDenoiseDock, viewer, qtbot)
    viewer.add_image(np.ones((16, 16), np.float32), name="cells")
    select_input(dock, "cells")
    combo = dock.form.widgets["noise_model"]
    combo.value = "poisson"  # also ticks "Non-negative" (photon counts)
    text = dock.changes.text.text()
    poisson, gaussian = _choice_text(combo, "poisson"), _choice_text(combo, "gaussian")
    assert f"Noise model {poisson} (default {gaussian})" in text, text
    assert "Non-negative on (default off)" in text, text
    assert not any(word in text for word in PYTHON_WORDS), text


def test_changes_row_gives_a_number_its_unit(viewer, qtbot, cpu_device):
    dock = open_dock(TVDenoiseDock, viewer, qtbot)
    dock.form.widgets["noise_model"].value = "poisson"
    dock.form.widgets["gain"].value = 2.5
    info = dock.params_class.info("gain")
    assert info.unit  # ADU/photon: the oracle is the model's unit
    text = dock.changes.text.text()
    assert f"{info.label} 2.5 {info.unit} (default auto)" in text or "more" in text, text


def test_drift_correction_is_said_with_the_sections_choice(viewer, qtbot, cpu_device):
    dock = open_dock(EsrrfDock, viewer, qtbot)
    dock.drift.set_mode("trace")
    text = dock.changes.text.text()
    chosen = dock.drift.mode.currentText()
    assert f"Drift correction {chosen} (default Off)" in text, text
    assert not any(word in text for word in PYTHON_WORDS), text
    assert dock.drift.mode.itemText(0) == "Off"  # the default's word is the choice's own


def test_unknown_time_left_is_not_shown_beside_a_fraction():
    text = progress_text(Progress(None, "tilt: iteration 3, stops when converged (at most 40)"))
    assert "no estimate" in text and "3/40" not in text


def test_spacing_caption_says_in_words_what_equal_steps_mean():
    import napari.layers

    from napari_gpuscope.widgets._controls._spacing import spacing_caption

    flat = napari.layers.Image(np.zeros((8, 8)), scale=(0.1, 0.1), units=("um", "um"))
    caption = spacing_caption(flat)
    assert "(pixels 0.1 µm)" in caption and "the same step along every axis" in caption


def test_tv_noise_level_has_the_layers_intensity_unit(viewer, qtbot, cpu_device):
    dock = open_dock(TVDenoiseDock, viewer, qtbot)
    noisy = np.random.default_rng(0).normal(100.0, 5.0, (64, 64)).astype(np.float32)
    viewer.add_image(noisy, name="raw", metadata={"intensity_unit": "ADU"})
    select_input(dock, "raw")
    qtbot.waitUntil(lambda: "≈" in dock.weight_label.value, timeout=10_000)
    sigma = float(dock.weight_label.value.split("≈ ")[1].split(" ")[0])
    assert abs(sigma - 5.0) < 0.5  # the simulated noise (Immerkaer's estimate, 64 x 64)
    assert f"≈ {sigma:.3g} ADU →" in dock.weight_label.value
