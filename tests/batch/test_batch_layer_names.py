"""Extra layers' group names in a batch store, and stores written under the older names.

Result layers are named kind first (``"absorption · A01 [reg=0.001]"``, issue 18 item 7); the
store names an extra layer's group after that kind (``extra/absorption``), so its path does not
change with the parameters. Stores written before named the group after the bracketed tag of
the older name (``"A01 [absorption reg=0.001]"`` -> ``extra/absorption_reg_0.001``); the reader
must still open them, at their scale and under the names they were written with. The oracle
is what was written (names, pixel data, the 0.325 um pixel size), not the reader's output.
"""

from __future__ import annotations

import numpy as np

from napari_gpuscope.batch.reader import get_reader, read_position
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute.results import Geometry, image_layer, result_name

RNG = np.random.default_rng(7)
GEOMETRY = Geometry(scale=(0.325, 0.325), units=("um", "um"), axis_labels=("y", "x"))


def _layers(names):
    return [
        image_layer(RNG.normal(size=(24, 32)).astype(np.float32), name, GEOMETRY) for name in names
    ]


def _extra_groups(out, position):
    return sorted(p.name for p in (out / position / "extra").iterdir() if p.is_dir())


def test_extra_groups_are_named_after_the_kind_whatever_the_settings(tmp_path):
    out = tmp_path / "out.zarr"
    names = [
        result_name("phase", "A01", "tilt est. reg=0.001"),
        result_name("absorption", "A01", "tilt est. reg=0.001"),
        result_name("tilt zenith", "A01"),
    ]
    layers = _layers(names)
    written = BatchStore(out).write_position("A01", layers, {"provenance": {}})
    assert written == ["A01", "A01/extra/absorption", "A01/extra/tilt_zenith"]
    opened = read_position(str(out / "A01"))
    assert [kwargs["name"] for _, kwargs, _ in opened] == names
    by_name = {kwargs["name"]: data for data, kwargs, _ in opened}
    for data, kwargs, _ in layers:
        np.testing.assert_array_equal(np.asarray(by_name[kwargs["name"]]), data)


def test_two_extra_layers_of_one_kind_keep_both(tmp_path):
    out = tmp_path / "out.zarr"
    names = ["phase · A01", "sweep · A01 [a]", "sweep · A01 [b]"]
    BatchStore(out).write_position("A01", _layers(names), {"provenance": {}})
    assert _extra_groups(out, "A01") == ["sweep", "sweep_2"]
    assert len(read_position(str(out / "A01"))) == 3


def test_a_store_written_with_the_older_names_still_opens(tmp_path):
    """The older names go through the same writer, which names their groups as it did then."""
    out = tmp_path / "old.zarr"
    names = ["A01 [phase reg=0.001]", "A01 [absorption reg=0.001]", "A01 [tilt azimuth]"]
    layers = _layers(names)
    BatchStore(out).write_position("A01", layers, {"provenance": {"method": "phase"}})
    assert _extra_groups(out, "A01") == ["absorption_reg_0.001", "tilt_azimuth"]
    assert get_reader(str(out / "A01")) is read_position
    opened = read_position(str(out / "A01"))
    assert [kwargs["name"] for _, kwargs, _ in opened] == names
    assert [kwargs["visible"] for _, kwargs, _ in opened] == [True, False, False]
    for (data, kwargs, _), (expected, _, _) in zip(opened, layers, strict=True):
        np.testing.assert_allclose(kwargs["scale"], (0.325, 0.325))
        np.testing.assert_array_equal(np.asarray(data), expected)
