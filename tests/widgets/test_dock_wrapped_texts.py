"""Texts that wrap are never clipped: after a long status appears in a dock that scrolls, every
word-wrapped label is as tall as its text needs (issue 30 item 5: after Autotune the flat-field
dock's autotune text and its "Changed from the defaults" row were cut at top and bottom, the
rows squeezed into the scroll area's old height)."""

from __future__ import annotations

import pytest
from qtpy.QtWidgets import QLabel

from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock

LONG = (
    "Autotune chose smoothness 1.75 (17 of 17 candidates converged); then converged after 9 "
    "reweighting passes (flatfield 0.431-1.335, smoothness 1.75, darkfield: none). Took 41.7 s."
)


def _clipped(widget, labels=None) -> list[str]:
    """Visible word-wrapped labels (of ``widget``, or ``labels``) shorter than their text
    needs at their width."""
    short = []
    for label in widget.findChildren(QLabel) if labels is None else labels:
        if label.isVisibleTo(widget) and label.wordWrap() and label.text():
            need = label.heightForWidth(label.width())
            if label.height() < need:
                short.append(f"{label.text()[:40]!r}: {label.height()} < {need} px")
    return short


@pytest.mark.parametrize("height", [600, 900])
def test_long_texts_set_while_the_dock_is_shown_are_never_clipped(
    viewer, qtbot, cpu_device, height
):
    dock = FlatfieldDock(viewer)
    qtbot.addWidget(dock)
    dock.resize(360, height)
    dock.show()
    qtbot.waitExposed(dock)
    qtbot.wait(50)
    dock.autotune_status.setText(LONG)
    dock.set_param("smoothness_flatfield", 1.75)  # "Changed from the defaults: ..."
    qtbot.waitUntil(lambda: not _clipped(dock), timeout=10_000)


def test_the_autotune_texts_are_whole_after_a_real_autotune(viewer, qtbot, cpu_device):
    """The flat-field dock inside napari's window, a real (small) autotune, then its texts."""
    from napari_gpuscope.sample_data._shading import shaded_tiles

    tiles = shaded_tiles(12, (64, 64), seed=3).images
    viewer.add_image(tiles, name="a tile set with a long name")
    dock = FlatfieldDock(viewer)
    viewer.window.add_dock_widget(dock, area="right")
    viewer.window._qt_window.resize(1600, 1000)
    viewer.window._qt_window.show()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    assert dock.autotune()
    qtbot.waitUntil(lambda: not dock.tuning, timeout=120_000)
    assert "Autotune chose" in dock.autotune_status.text()
    # Gated on the layout, never a time: it may take a few event-loop rounds on a loaded CPU.
    qtbot.waitUntil(lambda: not _clipped(dock), timeout=10_000)


@pytest.mark.parametrize("method", ["tv", "phase", "esrrf"])
def test_every_docks_wrapped_rows_grow_with_their_text(viewer, qtbot, cpu_device, method):
    """Each dock's word-wrapped rows inside napari's window (TV's σ and weight, phase's chosen
    regularization, eSRRF's drift trace note), given a long text while shown."""
    from qtpy.QtWidgets import QLabel

    from napari_gpuscope.methods import method as spec_of

    dock = spec_of(method).dock_class()(viewer)
    viewer.window.add_dock_widget(dock, area="right")
    viewer.window._qt_window.resize(1600, 1000)
    viewer.window._qt_window.show()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    rows = [label for label in dock.form.findChildren(QLabel) if label.wordWrap()]
    assert rows
    for label in rows:
        label.setText(LONG)
    qtbot.waitUntil(lambda: not _clipped(dock, rows), timeout=10_000)
