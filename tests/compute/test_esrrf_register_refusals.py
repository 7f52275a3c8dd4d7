"""Channel registration says when there is nothing to measure (issue 26 item 8): max_shift
is honoured (a larger true offset is refused naming the channel and max_shift, never a wrong
shift within it), a channel without structure in common with the reference is refused, and
values the float32 result cannot hold are refused instead of becoming infinities. The
oracle: scipy-shifted scenes with known offsets; unrelated noise by construction."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf._register import (
    RegistrationResult,
    apply_registration,
    register_channels,
)


@pytest.fixture(scope="module")
def scene():
    return ndimage.gaussian_filter(np.random.default_rng(0).random((128, 128)), 2.0)


@pytest.mark.parametrize(("offset", "max_shift"), [((10, 7), 1), ((14.0, 15.0), 5)])
def test_a_shift_beyond_max_shift_is_refused(scene, offset, max_shift):
    moved = ndimage.shift(scene, offset, order=3, mode="nearest")
    with pytest.raises(InvalidInputError, match=rf"channel 1 .*max_shift={max_shift} px"):
        register_channels(np.stack([scene, moved]), max_shift=max_shift, device="cpu")


def test_a_shift_within_max_shift_is_measured(scene):
    moved = ndimage.shift(scene, (3.0, -2.5), order=3, mode="nearest")
    result = register_channels(np.stack([scene, moved]), max_shift=4, device="cpu")
    np.testing.assert_allclose(result.shifts[1], (3.0, -2.5), atol=0.1)
    exact = ndimage.shift(scene, (3.0, 0.0), order=3, mode="nearest")
    result = register_channels(np.stack([scene, exact]), max_shift=3, device="cpu")
    np.testing.assert_allclose(result.shifts[1], (3.0, 0.0), atol=0.1)  # on the limit: fine


def test_unrelated_noise_is_refused():
    noise = np.random.default_rng(4).poisson(100.0, (2, 128, 128)).astype(np.float32)
    with pytest.raises(InvalidInputError, match="channel 1 has no structure in common"):
        register_channels(noise, device="cpu")


def test_values_beyond_float32_are_refused_not_made_infinite(scene):
    registration = RegistrationResult(
        shifts=np.array([[0.0, 0.0], [0.5, -0.25]]),
        reference_channel=0,
        similarity=np.ones(2),
        shape=scene.shape,
    )
    for channel in (0, 1):  # the reference channel (copied) as well as the moved one
        huge = np.stack([scene, scene])
        huge[channel] *= 1e300
        with pytest.raises(InvalidInputError, match=f"channel {channel} .*power of two"):
            apply_registration(huge, registration, device="cpu")
    fine = apply_registration(np.stack([scene, scene]) * 1e30, registration, device="cpu")
    assert np.isfinite(fine).all()
