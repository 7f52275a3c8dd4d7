"""The new-user defects of issue 6, section 6: one test per item (docks on the CPU device)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from qtpy.QtCore import Qt
from qtpy.QtWidgets import QApplication

from napari_gpuscope.dock.messages import progress_text
from napari_gpuscope.methods import METHODS, PLUGIN
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets._dock_parts import focus_chain
from napari_gpuscope.widgets.tv.dock import TVDenoiseDock


def _finish(dock, qtbot, timeout=20_000):
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=timeout)


@pytest.fixture
def image(viewer):
    data = np.arange(48, dtype=np.float32).reshape(6, 8) + 1
    return viewer.add_image(data, name="cells", colormap="magma", contrast_limits=(5, 30))


@pytest.mark.parametrize("method_id", list(METHODS))
def test_no_dock_cuts_its_controls_off(make_napari_viewer, qtbot, cpu_device, method_id):
    # Seen in a screenshot: the eSRRF dock opened narrower than its form, which cut off the
    # Refresh and Cancel buttons and the right of every field. The scroll area never scrolls
    # sideways, so the viewport must hold the content's minimum width.
    viewer = make_napari_viewer(show=True)
    viewer.window._qt_window.resize(1600, 1000)
    dock = METHODS[method_id].dock_class()(viewer)
    viewer.window.add_dock_widget(dock, name=METHODS[method_id].title)
    for _ in range(3):
        QApplication.processEvents()
    viewport = dock.content.parentWidget()
    assert dock.content.minimumSizeHint().width() <= viewport.width(), (
        f"{method_id}: the form needs {dock.content.minimumSizeHint().width()} px, the dock "
        f"shows {viewport.width()} px: raise {type(dock).__name__}.dock_width"
    )
    assert dock.width() <= 440  # and it stays a side panel


def test_dock_keeps_a_sensible_width_on_an_empty_viewer(make_napari_viewer, qtbot, cpu_device):
    viewer = make_napari_viewer(show=True)
    viewer.window._qt_window.resize(1200, 800)
    dock = TVDenoiseDock(viewer)
    viewer.window.add_dock_widget(dock, name="TV denoise")
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    QApplication.processEvents()
    canvas = viewer.window._qt_viewer.canvas.native
    problem = dock.panel.status.text()
    assert problem.startswith("Run is disabled: no input image")
    assert dock.panel.status.wordWrap()
    assert dock.width() <= 400 and canvas.width() >= 500
    # an input whose problem is long to explain, with a long name, must not widen the dock
    viewer.add_image(np.zeros((8, 8, 3), np.uint8), rgb=True, name="a" * 120)
    QApplication.processEvents()
    assert "RGB" in dock.panel.status.text()
    assert dock.width() <= 400 and canvas.width() >= 500
    viewer.add_image(np.random.default_rng(0).random((64, 64)), name="cells")
    QApplication.processEvents()
    assert dock.panel.status.text().startswith("Ready")
    assert dock.width() <= 400 and canvas.width() >= 500


def test_results_share_the_input_display_linked(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    dock.run()
    _finish(dock, qtbot)
    result = viewer.layers["cells [Fake x2]"]
    assert result.colormap.name == "magma"
    assert tuple(result.contrast_limits) == (5, 30)  # not its own auto-contrast
    image.contrast_limits = (10, 60)
    assert tuple(result.contrast_limits) == (10, 60)  # linked both ways
    result.colormap = "viridis"
    assert image.colormap.name == "viridis"
    dock.panel.link_display.setChecked(False)  # the way to unlink
    image.contrast_limits = (0, 100)
    assert tuple(result.contrast_limits) == (10, 60)
    dock.panel.link_display.setChecked(True)
    image.contrast_limits = (1, 2)
    assert tuple(result.contrast_limits) == (1, 2)
    # relinking finds the input itself, not a layer that now has its old name
    image.name = "cells (renamed)"
    viewer.add_image(np.zeros((6, 8), np.float32), name="cells", contrast_limits=(0, 1))
    dock.panel.link_display.setChecked(False)
    dock.panel.link_display.setChecked(True)
    image.contrast_limits = (3, 4)
    assert tuple(result.contrast_limits) == (3, 4)
    assert tuple(viewer.layers["cells"].contrast_limits) == (0, 1)


def test_each_run_makes_a_new_layer_unless_replace_is_ticked(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    dock.run()
    _finish(dock, qtbot)
    dock.factor.value = 3.0
    dock.run()
    _finish(dock, qtbot)
    assert [ly.name for ly in viewer.layers] == ["cells", "cells [Fake x2]", "cells [Fake x3]"]
    np.testing.assert_allclose(viewer.layers["cells [Fake x2]"].data, image.data * 2)
    np.testing.assert_allclose(viewer.layers["cells [Fake x3]"].data, image.data * 3)
    dock.panel.replace_last.setChecked(True)
    dock.factor.value = 4.0
    dock.run()
    _finish(dock, qtbot)
    assert [ly.name for ly in viewer.layers] == ["cells", "cells [Fake x2]", "cells [Fake x4]"]
    np.testing.assert_allclose(viewer.layers["cells [Fake x4]"].data, image.data * 4)
    record = viewer.layers["cells [Fake x4]"].metadata[PROVENANCE_KEY]
    assert record["parameters"]["factor"] == 4.0


def test_tv_result_layers_are_named_with_the_strength(viewer, qtbot, cpu_device):
    viewer.add_image(np.random.default_rng(1).normal(1.0, 0.1, (64, 64)), name="cells")
    dock = TVDenoiseDock(viewer)
    qtbot.addWidget(dock)
    for strength in (1.0, 2.0):
        dock.set_param("strength", strength)
        assert dock.run()
        _finish(dock, qtbot)
    assert [ly.name for ly in viewer.layers] == [
        "cells",
        "TV denoised · cells [s=1]",
        "TV denoised · cells [s=2]",
    ]


def test_one_preview_layer_reused_and_removed(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    added = []
    viewer.layers.events.inserted.connect(lambda e: added.append(e.value.name))
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "Fake preview · cells" in viewer.layers)
    _finish(dock, qtbot)
    preview = viewer.layers["Fake preview · cells"]
    for value in (3.0, 4.0):
        dock.factor.value = value
        qtbot.waitUntil(lambda v=value: dock.starts[-1]["factor"] == v, timeout=5000)
        _finish(dock, qtbot)
    assert added == ["Fake preview · cells"]  # one layer, reused
    assert viewer.layers["Fake preview · cells"] == preview
    np.testing.assert_allclose(preview.data, image.data * 4.0)
    assert preview.colormap.name == "magma"  # shown like its input
    assert dock.input_layer == image  # the new preview layer did not become the input
    dock.panel.live_preview.setChecked(False)
    assert "Fake preview · cells" not in viewer.layers


def test_preview_layer_name_is_not_truncated(make_napari_viewer, qtbot, cpu_device):
    viewer = make_napari_viewer(show=True)
    viewer.add_image(np.random.default_rng(0).random((32, 32)), name="nucleus 1 t0")
    dock = TVDenoiseDock(viewer)
    viewer.window.add_dock_widget(dock)
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · nucleus 1 t0" in viewer.layers, timeout=20_000)
    _finish(dock, qtbot)
    layer_list = viewer.window._qt_viewer.layers
    metrics = layer_list.fontMetrics()
    name = viewer.layers[-1].name
    # napari elides names wider than the name column (list width minus thumbnail and icons)
    assert metrics.horizontalAdvance(name) < layer_list.viewport().width() - 120


def test_input_follows_new_and_selected_layers_not_results(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    assert dock.input_layer == image
    other = viewer.add_image(np.ones((6, 8), np.float32), name="other")
    assert dock.input_layer == other  # newly added
    viewer.layers.selection.active = image
    assert dock.input_layer == image  # selected
    dock.run()
    _finish(dock, qtbot)
    result = viewer.layers["cells [Fake x2]"]
    viewer.layers.selection.active = result  # looking at a result...
    assert dock.input_layer == image  # ...does not make it the input


def test_run_is_disabled_with_the_reason(viewer, qtbot, fake_dock, cpu_device, errors):
    dock = fake_dock()
    assert not dock.panel.run_button.isEnabled()
    assert dock.panel.status.text().startswith("Run is disabled: no input image")
    assert "no input image" in dock.panel.run_button.toolTip()
    viewer.add_image(np.zeros((8, 8, 3), np.uint8), rgb=True, name="photo")
    assert not dock.panel.run_button.isEnabled()
    assert "RGB" in dock.panel.status.text()
    viewer.add_image(np.zeros((8, 8), np.float32), name="cells")
    assert dock.panel.run_button.isEnabled()
    assert dock.panel.status.text() == "Ready: Run processes 'cells'."
    viewer.add_image(np.zeros((8, 8), np.float32), name="more cells")  # the newest: the input
    assert dock.input_layer.name == "more cells"
    assert dock.panel.status.text() == "Ready: Run processes 'more cells'."  # not 'cells'
    assert errors == []


def test_enter_runs_escape_cancels_and_tab_reads_top_to_bottom(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    dock.gate = threading.Event()
    field = dock.factor.native
    qtbot.keyClick(field, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "Fake running · cells" in viewer.layers)  # Enter ran it
    assert dock.runner.tag == "run"
    qtbot.keyClick(field, Qt.Key.Key_Escape)
    assert not dock.is_running() and "Cancelled" in dock.panel.status.text()
    dock.gate.set()
    qtbot.waitUntil(dock.closed.is_set)
    # with live preview on, Enter refreshes the preview instead of running
    dock.gate = None
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "Fake preview · cells" in viewer.layers)
    _finish(dock, qtbot)
    dock.starts.clear()
    qtbot.keyClick(dock.input.combo.native, Qt.Key.Key_Enter)
    qtbot.waitUntil(lambda: bool(dock.starts))
    assert [s["preview"] for s in dock.starts] == [True]
    chain = focus_chain(dock.content.layout())
    panel = dock.panel
    order = [dock.input.combo.native, panel.live_preview, panel.run_button, panel.cancel_button]
    positions = [next(i for i, w in enumerate(chain) if w is widget) for widget in order]
    assert positions == sorted(positions)
    # The export row, then the Live acquisition part (its toggle first), last.
    exports = chain.index(dock.panel.figure_button)
    assert chain[exports + 1] is dock.panel.save_tiff_button
    live_part = chain[exports + 2 :]
    assert live_part[0] is dock.live_acquisition.header
    assert all(dock.live_acquisition.isAncestorOf(widget) for widget in live_part)


def test_progress_in_words_and_the_activity_title(viewer, qtbot, image, fake_dock, cpu_device):
    from napari_gpuscope.compute.jobs import Progress

    assert progress_text(Progress(0.42, "iteration 40/200")) == "42 % - iteration 40/200"
    assert "no estimate" in progress_text(Progress(None, "estimating"))
    dock = fake_dock()
    dock.gate = threading.Event()
    dock.run()
    qtbot.waitUntil(lambda: dock.panel.progress.text().startswith("25 %"))
    assert dock.panel.progress_bar.maximum() > 0 and dock.panel.progress_bar.value() == 250
    qtbot.waitUntil(lambda: dock.runner._pbar is not None and "step 1" in dock.runner._pbar.desc)
    assert dock.runner._pbar.desc.startswith("Fake: cells")  # napari's entry keeps the title
    dock.gate.set()
    _finish(dock, qtbot)
    assert dock.panel.progress.isHidden()


def test_indeterminate_progress_is_shown_as_such(
    viewer, qtbot, image, fake_dock, fake_result, cpu_device
):
    from napari_gpuscope.compute.jobs import Progress

    dock = fake_dock()
    gate = threading.Event()

    def unknown_length(layer, params, device):
        def job():
            yield Progress(None, "estimating the camera")
            gate.wait(10)
            yield Progress(None, "still estimating")
            return fake_result(np.asarray(layer.data, np.float32), 0)

        return job()

    dock.make_job = unknown_length
    dock.run()
    qtbot.waitUntil(lambda: "estimating the camera" in dock.panel.progress.text())
    assert "no estimate" in dock.panel.progress.text()
    bar = dock.panel.progress_bar
    assert (bar.minimum(), bar.maximum()) == (0, 0)  # busy bar
    qtbot.waitUntil(lambda: dock.runner._pbar is not None and dock.runner._pbar.total == 0)
    gate.set()
    _finish(dock, qtbot)


def _elided(dock) -> list[str]:
    """Label and combo texts wider than their widget at the dock's width."""
    from qtpy.QtWidgets import QComboBox, QLabel

    cut = []
    for label in dock.findChildren(QLabel):
        text = label.text()
        if not label.isVisibleTo(dock) or label.wordWrap() or not text or "<" in text:
            continue
        if label.fontMetrics().horizontalAdvance(text) > label.contentsRect().width() + 1:
            cut.append(f"label {text!r}")
    for combo in dock.findChildren(QComboBox):
        if not combo.isVisibleTo(dock):
            continue
        room = combo.width() - 34  # the frame, padding and drop-down arrow of napari's style
        for index in range(combo.count()):
            text = combo.itemText(index)
            if combo.fontMetrics().horizontalAdvance(text) > room:
                cut.append(f"combo item {text!r}")
    return cut


@pytest.mark.parametrize("method_id", list(METHODS))
def test_no_label_or_choice_is_elided_at_the_docks_width(
    make_napari_viewer, qtbot, cpu_device, method_id
):
    """Issue 18: "slice 0 = highest z (wav", "manual (zenith, azimutl" and a cut title."""
    viewer = make_napari_viewer(show=True)
    viewer.window._qt_window.resize(1600, 1000)
    spec = METHODS[method_id]
    # As a user opens it (napari titles it "<title> (napari-gpuscope)").
    widget, dock = viewer.window.add_plugin_dock_widget(PLUGIN, spec.title)
    dock.form.advanced.expand(animate=False)  # the advanced rows too
    for _ in range(3):
        QApplication.processEvents()
    assert _elided(dock) == []
    title = widget.titleBarWidget().title
    assert title.fontMetrics().horizontalAdvance(title.text()) <= title.contentsRect().width()


def test_values_restored_from_the_last_session_are_shown_and_reset_in_one_click(
    viewer, qtbot, image, fake_dock, cpu_device
):
    """Issue 18: a sensitivity of 4 from a preview test silently became the next launch's Run
    value. The defaults are the model's (the oracle), read from its fields."""
    from napari_gpuscope.widgets._controls._changes import CHANGED_COLOUR

    first = fake_dock()
    assert not first.changes.isVisibleTo(first)  # all defaults: nothing to say
    first.set_param("factor", 3.5)
    default = type(first.params()).info("factor").default
    assert first.changes.isVisibleTo(first)
    assert (
        first.changes.text.text() == f"Changed from the defaults: Factor 3.5 (default {default:g})"
    )
    second = fake_dock()  # the next launch: the settings come back, and say so
    assert second.params().factor == 3.5
    assert second.changes.isVisibleTo(second) and "Factor 3.5" in second.changes.text.text()
    assert CHANGED_COLOUR in second.form.label_of("factor").styleSheet()
    assert CHANGED_COLOUR not in second.form.label_of("steps").styleSheet()
    second.changes.button.click()
    assert second.params().factor == default
    assert not second.changes.isVisibleTo(second)
    assert CHANGED_COLOUR not in second.form.label_of("factor").styleSheet()
    assert fake_dock().params().factor == default  # and forgotten for the launch after


def test_the_status_and_plot_say_which_job_they_describe(
    viewer, qtbot, image, fake_dock, cpu_device
):
    """Issue 18: after Live preview was switched off the status still described the preview,
    and a preview's status sat above the plot of the full run."""
    dock = fake_dock()
    assert dock.run()
    _finish(dock, qtbot)
    assert dock.panel.plot.title == "Run: " and dock.panel.plot.values("loss")
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "Fake preview · cells" in viewer.layers)
    _finish(dock, qtbot)
    qtbot.waitUntil(lambda: dock.panel.status.text().lower().startswith("preview"), timeout=5000)
    assert dock.panel.plot.title == "Last run: "  # the curve is the run's, said so
    dock.panel.live_preview.setChecked(False)
    assert dock.panel.status.text() == "Live preview off. Ready: Run processes 'cells'."
    assert dock.run()
    _finish(dock, qtbot)
    assert dock.panel.plot.title == "Run: "
