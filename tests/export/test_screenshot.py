"""Screenshot export: PNG size, overlays during export and restored, provenance in PNG + sidecar.

Pixel tests need a *shown* viewer: hidden canvases grab black under Xvfb (napari.md §4).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from napari_gpuscope.export import ScreenshotFiles, export_screenshot
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
    viewer.window.resize(640, 420)  # small canvas (about 300 x 490) keeps renders fast
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
    assert sidecar["scale_factor"] == 1.0
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


def test_scale_factor_two_doubles_the_png_size(viewer, tmp_path):
    one = export_screenshot(viewer, tmp_path / "x1.png", scale=1.0)
    two = export_screenshot(viewer, tmp_path / "x2.png", scale=2.0)
    with Image.open(one.png) as a, Image.open(two.png) as b:
        (w1, h1), (w2, h2) = a.size, b.size
    assert (w2, h2) == (2 * w1, 2 * h1)
    assert json.loads(two.sidecar.read_text())["scale_factor"] == 2.0


def test_scale_bar_is_drawn_during_export_and_restored(viewer, tmp_path):
    bar = viewer.canvas.overlays.scale_bar
    assert bar.visible is False
    with_bar = export_screenshot(viewer, tmp_path / "bar.png", scale_bar=True)
    assert bar.visible is False  # restored
    without_bar = export_screenshot(viewer, tmp_path / "nobar.png", scale_bar=False)
    assert not np.array_equal(_png_pixels(with_bar.png), _png_pixels(without_bar.png))

    bar.visible = True  # a user's own choice survives an export without bar
    export_screenshot(viewer, tmp_path / "nobar2.png", scale_bar=False)
    assert bar.visible is True


def test_colorbar_option_changes_pixels_and_is_restored(viewer, tmp_path):
    result = viewer.layers["denoised"]
    raw = viewer.layers["raw"]
    plain = export_screenshot(viewer, tmp_path / "plain.png", scale_bar=False)
    with_colorbar = export_screenshot(viewer, tmp_path / "cbar.png", colorbar=True, scale_bar=False)
    assert result.colorbar.visible is False
    assert raw.colorbar.visible is False
    assert not np.array_equal(_png_pixels(plain.png), _png_pixels(with_colorbar.png))
    assert json.loads(with_colorbar.sidecar.read_text())["colorbar"] is True


def test_overlays_restored_when_rendering_fails(viewer, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("GL context lost")

    monkeypatch.setattr(type(viewer), "screenshot", broken)
    with pytest.raises(RuntimeError, match="GL context lost"):
        export_screenshot(viewer, tmp_path / "fail.png", colorbar=True)
    assert viewer.canvas.overlays.scale_bar.visible is False
    assert viewer.layers["denoised"].colorbar.visible is False
    assert not (tmp_path / "fail.png").exists()


@pytest.mark.parametrize("scale", [0, -1.0, float("nan")])
def test_bad_scale_is_refused(viewer, tmp_path, scale):
    with pytest.raises(ValueError, match="scale"):
        export_screenshot(viewer, tmp_path / "bad.png", scale=scale)


def test_non_png_name_is_refused(viewer, tmp_path):
    with pytest.raises(ValueError, match="PNG"):
        export_screenshot(viewer, tmp_path / "figure.jpg")


def test_works_through_the_public_viewer_proxy_widgets_receive(make_napari_viewer_proxy, tmp_path):
    """Dock widgets get a PublicOnlyProxy; private access would warn (FutureWarning)."""
    import warnings

    viewer = make_napari_viewer_proxy(show=True)
    viewer.window.resize(640, 420)
    viewer.add_image(np.eye(16, dtype=np.float32), metadata={PROVENANCE_KEY: _record()})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        files = export_screenshot(viewer, tmp_path / "proxy.png", colorbar=True)
    assert len(read_png_provenance(files.png)) == 1
