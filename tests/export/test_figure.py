"""Figure export: data pixels repeated exactly zoom x zoom, DPI in the PNG, colorbar with unit.

Oracles: the expected panel is the layer data itself, mapped through the gray colormap by hand
and repeated with ``np.repeat``; the PNG ``pHYs`` chunk is parsed from the file's bytes; the
colorbar's gradient is compared with the linear gray ramp of the contrast limits. Pixel tests
need a *shown* viewer (hidden canvases grab black under Xvfb).
"""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from napari_gpuscope.export import _render, export_screenshot
from napari_gpuscope.export._layout import FONT_PT
from napari_gpuscope.export.figure import (
    FigureOptions,
    plan_figure,
    render_figure,
)
from napari_gpuscope.provenance import PROVENANCE_KEY

RNG = np.random.default_rng(11)


@pytest.fixture
def shown(make_napari_viewer):
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(640, 480)
    return viewer


def _gray_levels(data: np.ndarray, low: float, high: float) -> np.ndarray:
    """What a gray colormap with these contrast limits shows, as 8-bit levels."""
    return np.rint(np.clip((data - low) / (high - low), 0, 1) * 255).astype(int)


def _panel(figure, index: int = 0) -> np.ndarray:
    box = figure.info["panels"][index]["box"]
    x, y, w, h = box["x"], box["y"], box["width"], box["height"]
    return figure.image[y : y + h, x : x + w].astype(int)


def _plain(zoom: int, **kwargs) -> FigureOptions:
    defaults = {"scale_bar": False, "colorbar": False, "titles": False}
    return FigureOptions(zoom=zoom, **{**defaults, **kwargs})


@pytest.mark.parametrize("zoom", [1, 3])
def test_panel_is_the_data_with_each_pixel_repeated_zoom_times(shown, zoom):
    data = RNG.integers(0, 256, (45, 62)).astype(np.float32)
    shown.add_image(data, scale=(0.25, 0.25), units="um", colormap="gray", contrast_limits=(0, 255))

    figure = render_figure(shown, _plain(zoom))

    panel = _panel(figure)
    assert panel.shape[:2] == (45 * zoom, 62 * zoom)
    assert figure.info["region"]["data_shape"] == [45, 62]
    expected = np.repeat(np.repeat(_gray_levels(data, 0, 255), zoom, 0), zoom, 1)
    for channel in range(3):
        assert np.abs(panel[..., channel] - expected).max() <= 1


def test_large_panels_are_stitched_from_exact_tiles(shown, monkeypatch):
    monkeypatch.setattr(_render, "MAX_TILE", 40)  # a 3 x 4 grid of tiles, uneven at the edges
    data = RNG.integers(0, 256, (50, 71)).astype(np.float32)
    shown.add_image(data, colormap="gray", contrast_limits=(0, 255))

    panel = _panel(render_figure(shown, _plain(2)))

    expected = np.repeat(np.repeat(_gray_levels(data, 0, 255), 2, 0), 2, 1)
    assert np.abs(panel[..., 1] - expected).max() <= 1


def test_grid_panels_share_one_world_region_and_pixel_grid(shown):
    """A result at half the pixel size: the finest layer sets the zoom, the coarse one is
    repeated 2 x zoom times, and both panels cover the same field of view."""
    coarse = RNG.integers(0, 256, (20, 30)).astype(np.float32)
    fine = np.repeat(np.repeat(coarse, 2, 0), 2, 1)[::-1].copy()
    shown.add_image(
        coarse,
        name="coarse",
        scale=(0.2, 0.2),
        units="um",
        colormap="gray",
        contrast_limits=(0, 255),
        translate=(0.05, 0.05),
    )
    shown.add_image(
        fine, name="fine", scale=(0.1, 0.1), units="um", colormap="gray", contrast_limits=(0, 255)
    )
    shown.canvas.grid.enabled = True

    figure = render_figure(shown, _plain(1))

    positions = {p["layers"][0]: (p["row"], p["column"]) for p in figure.info["panels"]}
    layers = shown.layers
    assert positions == {  # where napari's own grid puts them
        name: shown.canvas.grid.position(layers.index(name), layers) for name in ("fine", "coarse")
    }
    assert figure.info["region"]["data_shape"] == [40, 60]
    assert figure.info["region"]["pixel_size"] == pytest.approx(0.1)
    by_name = {p["layers"][0]: i for i, p in enumerate(figure.info["panels"])}
    fine_panel = _panel(figure, by_name["fine"])[..., 0]
    coarse_panel = _panel(figure, by_name["coarse"])[..., 0]
    assert np.abs(fine_panel - _gray_levels(fine, 0, 255)).max() <= 1
    expected = np.repeat(np.repeat(_gray_levels(coarse, 0, 255), 2, 0), 2, 1)
    assert np.abs(coarse_panel - expected).max() <= 1


def test_exported_png_has_the_dpi_in_its_phys_chunk(shown, tmp_path):
    shown.add_image(RNG.random((30, 40)).astype(np.float32), scale=(0.5, 0.5), units="um")

    files = export_screenshot(shown, tmp_path / "fig.png", dpi=150)

    chunks = _png_chunks(files.png.read_bytes())
    x_ppm, y_ppm, unit = struct.unpack(">IIB", chunks[b"pHYs"])
    assert unit == 1  # pixels per metre
    assert x_ppm == y_ppm == round(150 / 0.0254)
    assert files.dpi == 150
    sidecar = json.loads(files.sidecar.read_text())
    assert sidecar["figure"]["dpi"] == 150
    width, height = sidecar["image"]["width"], sidecar["image"]["height"]
    assert sidecar["figure"]["size_mm"] == pytest.approx([width / 150 * 25.4, height / 150 * 25.4])


def test_print_width_sets_the_dpi(shown, tmp_path):
    shown.add_image(RNG.random((64, 80)).astype(np.float32), scale=(0.5, 0.5), units="um")

    files = export_screenshot(shown, tmp_path / "fig.png", zoom=2, width_mm=85.0)

    x_ppm, _, _ = struct.unpack(">IIB", _png_chunks(files.png.read_bytes())[b"pHYs"])
    width_px = files.size[0]
    # The PNG stores whole pixels per metre: the print width is exact to that rounding.
    assert width_px / x_ppm * 1000 == pytest.approx(85.0, rel=0.5 / x_ppm)
    assert files.dpi == pytest.approx(width_px / (85.0 / 25.4))
    assert _panel_size(files) == [128, 160]


def test_colorbar_is_labelled_with_the_intensity_unit_and_shows_the_display_range(shown):
    shown.theme = "dark"  # the label below is white on napari's black canvas
    data = RNG.uniform(100, 400, (60, 60)).astype(np.float32)
    shown.add_image(
        data,
        name="cells",
        scale=(0.1, 0.1),
        units="um",
        colormap="gray",
        contrast_limits=(100, 400),
        metadata={"intensity_unit": "photons"},
    )

    figure = render_figure(shown, FigureOptions(colorbar=True, dpi=144))

    (bar,) = figure.info["colorbars"]
    assert bar["label"] == "Intensity (photons)"
    assert bar["contrast_limits"] == [100.0, 400.0]
    box = bar["box"]
    gradient = figure.image[box["y"] : box["y"] + box["height"], box["x"] + box["width"] // 2]
    # Top is the upper contrast limit: a linear ramp from white down to black.
    expected = np.linspace(255, 0, box["height"])
    assert np.abs(gradient[:, 0].astype(float) - expected).max() <= 1.0

    # The rotated label is drawn where the sidecar says, in the foreground colour.
    from napari_gpuscope.export import _drawing

    face = _drawing.font(round(FONT_PT * 144 / 72))
    label = np.asarray(_drawing.rotated_text(bar["label"], face, (255, 255, 255), (0, 0, 0)))
    x, y = box["label_x"], box["label_y"]
    drawn = figure.image[y : y + label.shape[0], x : x + label.shape[1]]
    np.testing.assert_array_equal(drawn, label)


def test_without_colorbar_option_nothing_is_drawn_beside_the_panels(shown):
    shown.add_image(RNG.random((40, 40)).astype(np.float32), units="um", scale=(0.1, 0.1))
    with_bar = render_figure(shown, FigureOptions(colorbar=True))
    without = render_figure(shown, FigureOptions(colorbar=False))
    assert without.info["colorbars"] == []
    assert with_bar.image.shape[1] > without.image.shape[1]


def test_each_display_range_gets_its_own_colorbar(shown):
    data = RNG.random((30, 30)).astype(np.float32)
    shown.add_image(data, name="a", contrast_limits=(0, 1))
    shown.add_image(data, name="b", contrast_limits=(0, 0.5), colormap="magma")
    shown.add_image(data, name="c", contrast_limits=(0, 1))
    shown.canvas.grid.enabled = True
    bars = render_figure(shown, FigureOptions(colorbar=True)).info["colorbars"]
    assert sorted(tuple(b["layers"]) for b in bars) == [("a", "c"), ("b",)]
    assert all(b["label"] == "Intensity" for b in bars)  # unit unknown: not guessed


def test_scale_bar_has_the_physical_length_it_claims(shown):
    shown.add_image(RNG.random((100, 150)).astype(np.float32), scale=(0.2, 0.2), units="um")
    figure = render_figure(shown, FigureOptions(zoom=2, scale_bar=True))
    bar = figure.info["scale_bar"]
    # 20 % of a 30 um wide panel is 6 um; the nice length below it is 5 um.
    assert (bar["length"], bar["unit"], bar["label"]) == (5.0, "µm", "5 µm")
    assert bar["pixels"] == 5.0 / 0.2 * 2  # micrometres / (um per data pixel) * zoom
    row = figure.image[bar["box"]["y"] + 1]
    ink = np.all(row == 255, axis=1)
    assert ink[bar["box"]["x"] : bar["box"]["x"] + bar["pixels"]].all()
    assert ink.sum() == bar["pixels"]


def test_no_scale_bar_without_physical_units(shown):
    shown.add_image(RNG.random((30, 30)).astype(np.float32))  # napari's default unit: pixel
    plan = plan_figure(shown, FigureOptions(scale_bar=True))
    assert any("No scale bar" in note for note in plan.notes)
    assert render_figure(shown, FigureOptions(scale_bar=True)).info["scale_bar"] is None


def test_plane_caption_says_where_a_volume_is_cut(shown):
    shown.add_image(
        RNG.random((9, 20, 20)).astype(np.float32),
        scale=(0.5, 0.1, 0.1),
        units="um",
        axis_labels=("z", "y", "x"),
    )
    shown.dims.current_step = (4, 10, 10)
    figure = render_figure(shown, FigureOptions())
    assert figure.info["caption"] == "z = 2 µm (index 4 of 9)"


def test_viewer_is_restored_after_the_export(shown):
    raw = shown.add_image(RNG.random((30, 40)).astype(np.float32), name="raw")
    hidden = shown.add_image(RNG.random((30, 40)).astype(np.float32), name="hidden")
    result = shown.add_image(
        RNG.random((30, 40)).astype(np.float32), name="result", metadata={PROVENANCE_KEY: {}}
    )
    hidden.visible = False
    result.colorbar.visible = True
    shown.canvas.grid.enabled = True
    shown.canvas.overlays.scale_bar.visible = True
    shown.scene.camera.zoom = 3.0
    shown.scene.camera.center = (5.0, 7.0)
    before = (shown.scene.camera.zoom, *shown.scene.camera.center)

    render_figure(shown, FigureOptions(zoom=2, colorbar=True))

    assert [layer.visible for layer in (raw, hidden, result)] == [True, False, True]
    assert shown.canvas.grid.enabled is True
    assert shown.canvas.overlays.scale_bar.visible is True
    assert result.colorbar.visible is True and raw.colorbar.visible is False
    assert (shown.scene.camera.zoom, *shown.scene.camera.center) == pytest.approx(before)


def test_viewer_is_restored_when_rendering_fails(shown, monkeypatch):
    shown.add_image(RNG.random((30, 40)).astype(np.float32))
    shown.canvas.grid.enabled = True

    def broken(*args, **kwargs):
        raise RuntimeError("GL context lost")

    monkeypatch.setattr(type(shown), "screenshot", broken)
    with pytest.raises(RuntimeError, match="GL context lost"):
        render_figure(shown, FigureOptions())
    assert shown.canvas.grid.enabled is True
    assert shown.layers[0].visible is True


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"zoom": 0}, r"zoom must be an integer in \[1, 16\], got 0"),
        ({"zoom": 1.5}, r"zoom must be an integer in \[1, 16\], got 1.5"),
        ({"zoom": 17}, r"zoom must be an integer in \[1, 16\], got 17"),
        ({"zoom": True}, "zoom must be an integer"),
        ({"dpi": 300, "width_mm": 80}, "dpi and width_mm cannot both be given"),
        ({"dpi": 5}, r"dpi must be a finite number in \[10, 10000\], got 5"),
        ({"dpi": float("nan")}, "dpi must be a finite number"),
        ({"width_mm": -1}, "width_mm must be a finite number > 0, got -1"),
        ({"colorbar": "yes"}, "colorbar must be True or False"),
    ],
)
def test_bad_options_are_refused_with_the_valid_range(options, message):
    with pytest.raises(ValueError, match=message):
        FigureOptions(**options)


def test_nothing_visible_is_a_clear_error(shown):
    shown.add_image(np.zeros((4, 4), np.float32)).visible = False
    with pytest.raises(ValueError, match="no layer is visible"):
        plan_figure(shown)


def test_plan_matches_the_rendered_size(shown):
    shown.add_image(RNG.random((37, 53)).astype(np.float32), scale=(0.3, 0.3), units="um")
    shown.add_image(RNG.random((37, 53)).astype(np.float32), scale=(0.3, 0.3), units="um")
    shown.canvas.grid.enabled = True
    options = FigureOptions(zoom=2, colorbar=True, width_mm=120)
    plan = plan_figure(shown, options)
    figure = render_figure(shown, options)
    assert figure.image.shape[:2] == (plan.height, plan.width)
    assert plan.width_mm == pytest.approx(120)
    assert plan.panel_size == (74, 106)


def test_3d_view_is_captured_as_shown_without_a_scale_bar(shown):
    shown.add_image(RNG.random((8, 20, 20)).astype(np.float32), scale=(1, 0.1, 0.1), units="um")
    shown.dims.ndisplay = 3
    figure = render_figure(shown, FigureOptions(scale_bar=True, colorbar=True))
    assert figure.info["scale_bar"] is None
    assert any("3D" in note for note in figure.info["notes"])
    assert len(figure.info["colorbars"]) == 1
    panel = _panel(figure)
    assert np.unique(panel.reshape(-1, 3), axis=0).shape[0] > 10  # rendered, not black


def _png_chunks(raw: bytes) -> dict[bytes, bytes]:
    """Chunks of a PNG file by type, parsed by hand (the independent reader)."""
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    while offset < len(raw):
        (length,) = struct.unpack(">I", raw[offset : offset + 4])
        kind = raw[offset + 4 : offset + 8]
        body = raw[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", raw[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(kind + body)
        chunks[kind] = body
        offset += 12 + length
    return chunks


def _panel_size(files) -> list[int]:
    return json.loads(files.sidecar.read_text())["figure"]["panel_size"]


def test_png_reads_back_with_pillow(shown, tmp_path):
    shown.add_image(RNG.random((30, 30)).astype(np.float32))
    files = export_screenshot(shown, tmp_path / "x.png", dpi=200)
    with Image.open(files.png) as image:
        assert image.size == files.size
        assert image.info["dpi"] == pytest.approx((200, 200), abs=0.01)


_SCALED_DISPLAY_PROBE = """
import numpy as np, napari
from napari_gpuscope.export import _panels
from napari_gpuscope.export.figure import FigureOptions, render_figure
data = np.random.default_rng(0).integers(0, 256, (45, 62)).astype(np.float32)
viewer = napari.Viewer(show=True)
viewer.add_image(data, colormap="gray", contrast_limits=(0, 255))
assert _panels.window_pixel_ratio(viewer) == 1.5
figure = render_figure(viewer, FigureOptions(zoom=3, scale_bar=False))
box = figure.info["panels"][0]["box"]
panel = figure.image[box["y"] : box["y"] + box["height"], box["x"] : box["x"] + box["width"], 0]
expected = np.repeat(np.repeat(data.astype(int), 3, 0), 3, 1)
assert panel.shape == expected.shape, panel.shape
assert np.abs(panel.astype(int) - expected).max() <= 1
viewer.close()
print("exact")
"""


@pytest.mark.slow
def test_pixels_stay_exact_on_a_scaled_display():
    """Windows desktops often run at 150 %: tiles must still be whole device pixels."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "QT_SCALE_FACTOR": "1.5"}
    env.pop("QT_QPA_PLATFORM", None)
    result = subprocess.run(
        [sys.executable, "-c", _SCALED_DISPLAY_PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("exact")


@pytest.mark.parametrize(
    "options", [FigureOptions(), FigureOptions(dpi=72), FigureOptions(width_mm=85)]
)
def test_every_text_is_at_least_9_points_at_the_printed_size(shown, options):
    shown.add_image(RNG.random((40, 60)).astype(np.float32), scale=(0.1, 0.1), units="um")
    shown.add_image(RNG.random((40, 60)).astype(np.float32), scale=(0.1, 0.1), units="um")
    shown.canvas.grid.enabled = True
    figure = render_figure(shown, options.replace(colorbar=True))
    assert figure.info["text_pt"] >= 9.0


def test_colorbars_are_labelled_with_their_quantity_and_unit_not_layer_names(shown):
    """Seen in the demo: "brightfield meniscus [phase reg=0.001]: Intensity (rad)" (the names
    of that time)."""
    data = RNG.random((30, 30)).astype(np.float32)
    shown.add_image(data, name="stack", metadata={"intensity_unit": "photons"})
    shown.add_image(
        data,
        name="phase · stack [reg=0.001]",
        contrast_limits=(-0.2, 0.6),
        metadata={"intensity_unit": "rad", "quantity": "phase"},
    )
    shown.canvas.grid.enabled = True
    bars = render_figure(shown, FigureOptions(colorbar=True)).info["colorbars"]
    assert [b["label"] for b in bars] == ["Intensity (photons)", "Phase (rad)"]


def test_a_viewbox_of_arrows_alone_is_drawn_over_the_panel_before_it(shown):
    """Seen in the demo: the tilt arrows on an empty panel, a grid cell left empty."""
    data = RNG.random((30, 40)).astype(np.float32)
    shown.add_image(data, name="stack")
    shown.add_image(data, name="phase")
    shown.add_vectors(np.array([[[15, 20], [0, 8]]], float), name="tilt")
    shown.canvas.grid.enabled = True
    figure = render_figure(shown, FigureOptions())
    panels = figure.info["panels"]
    assert [p["layers"] for p in panels] == [["stack"], ["phase", "tilt"]]
    assert [(p["row"], p["column"]) for p in panels] == [(0, 0), (0, 1)]
    rows = {p["box"]["y"] for p in panels}
    assert len(rows) == 1  # one row: no empty cell below


def test_long_titles_wrap_instead_of_being_cut(shown):
    name = "flatfield · tiles with offset [auto, dark]"
    shown.add_image(RNG.random((30, 30)).astype(np.float32), name=name)
    shown.add_image(RNG.random((30, 30)).astype(np.float32), name="raw")
    shown.canvas.grid.enabled = True
    figure = render_figure(shown, FigureOptions(zoom=12, dpi=200))  # 360 px panels
    (title,) = [p["title"] for p in figure.info["panels"] if p["layers"] == [name]]
    from napari_gpuscope.export import _drawing

    face = _drawing.font(round(FONT_PT * 200 / 72))
    assert _drawing.text_width(face, name) > 360  # one line would have cut it
    assert len(title) == 2 and " ".join(title) == name
