"""Noise models against independent oracles: known simulated noise, the Poisson law, scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from napari_gpuscope.compute.noise import (
    PoissonGaussian,
    anscombe_forward,
    anscombe_inverse,
    estimate_noise_sigma,
    estimate_poisson_gaussian,
)
from napari_gpuscope.sample_data import (
    DEFAULT_CAMERA,
    CameraModel,
    Illumination,
    fluorescence_phantom_2d,
    fluorescence_phantom_3d,
    simulate_camera,
)


@pytest.fixture(scope="module")
def phantom_2d() -> np.ndarray:
    return fluorescence_phantom_2d()


@pytest.fixture(scope="module")
def phantom_3d() -> np.ndarray:
    return fluorescence_phantom_3d((16, 128, 128))


def _flat_field(shape: tuple[int, int] = (512, 512)) -> np.ndarray:
    """Vignetted illumination (30 %-100 %) as seen in a flat-field calibration image."""
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]] / np.array(shape).reshape(2, 1, 1)
    return (0.3 + 0.7 * np.exp(-((yy - 0.5) ** 2 + (xx - 0.5) ** 2) / (2 * 0.3**2))).astype(
        np.float32
    )


# --- estimate_noise_sigma -------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.02, 0.05, 0.1, 0.2])
def test_sigma_estimate_2d_phantom(phantom_2d: np.ndarray, sigma: float) -> None:
    rng = np.random.default_rng(1)
    noisy = phantom_2d + sigma * rng.standard_normal(phantom_2d.shape).astype(np.float32)
    assert estimate_noise_sigma(noisy) == pytest.approx(sigma, rel=0.07)


@pytest.mark.parametrize("sigma", [0.02, 0.1])
def test_sigma_estimate_3d_phantom(phantom_3d: np.ndarray, sigma: float) -> None:
    rng = np.random.default_rng(2)
    noisy = phantom_3d + sigma * rng.standard_normal(phantom_3d.shape).astype(np.float32)
    assert estimate_noise_sigma(noisy) == pytest.approx(sigma, rel=0.07)
    # tensors give the same answer as arrays
    assert estimate_noise_sigma(torch.from_numpy(noisy)) == pytest.approx(
        estimate_noise_sigma(noisy), rel=1e-6
    )


def test_sigma_estimate_is_zero_on_smooth_ramp() -> None:
    yy, xx = np.mgrid[0:128, 0:96].astype(np.float64)
    ramp = 3.0 + 0.01 * yy - 0.02 * xx + 1e-4 * xx * yy
    assert estimate_noise_sigma(ramp) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("value", [5.0, 0.1, 1e-20, 3.3e4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigma_estimate_is_exactly_zero_on_a_constant_image(value, dtype) -> None:
    """A flat image has no noise: exactly 0, in any rounding order (a tiny positive estimate
    would let a noise-free image pass as noisy and set a meaningless TV weight)."""
    flat = np.full((4, 33, 47), value, dtype)
    assert estimate_noise_sigma(flat) == 0.0
    assert estimate_noise_sigma(torch.from_numpy(flat)) == 0.0


def test_sigma_estimate_matches_the_immerkaer_convolution() -> None:
    """The separable residual equals scipy's 2-D correlation with Immerkaer's kernel / 6."""
    from scipy.ndimage import correlate

    from napari_gpuscope.compute.noise import _planes, _residual

    image = np.random.default_rng(3).normal(2.0, 0.5, (3, 40, 50))
    kernel = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], float)[None] / 6
    expected = correlate(image, kernel, mode="constant")[:, 1:-1, 1:-1]
    # _planes reads float32: agreement to float32 rounding of values ~1.
    np.testing.assert_allclose(_residual(_planes(image)).numpy(), expected, rtol=0, atol=2e-6)


def test_sigma_estimate_scales_with_image_and_ignores_integer_dtype() -> None:
    rng = np.random.default_rng(3)
    noisy = 1000 + 20 * rng.standard_normal((200, 200))
    as_uint16 = np.rint(noisy).astype(np.uint16)
    # rounding adds 1/12 of variance: sqrt(400 + 1/12) is still 20 to 0.01 %
    assert estimate_noise_sigma(as_uint16) == pytest.approx(20.0, rel=0.05)
    # The estimate reads float32 planes: values ~3000 carry 1e-4 of rounding, 1e-6 of the
    # median residual, whichever order the second differences are summed in.
    assert estimate_noise_sigma(noisy * 3) == pytest.approx(
        3 * estimate_noise_sigma(noisy), rel=1e-5
    )


def test_sigma_estimate_subsamples_huge_input_deterministically() -> None:
    rng = np.random.default_rng(4)
    volume = (7.0 * rng.standard_normal((80, 256, 256))).astype(np.float32)  # > 4 M samples
    first = estimate_noise_sigma(volume)
    assert first == estimate_noise_sigma(volume)
    assert first == pytest.approx(7.0, rel=0.03)


def test_sigma_estimate_reads_lazy_arrays_like_numpy() -> None:
    da = pytest.importorskip("dask.array")
    volume = (3.0 * np.random.default_rng(6).standard_normal((6, 64, 64))).astype(np.float32)
    lazy = da.from_array(volume, chunks=(1, 64, 64))
    assert estimate_noise_sigma(lazy) == pytest.approx(estimate_noise_sigma(volume), rel=1e-6)


def test_sigma_estimate_rejects_complex_input() -> None:
    with pytest.raises(TypeError, match="real"):
        estimate_noise_sigma(np.ones((16, 16), dtype=np.complex64))


def test_sigma_estimate_does_not_modify_input() -> None:
    image = np.random.default_rng(5).standard_normal((32, 32)).astype(np.float32)
    before = image.copy()
    estimate_noise_sigma(image)
    np.testing.assert_array_equal(image, before)


@pytest.mark.parametrize("bad", [np.zeros(10), np.zeros((2, 50))])
def test_sigma_estimate_rejects_too_small_input(bad: np.ndarray) -> None:
    with pytest.raises(ValueError):
        estimate_noise_sigma(bad)


# --- generalized Anscombe transform ----------------------------------------------------------


@pytest.mark.parametrize("lam", [5.0, 20.0, 100.0])
def test_anscombe_stabilises_poisson_variance(lam: float) -> None:
    rng = np.random.default_rng(6)
    counts = torch.from_numpy(rng.poisson(lam, 200_000).astype(np.float64))
    stabilised = anscombe_forward(counts, PoissonGaussian(gain=1.0))
    assert float(stabilised.std()) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("lam", [5.0, 30.0, 200.0])
def test_generalized_anscombe_stabilises_poisson_gaussian_variance(lam: float) -> None:
    camera = PoissonGaussian(gain=2.5, offset=100.0, read_noise=4.0)
    rng = np.random.default_rng(7)
    n = 200_000
    adu = camera.gain * rng.poisson(lam, n) + camera.offset + camera.read_noise * rng.normal(size=n)
    stabilised = anscombe_forward(torch.from_numpy(adu), camera)
    assert float(stabilised.std()) == pytest.approx(1.0, abs=0.03)


def _expected_anscombe(lam: float) -> float:
    """E[2 sqrt(k + 3/8)] for k ~ Poisson(lam), summed exactly over scipy's pmf."""
    k = np.arange(0, int(lam + 12 * np.sqrt(lam) + 30))
    return float(np.sum(stats.poisson.pmf(k, lam) * 2.0 * np.sqrt(k + 0.375)))


@pytest.mark.parametrize("lam", [2.0, 5.0, 20.0, 100.0])
def test_exact_inverse_is_unbiased_and_algebraic_is_not(lam: float) -> None:
    unit = PoissonGaussian(gain=1.0)
    expectation = torch.tensor([_expected_anscombe(lam)], dtype=torch.float64)
    exact = float(anscombe_inverse(expectation, unit))
    algebraic = float(anscombe_inverse(expectation, unit, exact=False))
    assert exact == pytest.approx(lam, rel=0.02)
    assert abs(algebraic - lam) > abs(exact - lam)
    if lam <= 5:  # Makitalo & Foi: the algebraic inverse is biased low at low counts
        assert algebraic < 0.96 * lam


@pytest.mark.parametrize("lam", [2.0, 5.0, 20.0, 100.0])
def test_exact_inverse_unbiased_monte_carlo_poisson_gaussian(lam: float) -> None:
    camera = PoissonGaussian(gain=2.0, offset=100.0, read_noise=3.0)
    rng = np.random.default_rng(8)
    n = 500_000
    adu = camera.gain * rng.poisson(lam, n) + camera.offset + camera.read_noise * rng.normal(size=n)
    mean_vst = anscombe_forward(torch.from_numpy(adu), camera).mean().reshape(1)
    truth = camera.gain * lam + camera.offset
    exact = float(anscombe_inverse(mean_vst, camera))
    algebraic = float(anscombe_inverse(mean_vst, camera, exact=False))
    assert (exact - camera.offset) == pytest.approx(truth - camera.offset, rel=0.02)
    assert abs(algebraic - truth) > abs(exact - truth)


def test_inverse_inverts_forward_at_high_counts_and_is_monotone() -> None:
    camera = PoissonGaussian(gain=1.5, offset=50.0, read_noise=2.0)
    adu = torch.linspace(500.0, 60_000.0, 200, dtype=torch.float64)
    roundtrip = anscombe_inverse(anscombe_forward(adu, camera), camera, exact=False)
    torch.testing.assert_close(roundtrip, adu)
    d = torch.linspace(0.0, 40.0, 4001, dtype=torch.float64)
    inverse = anscombe_inverse(d, camera)
    assert bool((inverse.diff() >= 0).all())
    assert float(inverse.min()) == pytest.approx(camera.offset)


def test_transforms_do_not_modify_input_and_accept_integer_tensors() -> None:
    camera = PoissonGaussian(gain=2.0, offset=100.0)
    adu = torch.tensor([[100, 140], [220, 1000]], dtype=torch.int32)
    before = adu.clone()
    forward = anscombe_forward(adu, camera)
    assert forward.is_floating_point()
    anscombe_inverse(forward, camera)
    torch.testing.assert_close(adu, before)


def test_forward_continues_below_zero_photons_along_its_tangent() -> None:
    # Below zero photons only read noise is left (constant variance read_noise^2): the tangent
    # of the square root there (slope 1 / sqrt(read_noise^2 + 3/8 gain^2) per ADU) stabilises
    # it, where the classic clip at the root's zero turned read-noise outliers into deep dips.
    camera = PoissonGaussian(gain=2.0, offset=100.0, read_noise=3.0)
    adu = torch.linspace(60.0, 130.0, 7001, dtype=torch.float64)
    z = anscombe_forward(adu, camera)
    steps = torch.diff(z)
    assert bool((steps > 0).all())  # strictly increasing: no clipped plateau
    slope = steps / torch.diff(adu)
    assert float((slope[1:] - slope[:-1]).abs().max()) < 1e-3  # continuous derivative
    below = adu[1:] < camera.offset
    expected_slope = 1.0 / math.sqrt(camera.read_noise**2 + 0.375 * camera.gain**2)
    torch.testing.assert_close(slope[below], torch.full_like(slope[below], expected_slope))
    # Pure read noise (zero photons) comes out with about unit variance.
    rng = np.random.default_rng(3)
    dark = camera.offset + camera.read_noise * rng.standard_normal(200_000)
    spread = float(anscombe_forward(torch.from_numpy(dark), camera).std())
    assert 0.85 < spread < 1.0


def test_estimated_model_transforms_like_the_true_one() -> None:
    # Only gain and beta = read_noise^2 - gain*offset enter the GAT and its inverses.
    true = PoissonGaussian(gain=2.0, offset=100.0, read_noise=3.0)
    folded = PoissonGaussian(
        gain=2.0, offset=-true.beta / 2.0, read_noise=0.0, floor_variance=true.read_noise**2
    )
    adu = torch.linspace(80.0, 3000.0, 300, dtype=torch.float64)
    torch.testing.assert_close(anscombe_forward(adu, folded), anscombe_forward(adu, true))
    # Without the floor, the folded model's square root runs on to variance 0 (2 ADU lower).
    bare = PoissonGaussian(gain=2.0, offset=-true.beta / 2.0, read_noise=0.0)
    above = adu >= true.offset
    torch.testing.assert_close(
        anscombe_forward(adu, bare)[above], anscombe_forward(adu, true)[above]
    )
    d = anscombe_forward(adu, true)
    above_floor = adu > true.offset + 10  # the zero-photon clip differs by read_noise^2/gain
    torch.testing.assert_close(
        anscombe_inverse(d, folded)[above_floor], anscombe_inverse(d, true)[above_floor]
    )


@pytest.mark.parametrize(
    "kwargs", [{"gain": 0.0}, {"gain": -1.0}, {"gain": 1.0, "read_noise": -1.0}]
)
def test_poisson_gaussian_validates(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PoissonGaussian(**kwargs)


# --- estimate_poisson_gaussian ---------------------------------------------------------------

CAMERAS = [
    (DEFAULT_CAMERA, Illumination()),  # 30 photons peak, gain 2, offset 100, read noise 3
    (CameraModel(gain=4.0, offset=100, read_noise=8), Illumination(300, 10)),
    (CameraModel(gain=0.5, offset=200, read_noise=1.5), Illumination(100, 5)),
]


def _unit_noise_check(
    phantom: np.ndarray, camera: CameraModel, light: Illumination, fitted: CameraModel
) -> None:
    """Two independent exposures: std(GAT(a) - GAT(b)) / sqrt(2) is the GAT's noise std."""
    a = torch.from_numpy(simulate_camera(phantom, camera, light, seed=11).astype(np.float64))
    b = torch.from_numpy(simulate_camera(phantom, camera, light, seed=12).astype(np.float64))
    difference = anscombe_forward(a, fitted) - anscombe_forward(b, fitted)
    assert float(difference.std()) / np.sqrt(2) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize(("camera", "light"), CAMERAS, ids=["default", "bright", "low-gain"])
def test_poisson_gaussian_fit_on_simulated_camera(phantom_2d: np.ndarray, camera, light) -> None:
    fitted = estimate_poisson_gaussian(simulate_camera(phantom_2d, camera, light))
    assert fitted.gain == pytest.approx(camera.gain, rel=0.10)
    assert fitted.read_noise == 0.0
    _unit_noise_check(phantom_2d, camera, light, fitted)


def test_poisson_gaussian_fit_on_3d_volume(phantom_3d: np.ndarray) -> None:
    camera, light = DEFAULT_CAMERA, Illumination()
    fitted = estimate_poisson_gaussian(simulate_camera(phantom_3d, camera, light))
    assert fitted.gain == pytest.approx(camera.gain, rel=0.10)
    _unit_noise_check(phantom_3d, camera, light, fitted)


@pytest.mark.parametrize(
    ("camera", "light"),
    [
        (CameraModel(gain=2.0, offset=100, read_noise=3), Illumination(200, 0)),
        (CameraModel(gain=0.8, offset=300, read_noise=2), Illumination(1000, 0)),
    ],
    ids=["200-photons", "1000-photons"],
)
def test_poisson_gaussian_fit_on_flat_field(camera: CameraModel, light: Illumination) -> None:
    flat = _flat_field()
    fitted = estimate_poisson_gaussian(simulate_camera(flat, camera, light))
    assert fitted.gain == pytest.approx(camera.gain, rel=0.10)
    # beta = read_noise^2 - gain*offset (+1/12 from rounding to integer ADU)
    true_beta = camera.read_noise**2 - camera.gain * camera.offset + 1 / 12
    assert fitted.beta == pytest.approx(true_beta, abs=0.15 * abs(true_beta))
    _unit_noise_check(flat, camera, light, fitted)


def test_poisson_gaussian_fit_rejects_gaussian_noise() -> None:
    rng = np.random.default_rng(9)
    ramp = np.linspace(100, 1000, 256)[None, :] * np.ones((256, 1))
    with pytest.raises(ValueError, match="Gaussian"):
        estimate_poisson_gaussian(ramp + 5.0 * rng.standard_normal(ramp.shape))


def test_poisson_gaussian_fit_rejects_uniform_frame() -> None:
    rng = np.random.default_rng(10)
    with pytest.raises(ValueError, match="range"):
        estimate_poisson_gaussian(2.0 * rng.poisson(100.0, (256, 256)) + 100.0)


def test_poisson_gaussian_fit_rejects_tiny_image() -> None:
    with pytest.raises(ValueError, match="too small"):
        estimate_poisson_gaussian(np.ones((20, 20)))


# --- TV Poisson mode (needs compute.tv) ------------------------------------------------------


@pytest.mark.parametrize("lam", [2.0, 5.0, 20.0, 100.0])
def test_tv_poisson_mode_is_unbiased_on_constant_images(lam: float) -> None:
    """Poisson mode: the inverse is unbiased on constant images across count levels."""
    tv = pytest.importorskip("napari_gpuscope.compute.tv")
    camera = PoissonGaussian(gain=2.0, offset=100.0, read_noise=3.0)
    rng = np.random.default_rng(13)
    shape = (96, 96)
    adu = camera.gain * rng.poisson(lam, shape) + camera.offset
    adu = adu + camera.read_noise * rng.standard_normal(shape)
    result = tv.denoise(
        adu,
        1.0,
        noise_model="poisson",
        gain=camera.gain,
        offset=camera.offset,
        read_noise=camera.read_noise,
        device="cpu",
    )
    truth = camera.gain * lam + camera.offset
    assert float(np.mean(result)) - camera.offset == pytest.approx(truth - camera.offset, rel=0.03)
