"""``method="chambolle"``: bitwise parity with scikit-image, its stopping rule, constant problems.

Oracles: ``skimage.restoration.denoise_tv_chambolle`` (0.26) on float32 data, NumPy's own float32
sums, and a NumPy re-implementation of scikit-image's loop with per-axis weights (scikit-image
has no spacing) written here from its source.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage.restoration import denoise_tv_chambolle

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.devices import count_host_syncs
from napari_gpuscope.compute.jobs import STOP, run_job
from napari_gpuscope.compute.tv._chambolle import solve_chambolle, sqrt_rounded_
from napari_gpuscope.compute.tv._numpy_sum import PairwiseSum
from napari_gpuscope.sample_data import fluorescence_phantom_2d, fluorescence_phantom_3d


def noisy(gt: np.ndarray, sigma: float = 0.09, seed: int = 0) -> np.ndarray:
    return (gt + sigma * np.random.default_rng(seed).standard_normal(gt.shape)).astype(np.float32)


def chambolle(image, weight, **kwargs) -> tv.TVResult:
    return run_job(tv.iter_denoise(image, weight, method="chambolle", device="cpu", **kwargs))


def skimage_loop_with_spacing(image, weight, spacing, iterations):
    """scikit-image's ``_denoise_tv_chambolle_nd`` (eps = 0) with differences weighted by
    ``spacing``: the same NumPy expressions, each axis term multiplied by its weight."""
    ndim = image.ndim
    s = [image.dtype.type(v) for v in spacing]
    p = np.zeros((ndim, *image.shape), dtype=image.dtype)
    g = np.zeros_like(p)
    tau = 1.0 / (2.0 * sum(v * v for v in spacing))
    out = image
    for i in range(iterations):
        if i > 0:
            d = -sum((s[a] * p[a] for a in range(1, ndim)), s[0] * p[0])
            for a in range(ndim):
                index_d = [slice(None)] * ndim
                index_p = [slice(None)] * ndim
                index_d[a], index_p[a] = slice(1, None), slice(0, -1)
                d[tuple(index_d)] += s[a] * p[a][tuple(index_p)]
            out = image + d
        for a in range(ndim):
            index = [slice(None)] * ndim
            index[a] = slice(0, -1)
            g[a][tuple(index)] = s[a] * np.diff(out, axis=a)
        norm = np.sqrt((g**2).sum(axis=0))[np.newaxis, ...]
        norm *= tau / weight
        norm += 1.0
        p -= tau * g
        p /= norm
    return out


# --- bitwise parity on realistic images -------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [noisy(fluorescence_phantom_2d((320, 288))), noisy(fluorescence_phantom_3d((24, 96, 80)))],
    ids=["2d-320x288", "3d-24x96x80"],
)
def test_fixed_iterations_are_bitwise_scikit_image_float32(image):
    expected = denoise_tv_chambolle(image, weight=0.1, eps=0, max_num_iter=100)
    as_float64 = denoise_tv_chambolle(image.astype(np.float64), weight=0.1, eps=0, max_num_iter=100)
    got = chambolle(image, 0.1, tolerance=0, max_iterations=100)
    assert got.iterations == 100 and not got.converged
    # Issue 6.7: at least as close to scikit-image's float32 result as its own float32 and
    # float64 runs are to each other (measured: 2.0e-4 in 2D, 2.3e-6 in 3D); in fact equal.
    assert np.abs(as_float64 - expected).max() > 0
    np.testing.assert_array_equal(got.image, expected)


def test_default_stopping_rule_is_bitwise_scikit_image():
    image = noisy(fluorescence_phantom_2d((256, 256)), sigma=0.1, seed=3)
    for weight in (0.05, 0.1, 0.2):
        expected = denoise_tv_chambolle(image, weight=weight)  # eps=2e-4 stops early
        got = chambolle(image, weight, tolerance=2e-4)
        assert got.converged and got.iterations < 200
        np.testing.assert_array_equal(got.image, expected)


def test_tiny_images_stop_at_the_same_iteration_as_scikit_image():
    # Issue 7.2.8: float32 energies summed in NumPy's order; a float64 sum stopped 265 of these
    # 300 a step apart (sqrt rounding included).
    rng = np.random.default_rng(0)
    mismatches = []
    for trial in range(120):
        shape = tuple(int(n) for n in rng.integers(2, 12, rng.integers(2, 4)))
        image = rng.random(shape).astype(np.float32)
        weight = float(rng.choice([0.05, 0.1, 0.3]))
        expected = denoise_tv_chambolle(image, weight)
        got = chambolle(image, weight, tolerance=2e-4).image
        if not np.array_equal(got, expected):
            mismatches.append((trial, shape, weight))
    assert mismatches == []


def test_anisotropic_spacing_follows_the_same_loop_bitwise():
    image = noisy(fluorescence_phantom_3d((16, 64, 56)))
    spacing = (0.3, 1.0, 0.8)
    expected = skimage_loop_with_spacing(image, 0.1, spacing, 60)
    got = chambolle(image, 0.1, spacing=spacing, tolerance=0, max_iterations=60)
    np.testing.assert_array_equal(got.image, expected)
    # And the float64 loop is as close as precision allows (float32 vs float64 drift).
    reference64 = skimage_loop_with_spacing(image.astype(np.float64), 0.1, spacing, 60)
    assert np.abs(got.image - reference64).max() < 1e-4


def test_channels_and_frames_stop_independently_and_exactly():
    rng = np.random.default_rng(8)
    image = rng.random((3, 40, 36)).astype(np.float32)
    image[1] *= 0.2  # a very different frame stops at a different iteration
    got = chambolle(image, 0.1, tolerance=2e-4, spacing=(0, 1, 1))
    expected = np.stack([denoise_tv_chambolle(frame, 0.1) for frame in image])
    np.testing.assert_array_equal(got.image, expected)
    by_channel = chambolle(np.moveaxis(image, 0, -1), 0.1, tolerance=2e-4, channel_axis=-1)
    np.testing.assert_array_equal(np.moveaxis(by_channel.image, -1, 0), expected)


# --- constant problems (issue 7.2.5) ------------------------------------------------------------


def test_constant_image_stops_at_once_even_with_a_huge_iteration_limit():
    image = np.full((64, 64), 0.25, dtype=np.float32)
    got = chambolle(image, 0.1, tolerance=2e-4, max_iterations=1_000_000)
    assert got.iterations == 1 and got.converged and got.relative_gap == 0
    # scikit-image runs all its iterations there and returns the input unchanged.
    np.testing.assert_array_equal(got.image, denoise_tv_chambolle(image, 0.1, max_num_iter=50))
    np.testing.assert_array_equal(got.image, image)


def test_a_blank_channel_does_not_hold_the_batch_to_the_iteration_limit():
    cells = noisy(fluorescence_phantom_2d((96, 96)), sigma=0.1)
    image = np.stack([cells, np.zeros_like(cells)], axis=-1)
    got = chambolle(image, 0.1, tolerance=2e-4, channel_axis=-1, max_iterations=5000)
    alone = denoise_tv_chambolle(cells, 0.1, max_num_iter=5000)
    assert got.converged and got.iterations < 200
    np.testing.assert_array_equal(got.image[..., 0], alone)
    np.testing.assert_array_equal(got.image[..., 1], 0)


# --- solver details ---------------------------------------------------------------------------


def test_numpy_pairwise_sum_is_reproduced_bit_for_bit():
    rng = np.random.default_rng(1)
    sizes = [1, 5, 7, 8, 9, 127, 128, 129, 1000, 8192, 8193, 90_000, 300 * 301]
    unlike_float64 = 0
    for n in sizes:
        values = (rng.random((2, n)).astype(np.float32) * 1e3) ** 2
        got = PairwiseSum(n, torch.device("cpu"))(torch.from_numpy(values)).numpy()
        np.testing.assert_array_equal(got, values.sum(axis=1))  # NumPy: float32, pairwise
        exact = values.astype(np.float64).sum(axis=1).astype(np.float32)
        unlike_float64 += int(not np.array_equal(got, exact))
    assert unlike_float64 >= 5  # the order matters: a float64 sum would not do


def test_square_root_is_correctly_rounded():
    values = torch.rand(100_000, generator=torch.Generator().manual_seed(2)) * 1e4
    rounded = sqrt_rounded_(values.clone())
    np.testing.assert_array_equal(rounded.numpy(), np.sqrt(values.numpy()))  # IEEE in NumPy


def test_stop_keeps_the_current_estimate_and_says_so():
    f = torch.from_numpy(noisy(fluorescence_phantom_2d((64, 64))))[None]
    solver = solve_chambolle(f, 0.1, [1.0, 1.0], max_iterations=500, eps=0)
    tick = next(solver)
    estimate = tick.estimate.clone()
    try:
        solver.send(STOP)
    except StopIteration as done:
        result = done.value
    assert result.stopped and not result.converged and result.iterations == 10
    torch.testing.assert_close(result.image, estimate, rtol=0, atol=0)
    # The returned dual certifies the returned image: u = f + div y with |y| <= weight.
    y = result.dual
    assert float(y.square().sum(0).sqrt().max()) <= 0.1 * (1 + 1e-6)
    expected = denoise_tv_chambolle(f[0].numpy(), 0.1, eps=0, max_num_iter=10)
    np.testing.assert_array_equal(result.image[0].numpy(), expected)


# --- host synchronisation (issue 7.1.8) --------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_chambolle_syncs_with_the_host_at_most_once_per_check_block():

    image = noisy(fluorescence_phantom_2d((256, 256)))
    f = torch.from_numpy(image)[None].cuda()

    def syncs(iterations: int) -> int:
        solver = solve_chambolle(f, 0.1, [1.0, 1.0], max_iterations=iterations, eps=0)
        return count_host_syncs(lambda: [None for _ in solver])[1]

    short, long = syncs(100), syncs(300)
    # One transfer per check block (every 10 iterations) plus a fixed cost per solve.
    assert long - short <= (300 - 100) // 10
    expected = denoise_tv_chambolle(image, 0.1, eps=0, max_num_iter=100)
    got = run_job(tv.iter_denoise(image, 0.1, method="chambolle", tolerance=0, max_iterations=100))
    np.testing.assert_array_equal(got.image, expected)
