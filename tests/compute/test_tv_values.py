"""Intensities and parameters at the edges of float32 (issues 7.2.2 and 7.2.4).

Oracles: ROF's scale equivariance ``ROF(c f, c w) = c ROF(f, w)`` (the unscaled run is the
reference), the ROF energy recomputed in NumPy, and analytic facts (a constant image is its own
solution; a negligible weight leaves the input unchanged).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rof_oracle import rof_energy

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.compute.tv import _job
from napari_gpuscope.compute.tv._context import NumericalError
from napari_gpuscope.compute.tv._solvers import SolveResult, relative_gaps
from napari_gpuscope.sample_data import fluorescence_phantom_2d, fluorescence_phantom_3d


@pytest.fixture(scope="module")
def image():
    gt = fluorescence_phantom_2d((96, 96))
    return (gt + 0.1 * np.random.default_rng(0).standard_normal(gt.shape)).astype(np.float32)


def result_of(data, weight, **kwargs) -> tv.TVResult:
    return run_job(tv.iter_denoise(data, weight, device="cpu", **kwargs))


# --- any intensity units (7.2.2) --------------------------------------------------------------


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
@pytest.mark.parametrize(
    ("factor", "dtype"),
    [(1e30, np.float64), (1e20, np.float32), (1e-25, np.float64), (1e-30, np.float32)],
    ids=["1e30-f64", "1e20-f32", "1e-25-f64", "1e-30-f32"],
)
def test_results_are_scale_equivariant_at_any_magnitude(image, method, factor, dtype):
    # Squares of 1e20 overflow float32 and squares of 1e-25 underflow: these used to give NaN
    # images or energies of 0 reported as converged.
    reference = result_of(image, 0.1, method=method)
    data = (image.astype(np.float64) * factor).astype(dtype)
    scaled = result_of(data, 0.1 * factor, method=method)
    assert np.isfinite(scaled.image).all()
    assert scaled.iterations == reference.iterations
    assert scaled.converged == reference.converged
    # The gap is P - D of energies ~1e3 times larger, so the float32 rounding of the scaled
    # input (6e-8 relative) reaches it amplified; the image moves by the same rounding carried
    # through 200-odd momentum iterations. Measured: 1.3e-5 relative on the gap and 5.1e-7 on
    # the image on one 2-core Xeon, below 1e-5 and 1.8e-7 on another (torch's CPU sums follow
    # the vector width), so the bounds leave room for the machine and still catch the bugs this
    # guards against (NaN images, energies of 0 reported as converged: errors of order 1).
    assert scaled.relative_gap == pytest.approx(reference.relative_gap, rel=5e-5)
    np.testing.assert_allclose(scaled.image / factor, reference.image, rtol=0, atol=1.5e-6)


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
def test_float32_data_at_the_top_of_its_range_is_the_unit_result_times_a_power_of_two(
    image, method
):
    """Data whose maximum lies in [2**127, 2**128) (up to 3.4e38) is solved at 2**-128 scale;
    unscaling by 2**128 at once (itself beyond float32) gave infinity everywhere, reported as
    converged (issue 17, item 10). Powers of two are exact: the bits equal the unit result's
    times 2**127 (the data's own power-of-two multiple)."""
    unit = image / np.abs(image).max() * np.float32(1.99)  # max |f| in [1, 2)
    big = unit * np.float32(2.0**127)
    assert np.isfinite(big).all() and np.abs(big).max() > 2.0**127
    reference = result_of(unit, 0.05, method=method)
    top = result_of(big, 0.05 * 2.0**127, method=method)
    assert np.isfinite(top.image).all() and top.converged == reference.converged
    np.testing.assert_array_equal(top.image, reference.image * np.float32(2.0**127))


def test_strength_mode_estimates_the_noise_in_any_units(image):
    reference = result_of(image, None)
    scaled = result_of(image.astype(np.float64) * 1e30, None)
    assert scaled.noise_sigma == pytest.approx(reference.noise_sigma * 1e30, rel=1e-5)
    # The estimate reads float32 planes of the scaled data: the weights differ by ~1e-7.
    np.testing.assert_allclose(scaled.image / 1e30, reference.image, rtol=0, atol=5e-6)


def test_values_beyond_float32_are_refused_with_the_reason(image):
    with pytest.raises(InvalidInputError, match=r"beyond float32's range.*Divide the data"):
        tv.denoise(image.astype(np.float64) * 1e39, 0.1, device="cpu")
    with pytest.raises(InvalidInputError, match=r"below .*smallest normal.*Multiply the data"):
        tv.denoise(image.astype(np.float64) * 1e-40, 0.1, device="cpu")
    with pytest.raises(InvalidInputError, match="beyond float32's range"):
        data = image.astype(np.float64) * 1e300
        tv.denoise(data, 1.0, noise_model="poisson", gain=1.0, device="cpu")


def test_parity_with_scikit_image_survives_the_internal_scaling(image):
    from skimage.restoration import denoise_tv_chambolle

    for factor in (1.0, 3.0, 1e-3):  # max |f| not a power of two: the data is rescaled
        data = (image * factor).astype(np.float32)
        got = result_of(data, 0.1 * factor, method="chambolle", tolerance=2e-4)
        expected = denoise_tv_chambolle(data, 0.1 * factor)
        np.testing.assert_array_equal(got.image, expected)


# --- extreme weights, tiny axes, constants (7.2.4) ----------------------------------------------


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
def test_negligible_weight_returns_the_input(image, method):
    got = result_of(image, 1e-35, method=method)  # tau / weight would overflow float32
    np.testing.assert_array_equal(got.image, image)
    assert got.iterations == 0 and "negligible" in got.describe()


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
def test_tiny_weight_barely_moves_the_input(image, method):
    got = result_of(image, 1e-29, method=method)
    assert np.isfinite(got.image).all() and got.converged
    assert np.abs(got.image - image).max() <= 1e-6


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
def test_huge_weight_is_finite_and_honest(image, method):
    got = result_of(image, 1e30, method=method)
    assert np.isfinite(got.image).all() and np.isfinite(got.relative_gap)
    # The solution is the constant mean (Neumann boundaries preserve the mean exactly).
    assert got.image.mean() == pytest.approx(image.mean(), rel=1e-4)
    if method == "fgp":
        assert not got.converged and got.relative_gap > 0.5  # far from the constant, says so
    flat = np.full_like(image, image.mean())
    energy = rof_energy(got.image, image, 1e30)
    assert got.relative_gap >= (energy - rof_energy(flat, image, 1e30)) / energy


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
@pytest.mark.parametrize(
    "data",
    [
        np.ones((1, 1), np.float32),
        np.full((1, 40), 3.0, np.float32),
        np.zeros((30, 30), np.float32),
        np.full((4, 1, 9), -2.0, np.float32),
    ],
    ids=["1x1", "1x40-constant", "zeros", "4x1x9-constant"],
)
def test_constant_images_and_single_pixel_axes_are_their_own_solution(data, method):
    got = result_of(data, 0.1, method=method)
    np.testing.assert_array_equal(got.image, data)
    assert got.converged and got.relative_gap == 0


def test_single_pixel_axes_of_a_noisy_image():
    rng = np.random.default_rng(1)
    row = rng.random((1, 64)).astype(np.float32)
    got = result_of(row, 0.05, tolerance=1e-5, max_iterations=5000)
    assert got.converged
    # A (1, N) image is the 1D problem along x: compare with it solved as (N, 1).
    column = result_of(row.T.copy(), 0.05, tolerance=1e-5, max_iterations=5000)
    np.testing.assert_allclose(got.image, column.image.T, rtol=0, atol=1e-4)


@pytest.mark.parametrize("spacing", [(1e-200, 1.0), (1e-20, 1.0), (1e200, 1.0), (5e-5, 1.0)])
def test_extreme_spacing_is_refused_through_denoise(image, spacing):
    with pytest.raises(ParameterError, match=r"spacing\[0\]"):
        tv.denoise(image, 0.1, spacing=spacing, device="cpu")


@pytest.mark.parametrize("spacing", [(1e-4, 1e-4), (1e4, 1e4), (1e-4, 1e4)])
def test_extreme_accepted_spacing_stays_finite(image, spacing):
    for method in ("fgp", "chambolle"):
        got = result_of(image, 0.1, spacing=spacing, method=method)
        assert np.isfinite(got.image).all() and np.isfinite(got.relative_gap)


def test_small_images_in_strength_mode_explain_themselves():
    with pytest.raises(InvalidInputError, match=r"cannot estimate the noise level.*weight"):
        tv.denoise(np.random.default_rng(0).random((2, 50)).astype(np.float32), device="cpu")


# --- never a non-finite result reported as converged (7.2.2) -----------------------------------


def test_a_nan_gap_is_never_read_as_zero():
    gap = torch.tensor([0.0, 1.0, float("nan"), 1.0, -1e-9], dtype=torch.float64)
    primal = torch.tensor([0.0, 0.0, 1.0, float("nan"), 2.0], dtype=torch.float64)
    rel = relative_gaps(gap, primal)
    assert rel[0] == 0 and rel[1] == float("inf") and rel[4] == 0
    assert torch.isnan(rel[2]) and torch.isnan(rel[3])
    assert not bool((rel <= 1e-3).all())


def test_a_non_finite_solve_is_an_error_not_a_result(image, monkeypatch):
    def broken(f, context):
        yield from ()
        nan = torch.full_like(f, float("nan"))
        return SolveResult(nan, 10, float("nan"), False)

    monkeypatch.setattr(_job, "_solver", broken)
    with pytest.raises(NumericalError, match="NaN or infinite"):
        result_of(image, 0.1)


def test_a_non_finite_split_solve_is_an_error_not_a_result(monkeypatch):
    """The chunked (split) path refuses NaN like the whole-volume path."""
    from napari_gpuscope.compute.tv import _split

    real = _split.fgp_iterations

    def poisoned(f, *args, **kwargs):
        f.fill_(float("nan"))  # a solve that went wrong inside a round
        return real(f, *args, **kwargs)

    monkeypatch.setattr(_split, "fgp_iterations", poisoned)
    volume = (fluorescence_phantom_3d((30, 20, 20)) + 0.1).astype(np.float32)
    budget = 20 * 20 * _job._bytes_per_element("fgp", 3) * 14  # about 14 planes: split
    with pytest.raises(NumericalError, match="NaN or infinite"):
        result_of(volume, 0.1, memory_budget=budget)


def test_chunked_volumes_in_extreme_units_stay_equivariant():
    gt = fluorescence_phantom_3d((30, 20, 20))
    volume = (gt + 0.1 * np.random.default_rng(2).standard_normal(gt.shape)).astype(np.float32)
    budget = 20 * 20 * _job._bytes_per_element("fgp", 3) * 14
    reference = result_of(volume, 0.1, memory_budget=budget)
    scaled = result_of(volume.astype(np.float64) * 1e35, 0.1e35, memory_budget=budget)
    assert scaled.chunks == reference.chunks > 1
    np.testing.assert_allclose(scaled.image / 1e35, reference.image, rtol=0, atol=5e-7)
