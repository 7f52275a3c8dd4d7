"""Intensity units for colorbar labels: stated by the layer or followed through provenance."""

from __future__ import annotations

from types import SimpleNamespace

from napari_gpuscope.export.units import INTENSITY_UNIT_KEY, intensity_unit
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.sample_data import tv


def _layer(name: str, **metadata) -> SimpleNamespace:
    return SimpleNamespace(name=name, metadata=metadata)


def test_stated_unit_is_read_without_padding():
    assert intensity_unit(_layer("x", **{INTENSITY_UNIT_KEY: " photons "})) == "photons"


def test_camera_samples_state_adu():
    ((_, kwargs, _),) = tv.noisy_cells_2d()
    assert kwargs["metadata"][INTENSITY_UNIT_KEY] == "ADU"
    assert intensity_unit(SimpleNamespace(**kwargs)) == "ADU"


def test_camera_fields_in_adu_are_no_statement_of_the_intensity_unit():
    layer = _layer("x", sample={"camera_offset_adu": 100, "read_noise_adu": 2.0})
    assert intensity_unit(layer) is None  # never a guess from key names


def test_result_follows_its_provenance_to_the_input_through_chains():
    raw = _layer("raw", **{INTENSITY_UNIT_KEY: "ADU"})
    first = _layer("TV denoised · raw [s=1]", **{PROVENANCE_KEY: {"input": "raw"}})
    second = _layer(
        "TV denoised · TV denoised · raw [s=1] [s=2]",
        **{PROVENANCE_KEY: {"input": "TV denoised · raw [s=1]"}},
    )
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
