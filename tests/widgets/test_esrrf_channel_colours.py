"""The eSRRF dock's channels keep their input layers' colormaps (issue 30 item 2).

napari opens a multi-channel file as one layer per channel, each in its colour; the dock
reconstructs the input and its "More channels" as channels 0, 1, ... The oracle is the input
layers' own colormaps (their names, and their colours for a colormap made from a colour);
layers that do not tell the channels apart (all gray) keep the distinct default colours.
"""

from __future__ import annotations

import numpy as np
import pytest
from dock_helpers import open_dock, select_input

from napari_gpuscope.compute.esrrf import CHANNEL_COLORMAPS
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

SETTINGS = "M2 R1.5 S1"


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    return open_dock(EsrrfDock, viewer, qtbot)


def _frames(seed):
    return np.random.default_rng(seed).poisson(100, (20, 24, 24)).astype(np.float32)


def _run_channels(dock, qtbot, viewer, names):
    select_input(dock, names[0])
    dock.channel_layers.select([viewer.layers[name] for name in names[1:]])
    dock.set_param("magnification", 2)
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    return [viewer.layers[f"eSRRF · {name} [{SETTINGS}]"] for name in names]


def test_the_channels_of_a_file_keep_the_colours_napari_opened_them_in(viewer, qtbot, dock):
    """A two-channel file as napari opens it (``channel_axis``), in colours of the file."""
    data = np.stack([_frames(1), _frames(2)])
    viewer.add_image(
        data, channel_axis=0, name=["cells c0", "cells c1"], colormap=["cyan", "yellow"]
    )
    results = _run_channels(dock, qtbot, viewer, ["cells c0", "cells c1"])
    assert [layer.colormap.name for layer in results] == ["cyan", "yellow"]
    means = [viewer.layers[f"widefield mean · cells c{c}"] for c in (0, 1)]
    assert [layer.colormap.name for layer in means] == ["cyan", "yellow"]
    assert {layer.blending for layer in results} == {"additive"}


def test_a_colormap_made_from_a_colour_is_kept(viewer, qtbot, dock):
    viewer.add_image(_frames(1), name="first", colormap="green")
    orange = viewer.add_image(_frames(2), name="second", colormap="#ff8000")
    results = _run_channels(dock, qtbot, viewer, ["first", "second"])
    assert results[0].colormap.name == "green"
    np.testing.assert_allclose(results[1].colormap.colors, orange.colormap.colors)
    np.testing.assert_allclose(results[1].colormap.colors[-1], (1.0, 128 / 255, 0.0, 1.0))


def test_gray_layers_take_the_distinct_default_colours(viewer, qtbot, dock):
    for name, seed in (("first", 1), ("second", 2), ("third", 3)):
        viewer.add_image(_frames(seed), name=name)  # gray, as napari adds an image
    results = _run_channels(dock, qtbot, viewer, ["first", "second", "third"])
    assert [layer.colormap.name for layer in results] == list(CHANNEL_COLORMAPS[:3])
