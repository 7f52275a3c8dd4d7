"""Input validation and host/device transfer."""

import dask.array as da
import numpy as np
import pytest
import torch
import zarr

from napari_gpuscope.compute.arrays import (
    InvalidInputError,
    to_device,
    to_host,
    validate_image,
)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (np.zeros((4, 4), complex), "complex"),
        (np.zeros((4, 4), bool), "boolean"),
        (np.zeros((0, 4)), "empty"),
        (np.zeros(4), "dimension"),
        (np.zeros((1, 1, 1, 1, 2)), "dimension"),
        (np.array([["a", "b"]]), "dtype"),
    ],
)
def test_rejects_unusable_inputs_with_a_reason(data, match):
    with pytest.raises(InvalidInputError, match=match):
        validate_image(data, name="layer 'cells'")


def test_non_finite_values_are_counted_and_located():
    data = np.ones((5, 6, 7), np.float32)
    data[2, 3, 4] = np.nan
    data[4, 0, 1] = np.inf
    with pytest.raises(InvalidInputError) as info:
        validate_image(data, name="layer 'cells'")
    message = str(info.value)
    assert "layer 'cells'" in message
    assert "2 non-finite" in message and "1 NaN" in message
    assert "(2, 3, 4)" in message


def test_non_finite_scan_works_block_by_block_on_dask(monkeypatch):
    import napari_gpuscope.compute.arrays as arrays

    monkeypatch.setattr(arrays, "_CHECK_BLOCK_ELEMENTS", 10)  # forces many blocks
    data = np.zeros((8, 4, 4), np.float32)
    data[6, 1, 2] = np.nan
    with pytest.raises(InvalidInputError, match=r"\(6, 1, 2\)"):
        validate_image(da.from_array(data, chunks=(2, 4, 4)))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64])
def test_to_device_keeps_values_without_rescaling(dtype):
    data = (np.arange(24).reshape(4, 6) * 3).astype(dtype)
    tensor = to_device(data, "cpu")
    assert tensor.dtype == torch.float32 and tensor.is_contiguous()
    np.testing.assert_array_equal(tensor.numpy(), data.astype(np.float32))


def test_to_device_never_aliases_the_callers_array():
    data = np.ones((4, 4), np.float32)
    tensor = to_device(data, "cpu")
    tensor += 1
    assert data.max() == 1


def test_to_device_reads_regions_of_lazy_arrays():
    data = np.random.default_rng(0).random((6, 5, 4)).astype(np.float32)
    region = (slice(2, 5), slice(None), slice(1, 3))
    for lazy in (da.from_array(data, chunks=2), zarr.array(data, chunks=(2, 5, 4))):
        np.testing.assert_array_equal(to_device(lazy, "cpu", region=region).numpy(), data[region])


def test_to_host_returns_an_independent_copy():
    tensor = torch.ones(3, 3)
    host = to_host(tensor)
    tensor += 1
    assert host.dtype == np.float32 and host.max() == 1
