"""Input validation and host/device transfer (the GPU side is in tests/gpu/test_gpu_arrays.py)."""

import warnings

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import _input_checks
from napari_gpuscope.compute.arrays import (
    InvalidInputError,
    check_finite,
    download_into,
    to_device,
    to_host,
    validate_image,
    value_range,
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
    da = pytest.importorskip("dask.array")  # absent on the GPU kit's bare machine
    monkeypatch.setattr(_input_checks, "_CHECK_BLOCK_ELEMENTS", 10)  # forces many blocks
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
    da = pytest.importorskip("dask.array")
    zarr = pytest.importorskip("zarr")
    data = np.random.default_rng(0).random((6, 5, 4)).astype(np.float32)
    region = (slice(2, 5), slice(None), slice(1, 3))
    for lazy in (da.from_array(data, chunks=2), zarr.array(data, chunks=(2, 5, 4))):
        np.testing.assert_array_equal(to_device(lazy, "cpu", region=region).numpy(), data[region])


def test_to_host_returns_an_independent_copy():
    tensor = torch.ones(3, 3)
    host = to_host(tensor)
    tensor += 1
    assert host.dtype == np.float32 and host.max() == 1


def test_read_only_inputs_are_copied_without_a_torch_warning():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    data.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tensor = to_device(data, "cpu")
    tensor += 1  # our copy is writable
    np.testing.assert_array_equal(data, np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int16, torch.uint8])
def test_torch_tensors_are_accepted_and_never_modified(dtype):
    original = (torch.arange(20).reshape(4, 5) * 3).to(dtype)
    data = original.clone()
    validate_image(data)
    tensor = to_device(data, "cpu")
    assert tensor.dtype == torch.float32
    tensor += 1
    assert torch.equal(data, original)
    np.testing.assert_array_equal(tensor.numpy() - 1, original.numpy().astype(np.float32))


def test_tensor_dtypes_without_a_numpy_equivalent_get_a_clear_message():
    with pytest.raises(InvalidInputError, match=r"bfloat16.*\.float\(\)"):
        validate_image(torch.zeros((4, 4), dtype=torch.bfloat16))


def test_non_finite_tensors_are_located():
    data = torch.zeros((3, 4, 5))
    data[1, 2, 3] = float("inf")
    with pytest.raises(
        InvalidInputError, match=r"1 non-finite value\(s\) \(0 NaN, 1 infinite\).*\(1, 2, 3\)"
    ):
        check_finite(data)


def test_blockwise_scans_count_over_blocks_and_locate_the_first(monkeypatch):
    monkeypatch.setattr(_input_checks, "_CHECK_BLOCK_ELEMENTS", 20)  # one plane of 5 x 4 per block
    data = np.zeros((6, 5, 4), np.float32)
    data[4, 1, 2] = np.nan
    data[5, 0, 0] = -np.inf
    data[1, 3, 3] = 7.0
    data[2, 0, 1] = -3.0
    message = r"layer 'x' contains 2 non-finite value\(s\) \(1 NaN, 1 infinite\).*\(4, 1, 2\)"
    for scan in (check_finite, value_range):
        with pytest.raises(InvalidInputError, match=message):
            scan(data, name="layer 'x'")
        with pytest.raises(InvalidInputError, match=message):
            scan(torch.from_numpy(data), name="layer 'x'")
    assert value_range(data[:4]) == (-3.0, 7.0) == value_range(torch.from_numpy(data[:4]))
    # Integers up to 32 bits are not read: their dtype's bounds hold every value.
    assert value_range(np.full((2, 2), 7, np.int16)) == (-32768.0, 32767.0)
    assert value_range(np.array([[-(2**40), 3]], np.int64)) == (-(2.0**40), 3.0)


def test_download_into_writes_views_in_place():
    out = np.zeros((4, 6), np.float32)
    download_into(out[1:3, 2:5], torch.full((2, 3), 7.0))
    assert out.sum() == 7.0 * 6 and out[1:3, 2:5].min() == 7.0
    with pytest.raises(ValueError, match="shapes differ"):
        download_into(out, torch.zeros(3))


def test_tv_denoises_a_torch_tensor_and_records_the_kernel_paths():
    from napari_gpuscope.compute import tv
    from napari_gpuscope.compute.jobs import run_job

    noisy = torch.from_numpy(np.random.default_rng(0).normal(0.5, 0.1, (48, 48)).astype("f4"))
    before = noisy.clone()
    result = run_job(tv.iter_denoise(noisy, 0.1, device="cpu"))
    assert torch.equal(noisy, before)
    expected = run_job(tv.iter_denoise(noisy.numpy(), 0.1, device="cpu"))
    np.testing.assert_array_equal(result.image, expected.image)
    paths = result.summary()["kernel_paths"]
    assert paths["fgp_step"] == "torch twin (CPU reference path)"
    assert set(paths) == {"fgp_step", "fgp_primal", "tv_gap_partials"}


# -- issue 17, item 13: messages that name the problem ----------------------------------------
def _stack():
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    return blinking_filaments_stack(12, (32, 32))[0]


def _phase_optics():
    from napari_gpuscope.sample_data.phase import OPTICS

    return OPTICS


def test_masked_arrays_are_refused_by_every_method_unless_nothing_is_masked():
    from napari_gpuscope.compute import esrrf, flatfield, phase, tv

    stack = _stack().astype(np.float32)
    masked = np.ma.masked_greater(stack, np.percentile(stack, 99))
    z_stack = np.ma.masked_less(np.ones((5, 16, 16)) + np.eye(16), 1.5)
    calls = {
        "image": lambda: tv.denoise(masked[0], 0.1, device="cpu"),
        "stack": lambda: esrrf.esrrf(masked, device="cpu"),
        "images": lambda: flatfield.fit_basic(masked, device="cpu"),
        "z-stack": lambda: phase.reconstruct(z_stack, **_phase_optics(), device="cpu"),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidInputError, match=rf"^{name} is a masked array \(\d+ masked"):
            call()
    nothing = np.ma.masked_array(stack[0], mask=False)
    np.testing.assert_array_equal(
        tv.denoise(nothing, 0.1, device="cpu"), tv.denoise(stack[0], 0.1, device="cpu")
    )


@pytest.mark.parametrize("budget", [float("nan"), 0, -5, 1.5, True, "1GB"])
def test_a_bad_memory_budget_is_named_by_every_method(budget):
    from napari_gpuscope.compute import esrrf, phase, tv
    from napari_gpuscope.compute.params import ParameterError

    stack = _stack()
    calls = (
        lambda: tv.denoise(stack[0], 0.1, device="cpu", memory_budget=budget),
        lambda: esrrf.esrrf(stack, device="cpu", memory_budget=budget),
        lambda: phase.reconstruct(
            np.ones((5, 16, 16)), **_phase_optics(), device="cpu", memory_budget=budget
        ),
    )
    for call in calls:
        with pytest.raises(ParameterError, match="memory_budget must be a positive whole number"):
            call()


def test_esrrf_reads_a_nested_list_as_numpy_does():
    from napari_gpuscope.compute import esrrf

    stack = _stack()
    np.testing.assert_array_equal(
        esrrf.esrrf(stack.tolist(), magnification=2, device="cpu"),
        esrrf.esrrf(stack, magnification=2, device="cpu"),
    )


def test_the_sweep_names_too_few_frames_and_a_featureless_stack_has_no_resolution():
    from napari_gpuscope.compute import esrrf

    with pytest.raises(InvalidInputError, match="has 3 frames; the sweep needs at least 4"):
        esrrf.parameter_sweep(_stack()[:3], device="cpu")
    assert np.isnan(esrrf.frc_resolution(np.ones((64, 64)), np.ones((64, 64))))
    flat = np.full((12, 32, 32), 500, np.float32)
    result = esrrf.parameter_sweep(
        flat, (1.0,), (1.0,), params=esrrf.EsrrfParams(magnification=2), device="cpu"
    )
    assert np.isnan(result.frc_resolution).all() and np.isnan(result.qnr).all()
