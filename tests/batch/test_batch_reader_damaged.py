"""The napari reader on damaged positions (issue 26 item 4): ``get_reader`` never raises, a
position with nothing readable is one ValueError naming the folder and what is wrong, and
whatever can still be read opens, with a warning naming what was skipped.

Each case damages one thing of a position written as a batch task writes it (the TV result
and an extra layer, through :meth:`BatchStore.write_position`)."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.reader import DamagedPosition, get_reader, read_position
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute.results import Geometry, image_layer


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("reader") / "out.zarr"
    geometry = Geometry(scale=(0.1, 0.1), units=("um", "um"), axis_labels=("y", "x"))
    record = {"method": "tv", "params": {}}
    rng = np.random.default_rng(0)
    layers = [
        image_layer(
            rng.random((48, 64), np.float32), "TV · A01", geometry, metadata={ATTRIBUTE: record}
        ),
        image_layer(
            rng.random((48, 64), np.float32), "noise · A01", geometry, metadata={ATTRIBUTE: record}
        ),
    ]
    attrs = {"recipe": {"method": "tv"}, "recipe_hash": "abc", "provenance": record}
    BatchStore(out).write_position("A01", layers, attrs)
    return out / "A01"


def _edit(folder, change):
    """Apply ``change(document)`` to ``folder``'s zarr.json (None: write the text as given)."""
    meta = folder / "zarr.json"
    document = json.loads(meta.read_text())
    new = change(document)
    meta.write_text(new if isinstance(new, str) else json.dumps(document))


def _ms(document):
    return document["attributes"]["ome"]["multiscales"]


RESULT_DAMAGE = {
    "batch attribute null": lambda d: d["attributes"].__setitem__(ATTRIBUTE, None),
    "batch attribute a list": lambda d: d["attributes"].__setitem__(ATTRIBUTE, [1]),
    "no ome": lambda d: d["attributes"].pop("ome"),
    "ome a string": lambda d: d["attributes"].__setitem__("ome", "x"),
    "no multiscales": lambda d: d["attributes"]["ome"].pop("multiscales"),
    "multiscales empty": lambda d: d["attributes"]["ome"].__setitem__("multiscales", []),
    "multiscales of strings": lambda d: d["attributes"]["ome"].__setitem__("multiscales", ["a"]),
    "no datasets": lambda d: _ms(d)[0].pop("datasets"),
    "datasets empty": lambda d: _ms(d)[0].__setitem__("datasets", []),
    "dataset without path": lambda d: _ms(d)[0]["datasets"][0].pop("path"),
    "dataset path elsewhere": lambda d: _ms(d)[0]["datasets"][0].__setitem__("path", "nope"),
    "dataset path a number": lambda d: _ms(d)[0]["datasets"][0].__setitem__("path", 3),
    "transforms not a list": lambda d: _ms(d)[0]["datasets"][0].__setitem__(
        "coordinateTransformations", 5
    ),
    "scale too short": lambda d: _ms(d)[0]["datasets"][0]["coordinateTransformations"][
        0
    ].__setitem__("scale", [0.1]),
    "scale negative": lambda d: _ms(d)[0]["datasets"][0]["coordinateTransformations"][
        0
    ].__setitem__("scale", [-1, 0.1]),
    "scale strings": lambda d: _ms(d)[0]["datasets"][0]["coordinateTransformations"][0].__setitem__(
        "scale", ["a", "b"]
    ),
}


@pytest.mark.parametrize("damage", list(RESULT_DAMAGE))
def test_a_damaged_result_opens_the_rest_with_a_warning(written, tmp_path, damage):
    folder = tmp_path / "A01"
    shutil.copytree(written, folder)
    _edit(folder, RESULT_DAMAGE[damage])
    assert get_reader(str(folder)) in (None, read_position)  # never raises
    if get_reader(str(folder)) is None:
        return  # no longer ours: napari asks its other readers
    with pytest.warns(UserWarning, match="the result not opened") as caught:
        layers = read_position(str(folder))
    assert str(folder) in str(caught[0].message)
    assert [kwargs["name"] for _, kwargs, _ in layers] == ["noise · A01"]  # the extra layer


@pytest.mark.parametrize("damage", list(RESULT_DAMAGE))
def test_a_position_with_nothing_readable_is_one_value_error_naming_it(written, tmp_path, damage):
    folder = tmp_path / "A01"
    shutil.copytree(written, folder)
    _edit(folder, RESULT_DAMAGE[damage])
    shutil.rmtree(folder / "extra")
    if get_reader(str(folder)) is None:
        return
    with pytest.raises(DamagedPosition, match="nothing in it could be read") as refused:
        read_position(str(folder))
    assert isinstance(refused.value, ValueError) and str(folder) in str(refused.value)


@pytest.mark.parametrize(
    "text",
    ['{"attributes": null}', '{"attributes": [1, 2]}', "[]", "not json", "\udcff"],
    ids=["attributes null", "attributes a list", "a list", "not json", "not UTF-8"],
)
def test_get_reader_never_raises_on_a_damaged_zarr_json(written, tmp_path, text):
    folder = tmp_path / "A01"
    shutil.copytree(written, folder)
    raw = text.encode("utf-8", "surrogateescape")
    (folder / "zarr.json").write_bytes(raw)
    assert get_reader(str(folder)) is None


def test_a_damaged_extra_layer_is_named_in_a_warning(written, tmp_path):
    folder = tmp_path / "A01"
    shutil.copytree(written, folder)
    (extra,) = [p for p in (folder / "extra").iterdir() if p.is_dir()]
    (extra / "zarr.json").write_text("{broken")
    with pytest.warns(UserWarning, match=f"extra layer '{extra.name}' not opened"):
        layers = read_position(str(folder))
    assert [kwargs["name"] for _, kwargs, _ in layers] == ["TV · A01"]


def test_an_intact_position_opens_without_a_warning(written):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layers = read_position(str(written))
    assert [kwargs["scale"] for _, kwargs, _ in layers] == [(0.1, 0.1), (0.1, 0.1)]
