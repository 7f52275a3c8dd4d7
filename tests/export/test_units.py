"""Intensity units for colorbar labels: stated, from the camera simulation, or via provenance."""

from __future__ import annotations

from types import SimpleNamespace

from napari_gpuscope.export.units import INTENSITY_UNIT_KEY, intensity_unit
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.sample_data import tv


def _layer(name: str, **metadata) -> SimpleNamespace:
    return SimpleNamespace(name=name, metadata=metadata)


def test_stated_unit_wins():
    layer = _layer("x", **{INTENSITY_UNIT_KEY: " photons ", "sample": {"camera_offset_adu": 100}})
    assert intensity_unit(layer) == "photons"


def test_camera_samples_are_in_adu():
    ((_, kwargs, _),) = tv.noisy_cells_2d()
    assert intensity_unit(SimpleNamespace(**kwargs)) == "ADU"


def test_result_follows_its_provenance_to_the_input_through_chains():
    raw = _layer("raw", **{INTENSITY_UNIT_KEY: "ADU"})
    first = _layer("raw [TV s=1]", **{PROVENANCE_KEY: {"input": "raw"}})
    second = _layer("raw [TV s=1] [TV s=2]", **{PROVENANCE_KEY: {"input": "raw [TV s=1]"}})
    assert intensity_unit(second, [raw, first, second]) == "ADU"


def test_result_with_its_own_unit_does_not_inherit():
    raw = _layer("raw", **{INTENSITY_UNIT_KEY: "ADU"})
    ratio = _layer("ratio", **{PROVENANCE_KEY: {"input": "raw"}, INTENSITY_UNIT_KEY: "a.u."})
    assert intensity_unit(ratio, [raw, ratio]) == "a.u."


def test_unknown_stays_unknown_even_in_cycles():
    assert intensity_unit(_layer("plain")) is None
    a = _layer("a", **{PROVENANCE_KEY: {"input": "b"}})
    b = _layer("b", **{PROVENANCE_KEY: {"input": "a"}})
    assert intensity_unit(a, [a, b]) is None
    missing = _layer("r", **{PROVENANCE_KEY: {"input": "closed layer"}})
    assert intensity_unit(missing, [missing]) is None
