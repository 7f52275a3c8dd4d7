"""The phase dock with the TV regularizer: the automatic TV strength is the default, a run
shows the value chosen in the box, the status line and the layer's provenance (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest
from test_phase_dock_auto import OPTICS, _input, dock, stack  # noqa: F401 (fixtures)

from napari_gpuscope.compute import phase
from napari_gpuscope.provenance import PROVENANCE_KEY


def test_a_tv_run_names_the_chosen_strength_in_the_box_status_and_provenance(
    viewer,
    qtbot,
    dock,  # noqa: F811
    stack,  # noqa: F811
):
    _input(viewer, dock, stack)
    params = dock.params().replace(regularizer="tv", tv_iterations=3)
    dock.set_params(params)
    assert dock.params().tv_strength is None  # "auto" by default
    assert dock.form.widgets["tv_strength"].native.text() == "auto"
    expected = phase.reconstruct(stack, params=dock.params(), device="cpu")
    chosen = expected.tv_choice.strength
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    name = f"phase · bf [TV=auto {chosen:.2g}]"
    np.testing.assert_array_equal(viewer.layers[name].data, expected.phase)
    assert dock.form.widgets["tv_strength"].native.text() == f"auto → {chosen:.2g}"
    assert f"TV auto → {chosen:.2g}" in dock.panel.status.text()
    record = viewer.layers[name].metadata[PROVENANCE_KEY]
    assert record["automatic"]["TV strength"] == f"{chosen:.2g}"
    assert record["result"]["tv_strength_chosen"] == pytest.approx(chosen)


def test_another_input_no_longer_shows_the_previous_choice(
    viewer,
    qtbot,
    dock,  # noqa: F811
    stack,  # noqa: F811
):
    """The values chosen for one stack are not shown beside the controls of the next."""
    _input(viewer, dock, stack)
    dock.set_params(dock.params().replace(regularizer="tv", tv_iterations=3))
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    assert dock.form.widgets["tv_strength"].native.text().startswith("auto → ")
    assert dock.reg_chosen.value.startswith("auto → ")
    dock.reset_choices()  # napari's layers changed: the same input, its values still shown
    assert dock.form.widgets["tv_strength"].native.text().startswith("auto → ")
    viewer.add_image(stack[:, ::-1].copy(), name="other", scale=(1.0, 0.325, 0.325))
    dock.reset_choices()
    dock.input_layer = next(c for c in dock.input.combo.choices if c.name == "other")
    assert dock.form.widgets["tv_strength"].native.text() == "auto"
    assert dock.reg_chosen.value == "auto: chosen per stack by a preview or run"
