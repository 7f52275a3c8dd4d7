"""Difference weights from physical voxel sizes (issue 7.2.3: flipped axes)."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.geometry import MAX_SPACING, MIN_SPACING, spacing_from_scale


@pytest.mark.parametrize(
    ("scale", "expected"),
    [
        ((0.4, 0.1, 0.1), (0.25, 1.0, 1.0)),
        ((0.4, 0.1, -0.1), (0.25, 1.0, 1.0)),  # fuzzing found (2.5, 10, 1) here
        ((-0.4, -0.1, -0.1), (0.25, 1.0, 1.0)),
        ((0.4, -0.2, 0.1), (0.25, 0.5, 1.0)),
    ],
)
def test_a_flipped_axis_is_the_same_voxel_grid(scale, expected):
    assert spacing_from_scale(scale) == pytest.approx(expected)


def test_flipping_an_axis_does_not_change_the_denoised_volume():
    rng = np.random.default_rng(0)
    volume = rng.random((6, 20, 24)).astype(np.float32)
    kwargs = {"device": "cpu", "tolerance": 1e-4}
    upright = tv.denoise(volume, 0.1, spacing=spacing_from_scale((0.4, 0.1, 0.1)), **kwargs)
    flipped = tv.denoise(volume, 0.1, spacing=spacing_from_scale((0.4, 0.1, -0.1)), **kwargs)
    np.testing.assert_array_equal(upright, flipped)


def test_extreme_steps_are_clipped_to_the_accepted_range():
    assert spacing_from_scale((1e-9, 1.0, 1.0))[0] == MAX_SPACING
    assert spacing_from_scale((1e9, 1.0, 1.0))[0] == MIN_SPACING
    assert spacing_from_scale((0.0, float("nan"), 1.0)) == (1.0, 1.0, 1.0)
    assert spacing_from_scale((2.0, 0.4, -0.1, 0.1), uncoupled=[0]) == pytest.approx(
        (0.0, 0.25, 1.0, 1.0)
    )
    # Whatever the scale, the weights are valid TV parameters.
    tv.TVParams(spacing=spacing_from_scale((1e-300, -1e300, 1.0)))


def test_the_widgets_layer_helper_uses_magnitudes_too():
    napari = pytest.importorskip("napari")
    from napari_gpuscope.dock.layers import spacing_from_layer

    layer = napari.layers.Image(np.zeros((4, 5, 6)), scale=(0.4, 0.1, -0.1))
    assert spacing_from_layer(layer) == pytest.approx((0.25, 1.0, 1.0))
