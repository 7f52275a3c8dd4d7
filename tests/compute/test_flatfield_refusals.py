"""Flat-field on hostile input says what is wrong in a ValueError, never ArithmeticError
(issue 26 items 9 and 14). Found by a hostile-user review: int8 tiles with negative values
and ``smoothness_flatfield=1e6`` (the field's own maximum) raised ArithmeticError ("please
report it"); finite float64 values near 1e300 were called "NaN or infinite"."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute.flatfield import BasicParams, fit_basic
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.sample_data._shading import shaded_tiles


@pytest.fixture(scope="module")
def tiles():
    return shaded_tiles(16, (48, 48), seed=1).images.astype(np.float64)


def test_int8_tiles_centred_on_zero_are_refused_by_the_model():
    """The fit of these leaves no finite flatfield (the mean, 0.16 grey levels after int8
    rounding, against a spread of 32): a ValueError that says why, not ArithmeticError."""
    tiles = shaded_tiles(16, (32, 32), seed=1).images.astype(np.float64)
    centred = tiles - tiles.mean()
    int8 = np.clip(centred / np.abs(centred).max() * 120, -128, 127).astype(np.int8)
    with pytest.raises(ValueError, match="do not follow BaSiC's model") as refused:
        fit_basic(int8, device="cpu")
    assert not isinstance(refused.value, ArithmeticError)
    assert "camera_offset" in str(refused.value)


def test_the_largest_smoothness_names_the_parameter(tiles):
    largest = BasicParams.info("smoothness_flatfield").maximum
    with pytest.raises(ParameterError, match="smoothness_flatfield=1e\\+06 is too strong"):
        fit_basic(tiles, smoothness_flatfield=largest, device="cpu")


def test_finite_values_beyond_float32_are_named_as_such(tiles):
    with pytest.raises(ValueError, match="beyond float32's range") as refused:
        fit_basic(tiles * 1e296, device="cpu")
    assert "NaN" not in str(refused.value)
    scaled = fit_basic(tiles * 1e-3, device="cpu")  # rescaled as the message says: it fits
    assert np.isfinite(scaled.flatfield).all()
