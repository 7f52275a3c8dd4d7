"""The batch writer records the colours results are shown in (issue 30 item 2), as OME-NGFF
``omero`` channel metadata, and our reader opens them in those colours.

Oracles: napari's own colormaps (the end colour of "green", "magenta"...) and the OME-NGFF
fields as the specification names them; the data window from numpy's min and max.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from napari_gpuscope.batch.ngff import write_image
from napari_gpuscope.batch.reader import read_position
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.export.colours import RAMP_COLOURS, colormap_hex, omero_metadata

RNG = np.random.default_rng(2)


def _channel(name: str, colormap: object) -> tuple:
    data = RNG.uniform(5, 900, (24, 32)).astype(np.float32)
    kwargs = {
        "name": name,
        "colormap": colormap,
        "blending": "additive",
        "contrast_limits": (10.0, 800.0),
        "scale": (0.02, 0.02),
        "units": ("um", "um"),
        "axis_labels": ("y", "x"),
    }
    return data, kwargs, "image"


def _end_colour(colormap: object) -> np.ndarray:
    from napari.utils.colormaps import ensure_colormap

    return np.asarray(ensure_colormap(colormap).colors[-1][:3])


def test_a_two_channel_result_opens_in_its_colours(tmp_path):
    green = _channel("eSRRF · cells ch0 [mag=5]", "green")
    magenta = _channel("eSRRF · cells ch1 [mag=5]", "magenta")
    attrs = {"provenance": {"method": "esrrf", "result": {"n_channels": 2}}}
    store = BatchStore(tmp_path / "out.zarr")
    store.prepare({"version": 1})
    store.write_position("cells", [green, magenta], attrs)

    layers = read_position(str(tmp_path / "out.zarr" / "cells"))

    images = {kwargs["name"]: kwargs for _, kwargs, kind in layers if kind == "image"}
    for written in (green, magenta):
        read = images[written[1]["name"]]
        np.testing.assert_allclose(
            _end_colour(read["colormap"]), _end_colour(written[1]["colormap"]), atol=1 / 255
        )


def test_the_omero_metadata_names_colour_label_and_window(tmp_path):
    data, kwargs, kind = _channel("eSRRF · cells ch1 [mag=5]", "magenta")
    group = zarr.open_group(str(tmp_path / "image.zarr"), mode="w", zarr_format=3)
    write_image(group, (data, kwargs, kind), {"provenance": None})

    (channel,) = dict(group.attrs)["ome"]["omero"]["channels"]
    assert channel["color"] == "FF00FF"
    assert channel["label"] == "eSRRF · cells ch1 [mag=5]"
    window = channel["window"]
    assert (window["start"], window["end"]) == (10.0, 800.0)
    assert window["min"] == pytest.approx(float(data.min()))
    assert window["max"] == pytest.approx(float(data.max()))


def test_a_channel_axis_gets_one_colour_per_channel():
    data = RNG.random((2, 8, 8)).astype(np.float32)
    meta = omero_metadata(data, {"colormap": ["green", "#FF00FF"], "name": "cells"}, 0)
    assert [c["color"] for c in meta["channels"]] == ["00FF00", "FF00FF"]
    assert [c["label"] for c in meta["channels"]] == ["cells ch0", "cells ch1"]
    assert meta["channels"][1]["window"]["max"] == pytest.approx(float(data[1].max()))


@pytest.mark.parametrize("name", sorted(RAMP_COLOURS))
def test_named_ramps_are_napari_s_colours(name):
    expected = np.rint(_end_colour(name) * 255).astype(int)
    assert colormap_hex(name) == "".join(f"{int(c):02X}" for c in expected)


def test_napari_colormap_objects_are_read_by_their_colours():
    from napari.utils.colormaps import ensure_colormap

    assert colormap_hex(ensure_colormap("green")) == "00FF00"
    assert colormap_hex(ensure_colormap("viridis")) is None  # not one colour: not recorded


def test_a_colormap_without_an_ome_colour_writes_no_omero(tmp_path):
    data, kwargs, kind = _channel("flatfield · tiles", "viridis")
    group = zarr.open_group(str(tmp_path / "image.zarr"), mode="w", zarr_format=3)
    write_image(group, (data, kwargs, kind), {"provenance": None})
    assert "omero" not in dict(group.attrs)["ome"]
    # ...and the image array is written as before.
    np.testing.assert_array_equal(group["0"][...], data)
