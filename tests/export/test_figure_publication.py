"""Figures at publication size (issue 30 item 3): width whatever the viewer's zoom, scale-bar
label and caption never cut, short colorbar labels, colorbars only for layers a reader can
see, and a caption that describes the result rather than the input's current frame.

Oracles: the pixel width follows from the data width and the target (1,600 px at 300 dpi);
drawn text is compared with the same text rendered independently by Pillow; which layer hides
which follows the rules written in :mod:`napari_gpuscope.export._colorbars`, checked case by case
with real napari layers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image, ImageDraw

from napari_gpuscope.export import _drawing
from napari_gpuscope.export._colorbars import hides
from napari_gpuscope.export._layout import FONT_PT
from napari_gpuscope.export._options import PUBLICATION_WIDTH_PX
from napari_gpuscope.export.figure import FigureOptions, render_figure
from napari_gpuscope.provenance import PROVENANCE_KEY

RNG = np.random.default_rng(30)


@pytest.fixture
def shown(make_napari_viewer):
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(640, 480)
    return viewer


def _face(dpi: float = 300.0) -> _drawing.Face:
    return _drawing.font(math.ceil(FONT_PT * dpi / 72 - 1e-9))


def _text_ink(text: str, face: _drawing.Face) -> np.ndarray:
    """Where Pillow inks ``text`` (white on black), rendered independently of the figure."""
    image = Image.new("RGB", (_drawing.text_width(face, text), _drawing.line_height(face)))
    ImageDraw.Draw(image).text((0, 0), text, font=face, fill=(255, 255, 255), anchor="la")
    return np.asarray(image)


@pytest.mark.parametrize("camera_zoom", [1.0, 4.0])
def test_default_figure_is_publication_size_whatever_the_viewer_zoom(shown, camera_zoom):
    shown.add_image(RNG.random((90, 120)).astype(np.float32), scale=(0.1, 0.1), units="um")
    shown.camera.zoom = camera_zoom

    figure = render_figure(shown, FigureOptions(colorbar=True))

    # The smallest whole zoom that makes 120 data pixels at least 1,600 figure pixels.
    zoom = math.ceil(PUBLICATION_WIDTH_PX / 120)
    assert figure.plan.zoom == zoom == 14
    assert figure.info["panel_size"] == [90 * zoom, 120 * zoom]
    assert figure.image.shape[1] >= PUBLICATION_WIDTH_PX
    assert figure.plan.dpi == 300.0


def test_explicit_zoom_is_kept(shown):
    shown.add_image(RNG.random((40, 50)).astype(np.float32), scale=(0.1, 0.1), units="um")
    figure = render_figure(shown, FigureOptions(zoom=4, scale_bar=False))
    assert figure.plan.zoom == 4
    assert figure.info["panel_size"] == [160, 200]


def test_scale_bar_label_is_whole_even_on_a_thumbnail(shown):
    """Seen: "1 µr" under a 1x figure, its label cut at the figure's edge."""
    shown.theme = "dark"
    shown.add_image(RNG.random((40, 48)).astype(np.float32), scale=(0.05, 0.05), units="um")

    figure = render_figure(shown, FigureOptions(zoom=1, dpi=300))

    bar = figure.info["scale_bar"]
    box = bar["box"]
    face = _face()
    expected = _text_ink(bar["label"], face)
    assert box["label_width"] > bar["pixels"]  # the label is wider than its bar
    x, y = box["label_x"], box["label_y"]
    assert x >= 0 and x + expected.shape[1] <= figure.image.shape[1]
    drawn = figure.image[y : y + expected.shape[0], x : x + expected.shape[1]]
    np.testing.assert_array_equal(drawn, expected)


def _result(viewer, name, data, *, record, **kwargs):
    metadata = {PROVENANCE_KEY: record, **kwargs.pop("metadata", {})}
    return viewer.add_image(data, name=name, metadata=metadata, **kwargs)


def _esrrf_scene(viewer, *, automatic=None):
    stack = viewer.add_image(
        RNG.random((100, 24, 32)).astype(np.float32),
        name="stack",
        scale=(1.0, 0.1, 0.1),
        units=("s", "um", "um"),
        axis_labels=("t", "y", "x"),
    )
    record = {"method": "esrrf", "input": "stack", "parameters": {"magnification": 2}}
    if automatic is not None:
        record["automatic"] = automatic
    # Twice the pixels over the same field of view: it covers the input entirely.
    result = _result(
        viewer,
        "eSRRF · stack [mag=2 r=1.5]",
        RNG.random((48, 64)).astype(np.float32),
        record=record,
        scale=(0.05, 0.05),
        translate=(-0.025, -0.025),
        units=("um", "um"),
    )
    viewer.dims.current_step = (49, 0, 0)
    return stack, result


def test_caption_describes_the_reconstruction_not_the_input_frame(shown):
    """Seen: "t = 49 s (index 49 of 100)" under a reconstruction of all 100 frames."""
    _esrrf_scene(shown, automatic={"sensitivity": "2", "drift correction": "off"})
    figure = render_figure(shown, FigureOptions(scale_bar=False))
    caption = figure.info["caption"]
    assert (
        caption
        == "eSRRF of 100 frames (mag=2 r=1.5); automatic: sensitivity 2, drift correction off"
    )
    assert "index 49" not in caption


def test_caption_without_automatic_choices_and_with_the_input_shown(shown):
    _esrrf_scene(shown)
    shown.canvas.grid.enabled = True  # the input has a panel of its own: its frame matters
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert caption == "eSRRF of 100 frames (mag=2 r=1.5). Plane shown: t = 49 s (index 49 of 100)"


def test_arrows_carrying_their_picture_s_record_add_no_sentence(shown):
    """Seen on the phase export: "tilt of 21 planes; automatic: ... . phase of 21 planes ..."
    (the tilt arrows carry the phase's record). Then, on the dock's export, an arrow the figure
    did not explain: the caption says what the arrows show."""
    _, result = _esrrf_scene(shown, automatic={"sensitivity": "2"})
    record = result.metadata[PROVENANCE_KEY]
    shown.add_vectors(
        np.array([[[1.0, 1.0], [0.5, 0.5]]]), name="tilt · stack", metadata={PROVENANCE_KEY: record}
    )
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert caption == (
        "eSRRF of 100 frames (mag=2 r=1.5), tilt shown by arrows; automatic: sensitivity 2"
    )


def test_outputs_of_one_run_share_one_sentence(shown):
    """Seen on the demo figures: eSRRF's widefield mean (same record as the image) hid the
    eSRRF sentence; BaSiC's three outputs repeated their automatic choices three times."""
    _, result = _esrrf_scene(shown, automatic={"drift block length": "24 frames"})
    record = dict(result.metadata[PROVENANCE_KEY])
    _result(
        shown,
        "widefield mean · stack",
        RNG.random((24, 32)).astype(np.float32),
        record={**record, "note": "the mean of every frame"},
        scale=(0.1, 0.1),
        units=("um", "um"),
    )
    shown.canvas.grid.enabled = True
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert caption.count("automatic:") == 1 and caption.count("drift block length") == 1
    sentence = caption.split(". Plane shown: t = ")[0]
    assert "widefield mean of 100 frames" in sentence and "eSRRF of 100 frames" in sentence
    assert sentence.endswith("automatic: drift block length 24 frames. the mean of every frame")


def test_a_time_axis_kept_but_shortened_counts_the_frames(shown):
    """eSRRF's result keeps a time axis of one time point per 100 frames: "of 100 frames"."""
    _esrrf_scene(shown)
    record = {"method": "esrrf", "input": "stack"}
    _result(
        shown,
        "eSRRF · stack [M4]",
        RNG.random((2, 48, 64)).astype(np.float32),
        record=record,
        scale=(50.0, 0.05, 0.05),
        units=("s", "um", "um"),
    )
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert "eSRRF of 100 frames in 2 time points (M4)" in caption


def test_choices_a_second_run_reused_are_said_once(shown):
    """BaSiC's apply carries the fitted profile's automatic smoothness: said with the fit."""
    _, result = _esrrf_scene(shown, automatic={"smoothness": "0.5"})
    record = dict(result.metadata[PROVENANCE_KEY])
    _result(
        shown,
        "corrected · stack",
        RNG.random((24, 32)).astype(np.float32),
        record={**record, "method": "flatfield", "job": "apply"},
        scale=(0.1, 0.1),
        units=("um", "um"),
    )
    shown.canvas.grid.enabled = True
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert caption.count("smoothness 0.5") == 1 and "corrected" in caption


@pytest.mark.parametrize("zoom", [None, 1])  # publication size, and a thumbnail
def test_long_caption_wraps_onto_lines_that_hold_all_of_it(shown, zoom):
    automatic = {f"choice {i}": f"value {i}" for i in range(12)}
    _esrrf_scene(shown, automatic=automatic)
    figure = render_figure(shown, FigureOptions(zoom=zoom, dpi=300))
    caption, lines = figure.info["caption"], figure.info["caption_lines"]
    assert len(lines) > 1 and " ".join(lines) == caption  # every word, none cut
    face = _face()
    assert all(_drawing.text_width(face, line) <= figure.image.shape[1] for line in lines)
    # The last line is drawn inside the figure: its words' ink is where the layout says.
    last = _text_ink(lines[-1], face)
    box = figure.info["panels"][0]["box"]
    y = box["y"] + box["height"] + figure.info["caption_offset"]
    y += (len(lines) - 1) * _drawing.line_height(face)
    assert y + last.shape[0] <= figure.image.shape[0]


def _two_channels(viewer):
    for channel, colormap in ((0, "green"), (1, "magenta")):
        viewer.add_image(
            RNG.uniform(0, 100, (30, 40)).astype(np.float32),
            name=f"eSRRF · cells ch{channel} [mag=5 r=1.5 s=1]",
            colormap=colormap,
            blending="additive",
            contrast_limits=(0, 100),
            metadata={"intensity_unit": "photons"},
        )


def test_two_channel_colorbars_carry_short_labels_and_do_not_grow_the_figure(shown):
    """Seen: each colorbar labelled with its whole layer name, doubling the figure's height."""
    _two_channels(shown)
    with_bars = render_figure(shown, FigureOptions(colorbar=True, scale_bar=False))
    without = render_figure(shown, FigureOptions(colorbar=False, scale_bar=False))
    titles = [bar["box"]["title"] for bar in with_bars.info["colorbars"]]
    assert titles == ["ch0 · Intensity (photons)", "ch1 · Intensity (photons)"]
    # End tick labels may reach half a line beyond the bars, the labels no further.
    line = _drawing.line_height(_face())
    assert with_bars.image.shape[0] - without.image.shape[0] <= line


def test_an_input_beside_its_result_is_named_by_its_own_name(shown):
    """Seen on the flat-field grid: "1 · Intensity (ADU)" for the input, whose every word is in
    its result's name."""
    for name in ("tiles", "flat-field corrected · tiles"):
        shown.add_image(
            RNG.random((30, 40)).astype(np.float32),
            name=name,
            contrast_limits=(0, 1 if name == "tiles" else 0.5),
            metadata={"intensity_unit": "ADU"},
        )
    shown.canvas.grid.enabled = True
    bars = render_figure(shown, FigureOptions(colorbar=True)).info["colorbars"]
    titles = sorted(bar["box"]["title"] for bar in bars)
    assert titles == ["flat-field corrected · Intensity (ADU)", "tiles · Intensity (ADU)"]


def test_one_colorbar_is_labelled_with_quantity_and_unit_only(shown):
    _result(
        shown,
        "phase · stack [reg=0.001]",
        RNG.random((30, 40)).astype(np.float32),
        record={"method": "phase", "input": "stack"},
        metadata={"intensity_unit": "rad", "quantity": "phase"},
    )
    (bar,) = render_figure(shown, FigureOptions(colorbar=True)).info["colorbars"]
    assert bar["box"]["title"] == "Phase (rad)"


def test_no_colorbar_for_an_input_hidden_under_an_opaque_result(shown):
    """Seen: a colorbar for the input under the opaque eSRRF result."""
    _esrrf_scene(shown)
    bars = render_figure(shown, FigureOptions(colorbar=True)).info["colorbars"]
    assert [bar["layers"] for bar in bars] == [["eSRRF · stack [mag=2 r=1.5]"]]


def _pair(viewer, **upper):
    lower = viewer.add_image(np.ones((10, 10), np.float32), name="lower", colormap="magma")
    defaults = {"name": "upper", "colormap": "gray"}
    top = viewer.add_image(np.ones((10, 10), np.float32), **{**defaults, **upper})
    return top, lower


@pytest.mark.parametrize(
    ("upper", "hidden"),
    [
        ({}, True),  # napari's default: translucent_no_depth, opacity 1, opaque colormap
        ({"blending": "translucent"}, True),
        ({"blending": "opaque", "opacity": 0.5}, True),  # blending off: opacity is not used
        ({"opacity": 0.99}, False),
        ({"blending": "additive"}, False),
        ({"blending": "minimum"}, False),
        ({"colormap": "fade"}, False),  # a colormap whose low end is transparent
        ({"scale": (0.5, 1.0)}, False),  # covers half of the lower layer
        ({"translate": (3, 0)}, False),
        ({"scale": (2.0, 2.0), "translate": (-1, -1)}, True),  # larger than the lower one
        ({"rotate": 30, "scale": (3.0, 3.0), "translate": (-10, -10)}, False),  # not aligned
    ],
)
def test_which_layer_hides_which(make_napari_viewer, upper, hidden):
    from napari.utils.colormaps import Colormap

    if upper.get("colormap") == "fade":
        upper = {**upper, "colormap": Colormap([[0, 0, 0, 0], [1, 1, 1, 1]], name="fade")}
    viewer = make_napari_viewer()
    top, lower = _pair(viewer, **upper)
    assert hides(top, lower, viewer) is hidden


def test_a_points_layer_hides_nothing(make_napari_viewer):
    viewer = make_napari_viewer()
    lower = viewer.add_image(np.ones((10, 10), np.float32))
    points = viewer.add_points(np.array([[5.0, 5.0]]), size=40)
    assert hides(points, lower, viewer) is False


@pytest.mark.parametrize(
    ("units", "scale", "said"),
    [
        (None, (1.0, 1.0, 1.0), "resolution 6 output px (FRC)"),  # napari's "pixel"
        (("s", "nm", "nm"), (1.0, 100.0, 100.0), "resolution 300 nm (FRC)"),
    ],
)
def test_the_resolution_is_said_in_the_inputs_unit_or_in_output_pixels(
    shown, units, scale, said
):
    """Seen in review: an input in napari's default unit gave "3 pixel" (the input's pixels,
    not the dock's "6 output px"), and one in nm "300 nanometer"."""
    stack, result = _esrrf_scene(shown)
    units = units or ("pixel", "pixel", "pixel")
    for layer, step in ((stack, 1.0), (result, 0.5)):  # the result at twice the sampling
        layer.units = units[-layer.ndim :]
        layer.scale = tuple(scale[-layer.ndim :][:-2]) + tuple(s * step for s in scale[-2:])
    record = result.metadata["napari_gpuscope"]
    headline = {"measure": "FRC", "output_px": 6.0}
    record["result"] = {"decorrelation": {"headline": headline, "frc_floor_limited": False}}
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert f"(mag=2 r=1.5); {said}" in caption


def test_a_choice_the_name_does_not_state_is_said_even_with_an_equal_value(shown):
    """Seen in review: "TV=auto 0.01" in a name hid the regularization 0.01 (a substring
    match), and "reg=auto 0.0012" would hide a choice of 0.001."""
    record = {
        "method": "phase",
        "input": "stack",
        "automatic": {"regularization": "0.01", "TV strength": "0.01"},
    }
    _result(shown, "phase · stack [TV=auto 0.01]", RNG.random((24, 32)), record=record)
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert caption == "phase (TV=auto 0.01); automatic: regularization 0.01"


def test_inputs_and_results_of_two_channels_are_told_apart_by_their_own_words():
    """Seen on a grid of two inputs and their eSRRF results: "eSRRF ch0 mag…" (the settings
    the results share were counted as telling them apart)."""
    from napari_gpuscope.export._colorbars import distinguishing_words

    names = [
        "cells ch0",
        "cells ch1",
        "eSRRF · cells ch0 [mag=5 r=1.5]",
        "eSRRF · cells ch1 [mag=5 r=1.5]",
    ]
    assert distinguishing_words(names) == ["ch0", "ch1", "eSRRF ch0", "eSRRF ch1"]


def test_caption_gives_the_measured_resolution_at_the_super_resolved_pixel(shown):
    """An FRC of 6 output pixels of 0.05 µm (the input's 0.1 µm over magnification 2): 300 nm,
    as the dock's status says it; a bound where the noise floor decided; nothing where no
    measure was valid or the input, whose pixel size it needs, is gone."""
    stack, result = _esrrf_scene(shown)
    record = result.metadata["napari_gpuscope"]
    headline = {"measure": "FRC", "output_px": 6.0}
    record["result"] = {"decorrelation": {"headline": headline, "frc_floor_limited": False}}
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert caption == "eSRRF of 100 frames (mag=2 r=1.5); resolution 300 nm (FRC)"
    record["result"]["decorrelation"]["frc_floor_limited"] = True
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert caption.endswith("; resolution ≤ 300 nm (FRC)")
    shown.layers.remove(stack)
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert "resolution" not in caption
    shown.layers.insert(0, stack)
    record["result"]["decorrelation"]["headline"] = None  # e.g. pixel-limited only
    caption = render_figure(shown, FigureOptions(scale_bar=False)).info["caption"]
    assert "resolution" not in caption
