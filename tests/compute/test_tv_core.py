"""TV denoising core: scikit-image parity, FGP optimality, spacing, dtypes, validation, jobs.

Oracles are independent of our code: scikit-image's ``denoise_tv_chambolle``, the ROF energy
recomputed here with NumPy, PSNR against noise-free phantoms, and analytic facts (ROF with
Neumann boundaries preserves the mean; strong convexity bounds the distance to the optimum by
the duality gap).
"""

from __future__ import annotations

import numpy as np
import pytest
from rof_oracle import rof_energy
from skimage.metrics import peak_signal_noise_ratio
from skimage.restoration import denoise_tv_chambolle

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.jobs import Progress, run_job
from napari_gpuscope.compute.noise import PoissonGaussian
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.sample_data import (
    DEFAULT_CAMERA,
    expected_camera_signal,
    fluorescence_phantom_2d,
    fluorescence_phantom_3d,
    simulate_camera,
)


def noisy(gt: np.ndarray, sigma: float = 0.1, seed: int = 1) -> np.ndarray:
    return (gt + sigma * np.random.default_rng(seed).standard_normal(gt.shape)).astype(np.float32)


def result_of(image, weight, **kwargs) -> tv.TVResult:
    return run_job(tv.iter_denoise(image, weight, device="cpu", **kwargs))


# --- scikit-image parity (method="chambolle") -------------------------------------------------


@pytest.mark.parametrize("shape", [(48, 40), (6, 20, 24)])
def test_chambolle_matches_skimage_at_fixed_iterations(shape):
    image = np.random.default_rng(3).random(shape).astype(np.float32)
    expected = denoise_tv_chambolle(image, weight=0.1, eps=0, max_num_iter=50)
    got = result_of(image, 0.1, method="chambolle", tolerance=0, max_iterations=50)
    assert got.iterations == 50
    assert not got.converged
    np.testing.assert_array_equal(got.image, expected)  # bitwise (see test_tv_chambolle)


def test_chambolle_matches_skimage_default_stopping_rule():
    image = noisy(fluorescence_phantom_2d((64, 64)))
    expected = denoise_tv_chambolle(image, weight=0.1)  # eps=2e-4 stops early
    got = result_of(image, 0.1, method="chambolle", tolerance=2e-4)
    assert got.converged and got.iterations < 200
    np.testing.assert_array_equal(got.image, expected)  # bitwise (see test_tv_chambolle)


def test_chambolle_channel_axis_matches_skimage():
    image = np.random.default_rng(4).random((30, 2, 26)).astype(np.float32)
    expected = denoise_tv_chambolle(image, weight=0.15, channel_axis=1)
    got = result_of(image, 0.15, method="chambolle", tolerance=2e-4, channel_axis=1)
    np.testing.assert_array_equal(got.image, expected)  # bitwise (see test_tv_chambolle)


# --- FGP: convergence certificate and quality --------------------------------------------------


def test_fgp_gap_certifies_the_energy():
    gt = fluorescence_phantom_2d((64, 64))
    image = noisy(gt)
    weight = 0.1
    got = result_of(image, weight, tolerance=1e-3)
    assert got.converged and got.relative_gap <= 1e-3
    assert got.method == "fgp" and got.iterations < 200
    # Reference optimum: scikit-image's Chambolle run far past its default stop.
    reference = denoise_tv_chambolle(image.astype(np.float64), weight, eps=0, max_num_iter=3000)
    ours = rof_energy(got.image, image, weight)
    best = rof_energy(reference, image, weight)
    # P(u) - P* <= gap = relative_gap * P(u); the reference is itself only near-optimal.
    assert ours - best <= got.relative_gap * ours + 1e-5 * best
    # ... and the gap is informative, not vacuous: we are within 0.1 % of the optimum.
    assert ours - best <= 1e-3 * best
    # Strong convexity: 0.5 ||u - u*||^2 <= P(u) - P*  (bounded by the certified gap).
    distance = np.sqrt(np.sum((got.image.astype(np.float64) - reference) ** 2))
    assert distance <= np.sqrt(2 * (got.relative_gap * ours + 1e-5 * best))


def test_fgp_tolerance_zero_runs_all_iterations_and_tighter_is_better():
    image = noisy(fluorescence_phantom_2d((48, 48)))
    loose = result_of(image, 0.1, tolerance=1e-2)
    exact = result_of(image, 0.1, tolerance=0, max_iterations=300)
    assert exact.iterations == 300 and not exact.converged
    assert exact.relative_gap < loose.relative_gap <= 1e-2
    assert rof_energy(exact.image, image, 0.1) <= rof_energy(loose.image, image, 0.1)


def test_nonnegative_solves_the_constrained_problem():
    gt = fluorescence_phantom_2d((48, 48)) * 0.2  # dim image: noise pushes many pixels below 0
    image = noisy(gt)
    free = result_of(image, 0.05, tolerance=1e-4)
    boxed = result_of(image, 0.05, tolerance=1e-4, nonnegative=True)
    assert free.image.min() < 0
    assert boxed.image.min() >= 0
    assert boxed.converged and boxed.relative_gap <= 1e-4
    # The constrained optimum beats any other feasible point, e.g. the clipped free solution.
    clipped = np.maximum(free.image, 0)
    assert rof_energy(boxed.image, image, 0.05) <= rof_energy(clipped, image, 0.05)


def _best_psnr(gt, image, weights, run):
    return max(peak_signal_noise_ratio(gt, run(image, w), data_range=1.0) for w in weights)


@pytest.mark.parametrize(
    ("gt", "weights"),
    [
        (fluorescence_phantom_2d((256, 256)), (0.065, 0.08, 0.1)),
        (fluorescence_phantom_3d((24, 96, 96)), (0.05, 0.065, 0.08)),
    ],
    ids=["2d", "3d"],
)
def test_fgp_beats_skimage_default_stopping_on_phantoms(gt, weights):
    image = noisy(gt)
    skimage_best = _best_psnr(gt, image, weights, lambda x, w: denoise_tv_chambolle(x, w))
    ours_best = _best_psnr(gt, image, weights, lambda x, w: tv.denoise(x, w, device="cpu"))
    # Measured here: +0.29 dB (2D) and +0.25 dB (3D) at the best grid weight of each.
    assert ours_best >= skimage_best + 0.15


# --- spacing ----------------------------------------------------------------------------------


def test_tiny_z_weight_gives_the_slice_by_slice_result():
    gt = fluorescence_phantom_3d((4, 40, 40))
    image = noisy(gt)
    got = result_of(image, 0.1, spacing=(1e-4, 1.0, 1.0), tolerance=1e-5, max_iterations=2000)
    expected = np.stack(
        [denoise_tv_chambolle(plane, 0.1, eps=0, max_num_iter=2000) for plane in image]
    )
    # Both are within ~1e-5 relative energy of the same per-slice optima; by strong convexity
    # ||u - u*|| <= sqrt(2 gap), i.e. an RMS error of a few 1e-4 here. The z coupling of 1e-4
    # (the smallest non-zero weight accepted) moves the optimum by O(1e-5).
    rms = np.sqrt(np.mean((got.image - expected) ** 2))
    assert rms < 1e-3
    assert np.abs(got.image - expected).max() < 5e-3


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
def test_zero_weight_axis_is_exactly_independent(method):
    image = noisy(fluorescence_phantom_3d((3, 24, 28)))
    kwargs = {"method": method, "tolerance": 0, "max_iterations": 40}
    stacked = result_of(image, 0.1, spacing=(0.0, 1.0, 1.0), **kwargs).image
    per_slice = np.stack([result_of(plane, 0.1, **kwargs).image for plane in image])
    np.testing.assert_allclose(stacked, per_slice, rtol=0, atol=1e-6)


def test_zero_weight_time_axis_with_skimage_stopping_per_frame():
    image = np.random.default_rng(8).random((3, 30, 30)).astype(np.float32)
    image[1] *= 0.2  # a very different frame stops at a different iteration
    got = result_of(image, 0.1, method="chambolle", tolerance=2e-4, spacing=(0, 1, 1))
    expected = np.stack([denoise_tv_chambolle(frame, 0.1) for frame in image])
    np.testing.assert_array_equal(got.image, expected)  # bitwise (see test_tv_chambolle)


def test_anisotropic_spacing_uses_weighted_differences():
    image = noisy(fluorescence_phantom_3d((8, 24, 24)))
    spacing = (0.3, 1.0, 1.0)
    got = result_of(image, 0.1, spacing=spacing, tolerance=1e-4)
    isotropic = result_of(image, 0.1, tolerance=1e-4)
    ours = rof_energy(got.image, image, 0.1, spacing)
    # The weighted problem's solution beats the isotropic solution on the weighted energy.
    assert ours <= rof_energy(isotropic.image, image, 0.1, spacing)
    assert ours - rof_energy(isotropic.image, image, 0.1, spacing) < 0
    assert got.spacing == spacing


def test_4d_with_channel_axis_is_independent_per_channel():
    rng = np.random.default_rng(9)
    image = rng.random((2, 3, 5, 12, 14)).astype(np.float32)  # (C, T, Z, Y, X)
    kwargs = {"tolerance": 0, "max_iterations": 20, "spacing": (0.5, 1, 1, 1)}
    got = result_of(image, 0.1, channel_axis=0, **kwargs)
    assert got.image.shape == image.shape
    for c in range(2):
        alone = result_of(image[c], 0.1, **kwargs).image
        np.testing.assert_allclose(got.image[c], alone, rtol=0, atol=1e-6)


# --- dtypes and units -------------------------------------------------------------------------


def test_integer_inputs_are_denoised_in_their_own_units():
    gt = fluorescence_phantom_2d((48, 48))
    adu = simulate_camera(gt, DEFAULT_CAMERA)
    assert adu.dtype == np.uint16
    weight = 8.0  # ADU
    from_uint16 = tv.denoise(adu, weight, device="cpu")
    from_float = tv.denoise(adu.astype(np.float32), weight, device="cpu")
    assert from_uint16.dtype == np.float32 and from_uint16.shape == adu.shape
    np.testing.assert_array_equal(from_uint16, from_float)
    # No rescaling to [0, 1]: ROF with Neumann boundaries preserves the mean exactly.
    assert from_uint16.mean() == pytest.approx(adu.mean(), rel=1e-5)
    small = (gt * 200).astype(np.uint8)
    out8 = tv.denoise(small, 5.0, device="cpu")
    assert out8.dtype == np.float32
    np.testing.assert_array_equal(out8, tv.denoise(small.astype(np.float32), 5.0, device="cpu"))
    as64 = tv.denoise(adu.astype(np.float64), weight, device="cpu")
    assert as64.dtype == np.float32
    np.testing.assert_allclose(as64, from_float, rtol=0, atol=1e-3)


def test_weight_zero_returns_the_input_and_no_coupled_axis_is_an_error():
    image = np.random.default_rng(2).random((5, 6)).astype(np.float64)
    np.testing.assert_array_equal(tv.denoise(image, 0.0, device="cpu"), image.astype(np.float32))
    got = result_of(image, 0.0)
    assert got.converged and got.iterations == 0
    # Spacing 0 everywhere would silently return the input: it is refused with the reason.
    with pytest.raises(ParameterError, match="no coupled axis"):
        result_of(image, 0.3, spacing=(0, 0))


def test_poisson_mode_with_given_camera():
    gt = fluorescence_phantom_2d((128, 128))
    camera = DEFAULT_CAMERA
    adu = simulate_camera(gt, camera)
    expected_adu = expected_camera_signal(gt, camera)
    got = result_of(
        adu,
        0.8,
        noise_model="poisson",
        gain=camera.gain,
        offset=camera.offset,
        read_noise=camera.read_noise,
    )
    assert got.poisson == PoissonGaussian(camera.gain, camera.offset, camera.read_noise)
    assert got.image.dtype == np.float32
    error_before = np.sqrt(np.mean((adu - expected_adu) ** 2))
    error_after = np.sqrt(np.mean((got.image - expected_adu) ** 2))
    assert error_after < 0.6 * error_before  # measured: 3.4 vs 7.0 ADU
    # The exact unbiased inverse keeps the mean intensity (the algebraic one would not).
    assert got.image.mean() == pytest.approx(expected_adu.mean(), rel=0.01)
    summary = got.summary()
    assert summary["camera"]["gain"] == camera.gain and summary["noise_model"] == "poisson"


def test_poisson_mode_estimates_the_camera_without_gain():
    gt = fluorescence_phantom_2d((256, 256))
    camera = DEFAULT_CAMERA
    adu = simulate_camera(gt, camera)
    got = result_of(adu, 1.0, noise_model="poisson")
    assert got.poisson is not None
    assert got.poisson.gain == pytest.approx(camera.gain, rel=0.3)


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "match"),
    [
        (np.ones((8, 8), dtype=np.complex64), "complex"),
        (np.ones((8, 8), dtype=bool), "boolean"),
        (np.ones((0, 8), dtype=np.float32), "empty"),
        (np.ones(8, dtype=np.float32), "dimension"),
        (np.ones((2, 2, 2, 2, 2), dtype=np.float32), "dimension"),
    ],
)
def test_invalid_images_are_rejected(image, match):
    with pytest.raises(InvalidInputError, match=match):
        tv.denoise(image, 0.1, device="cpu")


def test_nan_reports_count_and_location():
    image = np.zeros((6, 7), dtype=np.float32)
    image[2, 3] = np.nan
    image[4, 1] = np.nan
    with pytest.raises(InvalidInputError, match=r"2 non-finite.*\(2, 3\)"):
        tv.denoise(image, 0.1, device="cpu")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weight": -0.1}, "weight"),
        ({"weight": float("nan")}, "weight"),
        ({"spacing": (1.0,)}, "spacing"),
        ({"spacing": (1.0, -1.0)}, "spacing"),
        ({"spacing": (1.0, float("inf"))}, "spacing"),
        ({"spacing": "ab"}, "spacing"),
        ({"method": "bregman"}, "method"),
        ({"noise_model": "laplace"}, "noise_model"),
        ({"tolerance": -1.0}, "tolerance"),
        ({"max_iterations": 0}, "max_iterations"),
        ({"max_iterations": 2.5}, "max_iterations"),
        ({"channel_axis": 3}, "channel_axis"),
        ({"memory_budget": -5}, "memory_budget"),
        ({"noise_model": "poisson", "gain": -1.0}, "gain"),
    ],
)
def test_invalid_parameters_name_themselves(kwargs, match):
    kwargs = {"weight": 0.1, **kwargs}
    weight = kwargs.pop("weight")
    with pytest.raises(ValueError, match=match):
        tv.iter_denoise(np.ones((8, 8), np.float32), weight, device="cpu", **kwargs)


# --- jobs: progress, previews, cancellation ---------------------------------------------------


def test_progress_updates_carry_iteration_gap_and_preview():
    image = noisy(fluorescence_phantom_2d((40, 40)))
    updates: list[Progress] = []
    result = run_job(
        tv.iter_denoise(image, 0.1, tolerance=0, max_iterations=30, device="cpu"),
        on_progress=updates.append,
    )
    assert [u.metrics["iteration"] for u in updates] == [10, 20, 30]
    assert all(0 <= u.fraction <= 1 for u in updates)
    assert updates[-1].metrics["relative_gap"] == pytest.approx(result.relative_gap)
    assert "iteration 30/30" in updates[-1].message
    output = updates[0].outputs[tv.OUTPUT]
    assert output.is_lazy and output.region is None and output.shape == image.shape
    assert result.summary()["iterations"] == 30


def test_lazy_preview_is_the_current_estimate_when_made_during_the_update():
    image = noisy(fluorescence_phantom_2d((40, 40)))
    previews = []

    def consume(update: Progress) -> None:  # the job is paused here: the copy is valid
        previews.append(update.outputs[tv.OUTPUT].array())

    result = run_job(
        tv.iter_denoise(image, 0.1, tolerance=0, max_iterations=20, device="cpu"),
        on_progress=consume,
    )
    assert [p.shape for p in previews] == [image.shape, image.shape]
    np.testing.assert_array_equal(previews[-1], result.image)  # the last tick is the result
    assert not np.array_equal(previews[0], previews[1])


def test_closing_the_job_midway_is_clean_and_leaves_the_input_alone():
    image = noisy(fluorescence_phantom_2d((40, 40)))
    original = image.copy()
    job = tv.iter_denoise(image, 0.1, tolerance=0, max_iterations=100, device="cpu")
    first = next(job)
    assert first.metrics["iteration"] == 10
    next(job)
    job.close()  # what a cancelled worker does
    np.testing.assert_array_equal(image, original)
    result = result_of(image, 0.1, tolerance=0, max_iterations=20)
    assert result.image is not image
    np.testing.assert_array_equal(image, original)


def test_denoise_without_device_needs_a_gpu():
    from napari_gpuscope.compute.devices import NoGPUError, list_gpus

    if list_gpus():
        pytest.skip("a GPU is present")
    with pytest.raises(NoGPUError):
        tv.denoise(np.ones((8, 8), np.float32), 0.1)


def test_progress_follows_convergence_not_only_the_iteration_budget():
    image = noisy(fluorescence_phantom_2d((64, 64)))
    updates = []
    result = run_job(
        tv.iter_denoise(image, 0.1, max_iterations=10_000, tolerance=1e-3, device="cpu"),
        on_progress=updates.append,
    )
    fractions = [u.fraction for u in updates]
    assert result.converged and result.iterations < 1_000
    assert fractions == sorted(fractions)
    # Counting iterations alone would stay below 10 % for a run that converges early.
    assert fractions[-1] == pytest.approx(1.0)
