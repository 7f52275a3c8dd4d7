"""Uploads, scans and downloads on a real GPU; whole jobs around them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import arrays, tv
from napari_gpuscope.compute.arrays import InvalidInputError, download_into, to_device
from napari_gpuscope.compute.jobs import run_job

pytestmark = pytest.mark.gpu

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64]
DTYPES += [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_uploads_keep_values_for_every_dtype(gpu, dtype):
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    rng = np.random.default_rng(0)
    if info is not None:  # the extremes matter: uint16 above 32767, uint32 above 2**31
        data = rng.integers(info.min, info.max, (7, 33, 65), dtype=dtype, endpoint=True)
        data[0, 0, :2] = [info.min, info.max]
    else:
        data = (rng.standard_normal((7, 33, 65)) * 100).astype(dtype)
    tensor = to_device(data, gpu)
    assert tensor.dtype == torch.float32 and tensor.is_cuda and tensor.is_contiguous()
    np.testing.assert_array_equal(tensor.cpu().numpy(), data.astype(np.float32))


def test_uploads_of_strided_read_only_regions_larger_than_the_staging_buffers(gpu, monkeypatch):
    monkeypatch.setattr(arrays, "_STAGING_BYTES", 4096)  # many pieces, both buffers reused
    data = np.random.default_rng(1).random((9, 40, 50)).astype(np.float32)
    data.flags.writeable = False
    region = (slice(2, 8), slice(5, 35), slice(None))  # strided along axis 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torch warning for read-only input
        tensor = to_device(data, gpu, region=region)
    np.testing.assert_array_equal(tensor.cpu().numpy(), data[region])
    whole = to_device(data, gpu)
    np.testing.assert_array_equal(whole.cpu().numpy(), data)


def test_scans_of_cuda_tensors_locate_nan_and_jobs_refuse_values_beyond_float32(gpu):
    data = torch.zeros((6, 5, 4), dtype=torch.float64, device=gpu)
    data[4, 1, 2] = float("nan")
    for scan in (arrays.check_finite, arrays.value_range):
        with pytest.raises(
            InvalidInputError, match=r"1 non-finite value\(s\) \(1 NaN.*\(4, 1, 2\)"
        ):
            scan(data)
    data[4, 1, 2] = 1e39
    assert arrays.value_range(data) == (0.0, 1e39)
    with pytest.raises(InvalidInputError, match="beyond float32's range"):
        run_job(tv.iter_denoise(data, 0.1))


def test_downloads_into_views_through_the_staging_buffers(gpu, monkeypatch):
    monkeypatch.setattr(arrays, "_STAGING_BYTES", 4096)
    values = torch.rand((6, 30, 40), device=gpu)
    out = np.full((8, 30, 50), -1.0, np.float32)
    download_into(out[1:7, :, 5:45], values)  # strided view
    np.testing.assert_array_equal(out[1:7, :, 5:45], values.cpu().numpy())
    assert (out[0] == -1).all() and (out[:, :, :5] == -1).all()
    transposed = np.empty((6, 40, 30), np.float32)
    download_into(transposed, values.transpose(1, 2))  # a non-contiguous tensor
    np.testing.assert_array_equal(transposed, values.transpose(1, 2).cpu().numpy())


def test_a_cuda_tensor_is_denoised_on_its_device_and_left_alone(gpu):
    noisy = 0.5 + 0.1 * torch.randn((128, 128), device=gpu)
    before = noisy.clone()
    result = run_job(tv.iter_denoise(noisy, 0.1))
    assert torch.equal(noisy, before)
    expected = run_job(tv.iter_denoise(noisy.cpu().numpy(), 0.1, device=gpu))
    np.testing.assert_array_equal(result.image, expected.image)


@pytest.mark.parametrize("weight", [None, 0.1], ids=["strength", "weight"])
def test_nan_input_is_reported_as_nan_on_the_gpu_path(gpu, weight):
    image = np.random.default_rng(2).normal(0.5, 0.1, (64, 64)).astype(np.float32)
    image[10, 20] = np.nan
    with pytest.raises(InvalidInputError, match=r"1 non-finite value\(s\) \(1 NaN.*\(10, 20\)"):
        run_job(tv.iter_denoise(image, weight, device=gpu))
