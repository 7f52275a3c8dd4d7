"""The per-frame cost of applying a profile (issue 28 item 8): a live flat-field session
prepares the profile's device fields once, integer frames skip the finiteness pass, and an
integer output leaves a GPU converted (half the bytes of float32 for uint16).

Nothing here is timed: the tests count the work (uploads and checks of the profile, passes
over the frames) with patched functions, and compare the bytes with NumPy's own conversions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_gpuscope import live
from napari_gpuscope.compute.flatfield import (
    BasicParams,
    ShadingProfile,
    _correct,
    apply_profile,
    correct,
)
from napari_gpuscope.compute.flatfield._correct import device_integers, integer_bounds
from napari_gpuscope.compute.flatfield._fields import ProfileFields

WAIT = 120  # seconds: a bound on a hung session, never a pacing
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
"""The conversion on the device is checked on a GPU too when there is one."""


def shaded(frames: int, size: int = 24, seed: int = 0) -> tuple[np.ndarray, ShadingProfile]:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] / size - 0.5
    flat = 1.2 - 0.8 * (yy**2 + xx**2)
    profile = ShadingProfile.from_arrays(flat, camera_offset=100)
    stack = rng.poisson(100 + 500 * flat, (frames, size, size)).astype(np.uint16)
    return stack, profile


class _Counter:
    """Counts the calls of a torch function whose first argument is one of ``arrays``."""

    def __init__(self, function, arrays=()):
        self.function, self.arrays, self.calls = function, arrays, 0

    def __call__(self, data, *args, **kwargs):
        if any(data is a for a in self.arrays):
            self.calls += 1
        return self.function(data, *args, **kwargs)


def test_a_live_apply_uploads_and_checks_the_profile_once(monkeypatch):
    stack, profile = shaded(6)
    params = BasicParams(output_dtype="uint16", clip_negative=True)
    uploads = _Counter(torch.as_tensor, (profile.flatfield, profile.darkfield))
    monkeypatch.setattr(torch, "as_tensor", uploads)
    finite_checks = []
    isfinite = torch.isfinite

    def counted_isfinite(tensor):
        finite_checks.append(tuple(tensor.shape))
        return isfinite(tensor)

    monkeypatch.setattr(torch, "isfinite", counted_isfinite)
    feed = live.FrameFeed("apply", expected=len(stack))
    session = live.attach(
        feed, "flatfield", params, device="cpu", job="apply", profile=profile, capacity=64
    )
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT) and session.frames_processed == len(stack)
    got = session.result()
    monkeypatch.undo()
    # Once per session (each of the two fields), not once per frame; and the flatfield's
    # finiteness is checked once, the integer frames never (they cannot hold NaN).
    assert uploads.calls == 2
    assert len(finite_checks) == 1
    assert not session.method.fields._entries  # freed with the session's end
    expected = apply_profile(stack, profile, params, measure_shading=False, device="cpu")
    assert got.image.dtype == expected.image.dtype == np.uint16
    assert got.image.tobytes() == expected.image.tobytes()


def test_fields_are_reused_only_inside_the_block():
    """Outside a reused block every run prepares (and checks) the profile it is given: a
    profile changed between two runs is seen, and a bad one refused."""
    stack, profile = shaded(2)
    first = correct(stack, profile, device="cpu")
    profile.flatfield[...] *= 2  # a caller's own array, changed between two runs
    second = correct(stack, profile, device="cpu")
    assert np.array_equal(second, first / 2)
    profile.flatfield[0, 0] = 0
    with pytest.raises(ValueError, match="finite and positive"):
        correct(stack, profile, device="cpu")


def test_reused_fields_are_keyed_by_profile_and_checked_against_the_images():
    stack, profile = shaded(2)
    other = ShadingProfile.from_arrays(np.ones((24, 24)) + np.eye(24))
    fields = ProfileFields()
    with fields.reused():
        a = correct(stack, profile, device="cpu")
        b = correct(stack, other, device="cpu")
        a_again = correct(stack, profile, device="cpu")
        with pytest.raises(ValueError, match="the profile is \\(24, 24\\)"):
            correct(stack[:, :8, :8], profile, device="cpu")
    assert len(fields) == 2
    assert a.tobytes() == a_again.tobytes()
    assert a.tobytes() == correct(stack, profile, device="cpu").tobytes()
    assert b.tobytes() == correct(stack, other, device="cpu").tobytes()


def test_in_place_arithmetic_never_touches_the_input():
    stack, profile = shaded(3)
    images = stack.astype(np.float32)
    before = images.copy()
    result = correct(images, profile, device="cpu", dtype="float32")
    assert np.array_equal(images, before)
    flat = profile.flatfield.astype(np.float32)
    dark = profile.darkfield.astype(np.float32)
    assert np.array_equal(result, (before - dark) / flat)  # float32 arithmetic, same order


def test_float_frames_are_still_checked_for_nan():
    stack, profile = shaded(2)
    images = stack.astype(np.float32)
    images[1, 3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite values \\(frame 1\\)"):
        correct(images, profile, device="cpu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64]
)
def test_device_integers_have_numpys_bits(dtype, device):
    """The values a clamped, rounded float32 block can hold, converted on the device, read back
    as NumPy's conversion of the same float32 values (the bounds included)."""
    low, high = integer_bounds(dtype)
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [[low, high, 0, -1, 1, np.nextafter(np.float32(high), 0)], rng.uniform(low, high, 500)]
    )
    values = np.clip(np.round(values.astype(np.float32)), low, high).astype(np.float32)
    bits = device_integers(torch.from_numpy(values).to(device), dtype)
    assert bits is not None and bits.element_size() == np.dtype(dtype).itemsize
    assert np.array_equal(bits.cpu().numpy().view(dtype), values.astype(dtype))


def test_device_integers_leave_floats_and_uint64_to_the_host():
    block = torch.zeros(3)
    assert device_integers(block, np.float32) is None
    assert device_integers(block, np.uint64) is None


@pytest.mark.parametrize("batch_axis", [None, 1])
def test_a_staged_integer_output_is_converted_before_it_leaves_the_device(monkeypatch, batch_axis):
    """The GPU path's logic, run on the CPU (its staging forced): an integer output never goes
    through the float32 download, and its bytes are those of the host path."""
    stack, profile = shaded(4)
    if batch_axis is not None:  # (T, P, Y, X): each problem's frames are strided in `out`
        stack = np.stack([stack, stack[::-1]], axis=1)
    params = {"batch_axis": batch_axis, "clip": True, "device": "cpu"}
    expected = correct(stack, profile, dtype="uint16", **params)
    downloads = []
    monkeypatch.setattr(_correct, "_stages", lambda device: True)
    monkeypatch.setattr(_correct, "download_into", lambda *a: downloads.append(a))
    got = correct(stack, profile, dtype="uint16", **params)
    assert not downloads
    assert got.tobytes() == expected.tobytes()


def test_a_staged_output_of_the_other_byte_order_keeps_its_values(monkeypatch):
    """The device's integers are native-endian: viewing a big-endian ``out`` as them would
    swap every value's bytes (found in review)."""
    stack, profile = shaded(4)
    expected = correct(stack, profile, dtype="uint16", clip=True, device="cpu")
    monkeypatch.setattr(_correct, "_stages", lambda device: True)
    # From a GPU, download_into assigns pinned float32 pieces with NumPy (on the CPU it would
    # wrap ``out`` in a tensor, which torch refuses for the other byte order).
    monkeypatch.setattr(_correct, "download_into", lambda o, t: o.__setitem__(..., t.numpy()))
    out = np.zeros(stack.shape, np.dtype(">u2" if np.little_endian else "<u2"))
    correct(stack, profile, dtype="uint16", clip=True, device="cpu", out=out)
    assert np.array_equal(out, expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("batch_axis", [None, 1])
def test_on_a_gpu_an_integer_output_has_the_cpus_bytes(batch_axis):
    stack, profile = shaded(4)
    if batch_axis is not None:
        stack = np.stack([stack, stack[::-1]], axis=1)
    fields = ProfileFields()
    with fields.reused():  # as a live session runs it, twice (the second reuses the fields)
        got = [correct(stack, profile, dtype="uint16", batch_axis=batch_axis, device="cuda")]
        got.append(correct(stack, profile, dtype="uint16", batch_axis=batch_axis, device="cuda"))
    expected = correct(stack, profile, dtype="uint16", batch_axis=batch_axis, device="cpu")
    assert len(fields) == 1
    # Each element within one unit of the CPU's (float32 kernels may round a half the other
    # way), and the two GPU runs alike.
    assert got[0].tobytes() == got[1].tobytes()
    assert np.abs(got[0].astype(np.int64) - expected.astype(np.int64)).max() <= 1
