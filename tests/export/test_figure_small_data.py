"""Small data exported at publication size, and panel titles naming only what a reader sees
(issue 30, item 3).

Oracles: the panel at the automatic zoom must equal the panel rendered at zoom 1 with every
pixel repeated into a square block (``np.kron``), and every block must be one colour (run
lengths); the data pixels, mapped through the gray colormap by hand, give the expected colours;
the scale bar's length in figure pixels is its physical length / the pixel size x the zoom,
measured on the drawn bar. Which layers a reader sees follows the rules written in
:mod:`napari_gpuscope.export._colorbars`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from napari_gpuscope.export._options import MAX_ZOOM, PUBLICATION_WIDTH_PX, split_zoom
from napari_gpuscope.export.figure import FigureOptions, render_figure
from napari_gpuscope.provenance import PROVENANCE_KEY

RNG = np.random.default_rng(302)


@pytest.fixture
def shown(make_napari_viewer):
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(640, 480)
    return viewer


def _panel(figure, index: int = 0) -> np.ndarray:
    box = figure.info["panels"][index]["box"]
    x, y, w, h = box["x"], box["y"], box["width"], box["height"]
    return figure.image[y : y + h, x : x + w].astype(int)


@pytest.mark.parametrize("side", [32, 64])
def test_small_data_reach_publication_width_with_square_sharp_pixels(shown, side):
    data = RNG.integers(0, 256, (side, side)).astype(np.float32)
    pixel_um = 0.065
    shown.add_image(
        data, scale=(pixel_um, pixel_um), units="um", colormap="gray", contrast_limits=(0, 255)
    )

    figure = render_figure(shown, FigureOptions())
    zoom = figure.plan.zoom
    assert zoom > MAX_ZOOM  # beyond what napari renders: the case this test is about
    rendered, repeat = figure.info["region"]["rendered_zoom_and_repeat"]
    assert rendered * repeat == zoom and rendered <= MAX_ZOOM < zoom
    assert zoom * side >= PUBLICATION_WIDTH_PX and figure.image.shape[1] >= PUBLICATION_WIDTH_PX
    assert figure.plan.dpi == 300.0
    panel = _panel(figure)
    assert panel.shape[:2] == (side * zoom, side * zoom)

    # Every data pixel is a zoom x zoom block of one colour: no interpolation at block edges.
    blocks = panel.reshape(side, zoom, side, zoom, 3)
    assert (blocks.max(axis=(1, 3)) == blocks.min(axis=(1, 3))).all()
    # The blocks are the data pixels, in place (gray colormap, limits 0-255: level = value).
    assert np.abs(blocks[:, 0, :, 0, 1] - data).max() <= 1

    # The same as the panel at zoom 1 with each pixel repeated (np.kron), exactly.
    native = _panel(render_figure(shown, FigureOptions(zoom=1, scale_bar=False)))
    expected = np.stack(
        [np.kron(native[..., c], np.ones((zoom, zoom), dtype=int)) for c in range(3)], axis=-1
    )
    np.testing.assert_array_equal(panel, expected)

    # The scale bar: its physical length over the pixel size, times the zoom, as drawn.
    bar = figure.info["scale_bar"]
    assert bar["unit"] == "µm"
    assert bar["pixels"] == round(bar["length"] / pixel_um * zoom)
    row = figure.image[bar["box"]["y"] + 1].astype(int)
    ink = np.all(row == row[bar["box"]["x"]], axis=1) & (row.sum(axis=1) != 0)
    start = bar["box"]["x"]
    assert ink[start : start + bar["pixels"]].all()
    assert not ink[start - 1] and not ink[start + bar["pixels"]]


def test_split_zoom_renders_within_the_limit_and_repeats_exactly():
    for zoom in range(1, 200):
        rendered, repeat = split_zoom(zoom)
        assert rendered * repeat == zoom and 1 <= rendered <= MAX_ZOOM
        assert repeat == 1 or zoom > MAX_ZOOM


def test_automatic_zoom_is_the_smallest_reaching_the_width_up_to_a_split(shown):
    """Odd widths need a zoom napari can render and then repeat: at most one repeat more than
    the smallest zoom that reaches the width."""
    shown.add_image(RNG.random((17, 23)).astype(np.float32))
    zoom = render_figure(shown, FigureOptions(scale_bar=False)).plan.zoom
    needed = math.ceil(PUBLICATION_WIDTH_PX / 23)
    rendered, repeat = split_zoom(zoom)
    assert needed <= zoom < needed + repeat and rendered <= MAX_ZOOM


def _titles(figure) -> list[str]:
    return [" ".join(panel["title"]) for panel in figure.info["panels"]]


def test_titles_name_only_the_layers_a_reader_sees(shown):
    data = RNG.random((40, 40)).astype(np.float32)
    shown.add_image(data, name="cells")  # under the opaque result below: not seen
    shown.add_image(data, name="faint", opacity=0.0)  # invisible by its opacity
    shown.add_image(data, name="gone", visible=False)
    shown.add_image(data, name="TV denoised · cells [s=1]", blending="opaque")
    shown.add_vectors(
        np.array([[[20, 20], [5, 5]]], dtype=float), name="tilt · cells", edge_width=2
    )

    figure = render_figure(shown, FigureOptions(titles=True, scale_bar=False))

    assert _titles(figure) == ["TV denoised · cells [s=1] + tilt"]
    # The panel still draws every visible layer: hidden is about the title, not the picture.
    assert figure.info["panels"][0]["layers"] == [
        "cells",
        "faint",
        "TV denoised · cells [s=1]",
        "tilt · cells",
    ]


def test_titles_keep_layers_seen_through_a_translucent_one_and_per_grid_panel(shown):
    data = RNG.random((40, 40)).astype(np.float32)
    shown.add_image(data, name="raw")
    shown.add_image(data, name="overlay", blending="additive", colormap="magenta")
    shown.add_image(data, name="second", blending="opaque")
    figure = render_figure(shown, FigureOptions(titles=True, scale_bar=False))
    assert _titles(figure) == ["second"]  # the opaque top layer hides both below

    shown.layers["second"].blending = "additive"
    figure = render_figure(shown, FigureOptions(titles=True, scale_bar=False))
    assert _titles(figure) == ["second / overlay / raw"]

    shown.canvas.grid.enabled = True  # one layer per panel: each title its own layer
    figure = render_figure(shown, FigureOptions(titles=True, scale_bar=False))
    assert sorted(_titles(figure)) == ["overlay", "raw", "second"]


def test_plane_caption_of_a_plain_count_says_the_index_once(shown):
    """Seen under the flat-field result: "tile = 23 (index 23 of 48)"."""
    shown.add_image(RNG.random((48, 20, 20)).astype(np.float32), axis_labels=("tile", "y", "x"))
    shown.dims.current_step = (23, 10, 10)
    assert render_figure(shown, FigureOptions()).info["caption"] == "tile index 23 of 48"


def test_plane_caption_ignores_an_axis_the_seen_result_has_one_sample_on(shown):
    """Seen under the eSRRF dock's result, one time point of all 100 frames (shape (1, Y, X),
    its time step 100 s): "t = 49 s (index 49 of 100)"."""
    stack = RNG.random((100, 16, 16)).astype(np.float32)
    shown.add_image(
        stack, scale=(1.0, 0.1, 0.1), units=("s", "um", "um"), axis_labels="tyx", name="stack"
    )
    result = shown.add_image(
        stack.mean(axis=0, keepdims=True),
        scale=(100.0, 0.1, 0.1),
        translate=(49.5, 0.0, 0.0),
        units=("s", "um", "um"),
        name="mean",
    )
    shown.dims.current_step = (49, 8, 8)
    assert render_figure(shown, FigureOptions()).info["caption"] == ""  # the stack is hidden

    result.opacity = 0.5  # now the stack shows through: its frame matters again
    assert render_figure(shown, FigureOptions()).info["caption"] == "t = 49 s (index 49 of 100)"


def test_caption_does_not_repeat_an_automatic_value_the_settings_say(shown):
    """Seen on the phase export: "phase of 21 planes (reg=auto 0.0093); automatic:
    regularization 0.0093"."""
    record = {"method": "phase", "input": "z", "automatic": {"regularization": "0.0093"}}
    shown.add_image(
        RNG.random((16, 16)).astype(np.float32),
        name="phase · z [reg=auto 0.0093]",
        metadata={PROVENANCE_KEY: record},
    )
    caption = render_figure(shown, FigureOptions()).info["caption"]
    assert caption == "phase (reg=auto 0.0093)"

    record = {**record, "automatic": {"regularization": "0.0093", "tilt": "0.2 rad"}}
    shown.layers[0].metadata = {PROVENANCE_KEY: record}
    caption = render_figure(shown, FigureOptions()).info["caption"]
    assert caption == "phase (reg=auto 0.0093); automatic: tilt 0.2 rad"
