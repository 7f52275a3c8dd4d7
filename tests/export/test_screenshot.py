"""Figure export files: PNG + sidecar with provenance, options, napari's overlays restored.

Pixel tests need a *shown* viewer: hidden canvases grab black under Xvfb (napari.md §4).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from napari_gpuscope.export import ScreenshotFiles, export_screenshot
from napari_gpuscope.export.figure import MAX_ZOOM
from napari_gpuscope.export.screenshot import read_png_provenance
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance


def _record(method: str = "tv") -> dict:
    return build_provenance(
        method,
        {"weight": 0.1, "iterations": 50},
        device="cpu",
        input_name="raw",
        elapsed_seconds=0.5,
        result={"final_gap": 1e-4},
    )


@pytest.fixture
def viewer(make_napari_viewer):
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(640, 420)
    rng = np.random.default_rng(1)
    raw = rng.random((64, 80)).astype(np.float32)
    viewer.add_image(raw, name="raw", scale=(0.5, 0.5), units="um")
    result = np.linspace(0, 1, 64 * 80, dtype=np.float32).reshape(64, 80)
    viewer.add_image(
        result,
        name="denoised",
        scale=(0.5, 0.5),
        units="um",
        colormap="magma",
        opacity=0.6,
        metadata={PROVENANCE_KEY: _record()},
    )
    return viewer


def _png_pixels(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGBA"))


def test_png_and_sidecar_carry_provenance_of_visible_result_layers(viewer, tmp_path):
    files = export_screenshot(viewer, tmp_path / "figure")  # suffix added

    assert isinstance(files, ScreenshotFiles)
    assert files.png == tmp_path / "figure.png" and files.png.is_file()
    assert files.sidecar == tmp_path / "figure.json" and files.sidecar.is_file()

    with Image.open(files.png) as image:
        text = dict(image.text)
        size = image.size
    assert text["Software"].startswith("napari version")
    chunk = json.loads(text[PROVENANCE_KEY])
    expected = viewer.layers["denoised"].metadata[PROVENANCE_KEY]
    # Only the result layer appears; the raw input has no provenance entry.
    assert chunk == [{"layer": "denoised", "provenance": expected}]
    assert read_png_provenance(files.png) == chunk

    sidecar = json.loads(files.sidecar.read_text())
    assert sidecar["provenance"] == chunk
    assert (sidecar["image"]["width"], sidecar["image"]["height"]) == size
    # Automatic zoom: the 80 px wide data made 1,600 px wide (beyond the largest rendered zoom:
    # 10x rendered, each pixel repeated twice).
    assert sidecar["figure"]["zoom"] == 1600 // 80 > MAX_ZOOM
    layers = {entry["name"]: entry for entry in sidecar["layers"]}
    assert set(layers) == {"raw", "denoised"}
    assert layers["raw"]["result"] is False
    assert layers["denoised"]["result"] is True
    assert layers["denoised"]["scale"] == [0.5, 0.5]
    assert layers["denoised"]["units"] == ["micrometer", "micrometer"]


def test_hidden_result_layers_and_plain_viewers_have_no_provenance(viewer, tmp_path):
    viewer.layers["denoised"].visible = False
    files = export_screenshot(viewer, tmp_path / "raw_only.png", scale_bar=False)
    assert read_png_provenance(files.png) == []
    sidecar = json.loads(files.sidecar.read_text())
    assert sidecar["provenance"] == []
    assert [entry["name"] for entry in sidecar["layers"]] == ["raw"]


def test_zoom_two_doubles_each_panel(viewer, tmp_path):
    one = export_screenshot(viewer, tmp_path / "x1.png", zoom=1)
    two = export_screenshot(viewer, tmp_path / "x2.png", zoom=2)
    first = json.loads(one.sidecar.read_text())["figure"]
    second = json.loads(two.sidecar.read_text())["figure"]
    assert first["panel_size"] == [64, 80]  # the data, one pixel per data pixel
    assert second["panel_size"] == [128, 160]
    assert second["zoom"] == 2
    assert two.size[0] > one.size[0] and two.size[1] > one.size[1]


def test_scale_bar_option_draws_our_bar_and_leaves_napari_overlay_alone(viewer, tmp_path):
    bar = viewer.canvas.overlays.scale_bar
    assert bar.visible is False
    with_bar = export_screenshot(viewer, tmp_path / "bar.png", scale_bar=True)
    without_bar = export_screenshot(viewer, tmp_path / "nobar.png", scale_bar=False)
    assert bar.visible is False
    assert json.loads(with_bar.sidecar.read_text())["figure"]["scale_bar"]["label"] == "5 µm"
    assert json.loads(without_bar.sidecar.read_text())["figure"]["scale_bar"] is None
    assert with_bar.size[1] > without_bar.size[1]  # the bar sits below the panels

    bar.visible = True  # a user's own choice survives an export
    export_screenshot(viewer, tmp_path / "nobar2.png", scale_bar=False)
    assert bar.visible is True


def test_colorbar_option_adds_a_colorbar_and_leaves_layer_colorbars_alone(viewer, tmp_path):
    result = viewer.layers["denoised"]
    raw = viewer.layers["raw"]
    plain = export_screenshot(viewer, tmp_path / "plain.png", scale_bar=False)
    with_colorbar = export_screenshot(viewer, tmp_path / "cbar.png", colorbar=True, scale_bar=False)
    assert result.colorbar.visible is False
    assert raw.colorbar.visible is False
    assert with_colorbar.size[0] > plain.size[0]
    sidecar = json.loads(with_colorbar.sidecar.read_text())
    assert sidecar["colorbar"] is True
    # Two display ranges (gray raw, magma result): two colorbars.
    assert sorted(b["layers"] for b in sidecar["figure"]["colorbars"]) == [["denoised"], ["raw"]]


def test_sidecar_says_whether_a_colorbar_was_drawn_not_whether_one_was_asked_for(
    make_napari_viewer, tmp_path
):
    viewer = make_napari_viewer(show=True)
    rgb = np.zeros((16, 16, 3), np.uint8)
    viewer.add_image(rgb, rgb=True, metadata={PROVENANCE_KEY: _record()})  # no display range
    files = export_screenshot(viewer, tmp_path / "rgb.png", colorbar=True, scale_bar=True)
    sidecar = json.loads(files.sidecar.read_text())
    assert sidecar["figure"]["colorbars"] == [] and sidecar["colorbar"] is False
    assert sidecar["figure"]["scale_bar"] is None and sidecar["scale_bar"] is False  # no units


def test_unknown_option_is_a_type_error(viewer, tmp_path):
    with pytest.raises(TypeError, match="colourbar"):
        export_screenshot(viewer, tmp_path / "typo.png", colourbar=True)
    assert not (tmp_path / "typo.png").exists()


def test_overlays_restored_when_rendering_fails(viewer, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("GL context lost")

    viewer.canvas.overlays.scale_bar.visible = True
    monkeypatch.setattr(type(viewer), "screenshot", broken)
    with pytest.raises(RuntimeError, match="GL context lost"):
        export_screenshot(viewer, tmp_path / "fail.png", colorbar=True)
    assert viewer.canvas.overlays.scale_bar.visible is True
    assert viewer.layers["denoised"].colorbar.visible is False
    assert not (tmp_path / "fail.png").exists()


@pytest.mark.parametrize("zoom", [0, -1, 2.5])
def test_bad_zoom_is_refused(viewer, tmp_path, zoom):
    with pytest.raises(ValueError, match="zoom"):
        export_screenshot(viewer, tmp_path / "bad.png", zoom=zoom)
    assert not (tmp_path / "bad.png").exists()


def test_non_png_name_is_refused(viewer, tmp_path):
    with pytest.raises(ValueError, match="PNG"):
        export_screenshot(viewer, tmp_path / "figure.jpg")


def test_works_through_the_public_viewer_proxy_widgets_receive(make_napari_viewer_proxy, tmp_path):
    """Dock widgets get a PublicOnlyProxy; private access would warn (FutureWarning)."""
    import warnings

    viewer = make_napari_viewer_proxy(show=True)
    viewer.add_image(np.eye(16, dtype=np.float32), metadata={PROVENANCE_KEY: _record()})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        files = export_screenshot(viewer, tmp_path / "proxy.png", colorbar=True)
    assert len(read_png_provenance(files.png)) == 1
