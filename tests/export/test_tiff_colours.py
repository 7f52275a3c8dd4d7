"""TIFF export keeps the colour a layer is shown in (issue 30 item 2), as ImageJ's lookup
table, read back by tifffile's own ImageJ parser (the independent oracle); napari's colormap
gives the expected end colour."""

from __future__ import annotations

import numpy as np
import tifffile
from napari.layers import Image

from napari_gpuscope.export import save_layer_tiff

RNG = np.random.default_rng(12)


def _luts(path) -> np.ndarray | None:
    """``(channels, 3, 256)``; tifffile returns a single channel's table as ``(3, 256)``."""
    with tifffile.TiffFile(path) as tif:
        luts = (tif.imagej_metadata or {}).get("LUTs")
    return None if luts is None else np.asarray(luts).reshape(-1, 3, 256)


def test_a_green_layer_is_saved_with_a_black_to_green_lookup_table(tmp_path):
    layer = Image(RNG.random((12, 16)).astype(np.float32), colormap="green", name="ch0")
    path = save_layer_tiff(layer, tmp_path / "ch0.tif")

    (lut,) = _luts(path)
    end = np.rint(np.asarray(layer.colormap.colors[-1][:3]) * 255)
    np.testing.assert_array_equal(lut[:, -1], end)
    np.testing.assert_array_equal(lut[:, 0], 0)
    # A linear ramp: the middle entry is half the end colour.
    np.testing.assert_allclose(lut[:, 128], end * 128 / 255, atol=1)


def test_a_layer_without_a_single_colour_keeps_imagej_s_default(tmp_path):
    layer = Image(RNG.random((12, 16)).astype(np.float32), colormap="viridis")
    assert _luts(save_layer_tiff(layer, tmp_path / "v.tif")) is None
