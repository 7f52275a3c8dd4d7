"""Channel registration (issue 19): known sub-pixel shifts and a known smooth distortion,
rendered exactly (emitters moved before imaging, no interpolation) with Poisson noise;
scikit-image's phase_cross_correlation and SciPy's shift as independent references."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage
from scipy.special import erf
from skimage.registration import phase_cross_correlation

from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf._register import (
    RegistrationResult,
    apply_registration,
    register_channels,
)
from napari_gpuscope.compute.params import ParameterError

SHAPE = (160, 176)
RANDOM = np.random.default_rng(9).random((2, 32, 32))


def _emitters(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(-8, SHAPE[0] + 8, n), rng.uniform(-8, SHAPE[1] + 8, n)])


def _image(positions, *, photons=400.0, background=20.0, sigma=1.6, seed=0, noise=True):
    """Pixel-integrated Gaussian PSFs at ``positions`` (exact for any sub-pixel position),
    background, Poisson noise."""
    s2 = np.sqrt(2.0) * sigma

    def profile(n, centres):
        grid = np.arange(n)[None, :]
        return 0.5 * (
            erf((grid + 0.5 - centres[:, None]) / s2) - erf((grid - 0.5 - centres[:, None]) / s2)
        )

    clean = background + photons * np.einsum(
        "nr,nc->rc", profile(SHAPE[0], positions[:, 0]), profile(SHAPE[1], positions[:, 1])
    )
    if not noise:
        return clean
    return np.random.default_rng(seed).poisson(clean).astype(np.float32)


@pytest.fixture(scope="module")
def scene():
    return _emitters(500, seed=1)


@pytest.mark.parametrize("shift", [(0.3, -0.7), (2.45, 1.15), (-4.8, 3.33)])
def test_a_known_sub_pixel_shift_is_recovered_within_0_1_px(scene, shift, cpu_device):
    reference = _image(scene, seed=2)
    moving = _image(scene + np.asarray(shift), seed=3)
    result = register_channels(np.stack([reference, moving]), device=cpu_device)
    assert isinstance(result, RegistrationResult)
    np.testing.assert_array_equal(result.shifts[0], (0.0, 0.0))
    assert np.abs(result.shifts[1] - shift).max() < 0.1
    # scikit-image agrees (it returns the shift that registers moving: the opposite sign)
    oracle, *_ = phase_cross_correlation(reference, moving, upsample_factor=50, normalization=None)
    assert np.abs(result.shifts[1] + oracle).max() < 0.1
    assert 0.5 < result.similarity[1] <= 1.0


def test_three_channels_a_pair_and_frame_stacks(scene, cpu_device):
    shifts = np.array([(1.2, -0.4), (0.0, 0.0), (-2.6, 0.9)])
    images = np.stack([_image(scene + s, seed=10 + k) for k, s in enumerate(shifts)])
    result = register_channels(images, reference_channel=1, device=cpu_device)
    assert np.abs(result.shifts - shifts).max() < 0.1
    assert result.describe().startswith("registration to channel 1: channel 0: dy +1.")
    # (moving, reference): channel 0 is the moving one, 1 the reference
    pair = register_channels((images[2], images[1]), device=cpu_device)
    assert pair.reference_channel == 1 and np.abs(pair.shifts[0] - shifts[2]).max() < 0.1
    # (C, T, Y, X): each channel's mean over its frames is registered
    frames = np.stack(
        [
            np.stack([_image(scene + s, photons=60, seed=100 * k + t) for t in range(6)])
            for k, s in enumerate(shifts)
        ]
    )
    stacked = register_channels(frames, reference_channel=1, device=cpu_device)
    assert np.abs(stacked.shifts - shifts).max() < 0.1
    aligned = apply_registration(frames, stacked, device=cpu_device)
    assert aligned.shape == frames.shape and aligned.dtype == np.float32


def test_applied_registration_equals_scipy_shift_in_the_interior(scene, cpu_device):
    clean = _image(scene, noise=False)
    shift = (1.37, -2.61)
    moved = _image(scene + np.asarray(shift), noise=False)
    channels = np.stack([clean, moved]).astype(np.float32)
    result = register_channels(channels, device=cpu_device)
    aligned = apply_registration(channels, result, device=cpu_device)
    np.testing.assert_array_equal(aligned[0], channels[0])
    expected = ndimage.shift(moved, -result.shifts[1], order=3, mode="nearest")
    inner = (slice(8, -8), slice(8, -8))
    span = float(np.ptp(clean))
    # cubic convolution (ours) against SciPy's cubic spline: the same to ~1 % of the range
    assert np.abs(aligned[1][inner] - expected[inner]).max() < 0.01 * span
    # and the aligned channel is the reference, up to interpolation
    assert np.abs(aligned[1][inner] - clean[inner]).max() < 0.02 * span


def test_integer_shifts_copy_pixels(cpu_device):
    rng = np.random.default_rng(4)
    base = ndimage.gaussian_filter(rng.random((64, 80)), 1.5).astype(np.float32)
    moved = np.roll(base, (3, -2), axis=(0, 1))
    result = RegistrationResult(
        shifts=np.array([(0.0, 0.0), (3.0, -2.0)]),
        reference_channel=0,
        similarity=np.ones(2),
        shape=(64, 80),
    )
    aligned = apply_registration(np.stack([base, moved]), result, device=cpu_device)
    np.testing.assert_array_equal(aligned[1][4:-4, 4:-4], base[4:-4, 4:-4])


def test_elastic_registration_follows_a_smooth_distortion(cpu_device):
    """A chromatic-like magnification difference: channel 1 is channel 0 scaled by 1.012 about
    the centre (up to ~1 px at the corners); one translation cannot remove it, the block map
    does."""
    scene = _emitters(900, seed=5)
    centre = (np.asarray(SHAPE) - 1) / 2
    scale = 1.012
    reference = _image(scene, seed=6)
    moving = _image(centre + scale * (scene - centre), seed=7)
    channels = np.stack([reference, moving])
    rigid = register_channels(channels, device=cpu_device)
    elastic = register_channels(channels, elastic=True, block_size=48, device=cpu_device)
    assert elastic.fields.shape == (2, 2, *SHAPE) and elastic.block_shifts.shape[:2] == (2, 2)
    rows, cols = elastic.block_centres
    truth_y = (scale - 1) * (rows[:, None] - centre[0]) * np.ones((1, cols.size))
    truth_x = (scale - 1) * (cols[None, :] - centre[1]) * np.ones((rows.size, 1))
    error = np.hypot(elastic.block_shifts[1, 0] - truth_y, elastic.block_shifts[1, 1] - truth_x)
    assert np.sqrt(np.mean(error**2)) < 0.15
    np.testing.assert_array_equal(elastic.fields[0], 0.0)
    # the per-pixel map explains the channel better than the translation
    clean_ref = _image(scene, noise=False)
    clean_moving = _image(centre + scale * (scene - centre), noise=False)
    both = np.stack([clean_ref, clean_moving]).astype(np.float32)
    inner = (slice(16, -16), slice(16, -16))

    def residual(result):
        aligned = apply_registration(both, result, device=cpu_device)
        return float(np.sqrt(np.mean((aligned[1][inner] - clean_ref[inner]) ** 2)))

    assert residual(elastic) < 0.5 * residual(rigid)
    facts = elastic.summary()
    assert facts["elastic"] and facts["block_size"] == 48


def test_inputs_are_not_modified(scene, cpu_device):
    channels = np.stack([_image(scene, seed=1), _image(scene + 1.5, seed=2)])
    before = channels.copy()
    result = register_channels(channels, elastic=True, block_size=64, device=cpu_device)
    apply_registration(channels, result, device=cpu_device)
    np.testing.assert_array_equal(channels, before)


@pytest.mark.parametrize(
    ("channels", "kwargs", "error", "match"),
    [
        ((np.ones((32, 32)), np.ones((32, 40))), {}, InvalidInputError, "different shapes"),
        (np.ones((1, 32, 32)), {}, InvalidInputError, "at least two"),
        (np.ones((32, 32)), {}, InvalidInputError, "dimension"),
        (np.ones((2, 8, 8)), {}, InvalidInputError, "at least 16 x 16"),
        (np.ones((2, 32, 32)), {}, InvalidInputError, "constant"),
        (np.full((2, 32, 32), np.nan), {}, InvalidInputError, "non-finite"),
        (RANDOM, {"reference_channel": 2}, ParameterError, "reference_channel"),
        (
            RANDOM,
            {"elastic": True, "block_size": 64},
            ParameterError,
            "block_size",
        ),
        (RANDOM, {"max_shift": -1}, ParameterError, "max_shift"),
        (
            RANDOM,
            {"elastic": True, "block_size": 16, "min_similarity": 1.5},
            ParameterError,
            "min_similarity",
        ),
    ],
)
def test_bad_input_is_refused_naming_it(channels, kwargs, error, match, cpu_device):
    with pytest.raises(error, match=match):
        register_channels(channels, device=cpu_device, **kwargs)


def test_apply_refuses_channels_of_another_shape(cpu_device):
    result = RegistrationResult(
        shifts=np.zeros((2, 2)), reference_channel=0, similarity=np.ones(2), shape=(32, 32)
    )
    with pytest.raises(InvalidInputError, match="measured on 2 channels"):
        apply_registration(np.ones((2, 32, 40)), result, device=cpu_device)


@pytest.mark.parametrize("scale", [1e-30, 1e36])
def test_shifts_do_not_depend_on_the_intensity_scale(scene, scale, cpu_device):
    reference = _image(scene, seed=2).astype(np.float64) * scale
    moving = _image(scene + np.asarray((1.3, -0.6)), seed=3).astype(np.float64) * scale
    result = register_channels(np.stack([reference, moving]), device=cpu_device)
    assert np.abs(result.shifts[1] - (1.3, -0.6)).max() < 0.1


# NanoPyx 2.1.5's channel registration on committed fixtures (make_register_fixtures.py, run in
# its own venv): the same data, the true displacement, and what NanoPyx measured.
NANOPYX = Path(__file__).parents[1] / "fixtures" / "esrrf" / "nanopyx_register.npz"


def _nanopyx_cases() -> dict[str, np.ndarray]:
    with np.load(NANOPYX) as data:
        return {key: data[key] for key in data.files}


@pytest.mark.parametrize("case", ["shift_0", "shift_1", "shift_2"])
def test_at_least_as_accurate_as_nanopyx_on_its_fixtures(case, cpu_device):
    data = _nanopyx_cases()
    channels, truth = data[f"{case}/channels"], data[f"{case}/truth"]
    ours = register_channels(channels, device=cpu_device).shifts[1]
    theirs = data[f"{case}/nanopyx"]
    assert np.abs(ours - truth).max() < 0.1
    assert np.hypot(*(ours - truth)) <= np.hypot(*(theirs - truth))


def test_the_elastic_map_is_at_least_as_accurate_as_nanopyx(cpu_device):
    data = _nanopyx_cases()
    meta = json.loads(str(data["meta"]))
    channels, scale = data["magnification/channels"], float(data["magnification/scale"])
    result = register_channels(channels, elastic=True, block_size=32, device=cpu_device)
    shape = channels.shape[-2:]
    centre = (np.asarray(shape) - 1) / 2
    rows, cols = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    truth_y = (1 - 1 / scale) * (rows - centre[0])
    truth_x = (1 - 1 / scale) * (cols - centre[1])
    edge = meta["interior"]
    inner = (slice(edge, -edge), slice(edge, -edge))
    error = np.hypot(result.fields[1, 0] - truth_y, result.fields[1, 1] - truth_x)[inner]
    rms = float(np.sqrt(np.mean(error**2)))
    assert rms <= float(data["magnification/nanopyx_rms"])
    assert rms < 0.15


def test_long_stacks_are_resampled_in_chunks_with_the_same_result(scene, monkeypatch, cpu_device):
    from napari_gpuscope.compute.esrrf import _register

    frames = np.stack(
        [
            np.stack([_image(scene + s, photons=60, seed=7 * t + k) for t in range(5)])
            for k, s in enumerate([(0.0, 0.0), (0.8, -1.3)])
        ]
    )
    result = register_channels(frames, device=cpu_device)
    whole = apply_registration(frames, result, device=cpu_device)
    monkeypatch.setattr(_register, "_CHUNK_PIXELS", 2 * SHAPE[0] * SHAPE[1])  # 2 frames a chunk
    chunked = apply_registration(frames, result, device=cpu_device)
    np.testing.assert_array_equal(chunked, whole)
    np.testing.assert_array_equal(whole[0], frames[0])  # the reference is copied
    one = apply_registration(frames[:, 3], result, device=cpu_device)
    np.testing.assert_array_equal(whole[:, 3], one)  # every frame moves by the channel's shift
