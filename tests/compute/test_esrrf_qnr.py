"""QnR metrics on analytic cases, and the parameter sweep job."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import ndimage

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.jobs import STOP
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack


@pytest.mark.parametrize("sigma", [1.5, 3.0])
def test_frc_resolution_matches_the_analytic_crossing(sigma):
    """Two noisy copies of Gaussian-filtered white noise: FRC(k) = S(k) / (S(k) + N) with
    S(k) = exp(-4 pi^2 sigma^2 k^2), so FRC = 1/7 at k = sqrt(ln(6 / n^2)) / (2 pi sigma)."""
    rng = np.random.default_rng(0)
    truth = ndimage.gaussian_filter(rng.normal(size=(256, 256)), sigma, mode="wrap")
    noise = 0.01
    a = truth + noise * rng.normal(size=truth.shape)
    b = truth + noise * rng.normal(size=truth.shape)
    expected = 2 * np.pi * sigma / np.sqrt(np.log(6 / noise**2))
    assert esrrf.frc_resolution(a, b, pixel_size=0.1) == pytest.approx(0.1 * expected, rel=0.05)


def test_frc_of_identical_images_has_no_crossing():
    image = np.random.default_rng(1).normal(size=(64, 64))
    assert np.isnan(esrrf.frc_resolution(image, image))
    with pytest.raises(ValueError, match="16 x 16"):
        esrrf.frc_resolution(image[:8, :8], image[:8, :8])


def test_error_map_of_a_consistent_pair_and_of_a_wrong_image():
    """A widefield image made from the SR image (Gaussian blur, block mean, gain, offset) is
    explained perfectly; an unrelated image is not."""
    m, blur = 4, 1.2 * 4
    rng = np.random.default_rng(2)
    sr = np.zeros((160, 160))
    sr[tuple(rng.integers(20, 140, (2, 60)))] = rng.uniform(1, 3, 60)
    blurred = ndimage.gaussian_filter(sr, blur)
    widefield = 50 * blurred.reshape(40, m, 40, m).mean(axis=(1, 3)) + 7
    result = esrrf.error_map(sr, widefield, m)
    assert result.rsp > 0.99
    assert result.sigma == pytest.approx(blur, rel=0.15)
    assert result.alpha == pytest.approx(50, rel=0.1) and result.beta == pytest.approx(7, abs=1)
    assert result.map.shape == sr.shape and float(result.map.max()) < 0.1 * widefield.max()
    wrong = rng.permutation(sr.ravel()).reshape(sr.shape)
    assert esrrf.resolution_scaled_pearson(wrong, widefield, m) < 0.5


def test_qnr_logistic_and_harmonic_mean():
    frc = np.array([[1.0, 2.0, np.nan], [3.0, 2.0, 1.0]])
    rsp = np.array([[0.9, 0.8, 0.9], [0.5, np.nan, 0.9]])
    normalised, qnr = esrrf.qnr_scores(frc, rsp)
    assert normalised[0, 0] == pytest.approx(0.925) and normalised[1, 0] == pytest.approx(0.075)
    assert normalised[0, 1] == pytest.approx(0.5)
    assert qnr[0, 0] == pytest.approx(2 * 0.9 * 0.925 / (0.9 + 0.925))
    assert np.isnan(qnr[0, 2]) and np.isnan(qnr[1, 1])
    _, flat = esrrf.qnr_scores(np.array([2.0, 2.0]), np.array([0.5, 0.5]))
    assert flat == pytest.approx([0.5, 0.5])


@pytest.fixture(scope="module")
def noisy_filaments():
    """Few photons, so that the even/odd FRC crosses 1/7 below the sampling pattern."""
    torch.set_num_threads(1)
    return blinking_filaments_stack(24, (32, 32), density=1.0, photons=60.0, background=60.0)


def test_sweep_streams_cells_agrees_with_the_metrics_and_stops_keeping_cells(noisy_filaments):
    stack, _truth = noisy_filaments
    params = esrrf.EsrrfParams(magnification=2, geometry="centred")
    job = esrrf.iter_parameter_sweep(stack, (0.75, 2.0), (1.0, 3.0), params=params, device="cpu")
    cells = []
    command = None
    while True:
        try:
            update = job.send(command)
        except StopIteration as done:
            result = done.value
            break
        command = None
        if "rsp" in update.outputs:
            rsp = update.outputs["rsp"]
            assert rsp.shape == (2, 2) and rsp.array().shape == (1, 1)
            cells.append(rsp.region)
            command = STOP if len(cells) == 3 else None
    assert len(cells) == 3 and result.stopped_early and result.cells_done == 3
    assert np.isnan(result.qnr[1, 1]) and "stopped early" in result.describe()
    # cell (sensitivity 1, radius 0.75) recomputed from the public functions
    setting = params.replace(radius=0.75, sensitivity=1.0)
    even = esrrf.esrrf(stack[0::2], params=setting, device="cpu")[0]
    odd = esrrf.esrrf(stack[1::2], params=setting, device="cpu")[0]
    whole = esrrf.esrrf(stack, params=setting, device="cpu")[0]
    cut = int(0.75 * 2) + 2
    inner = (slice(cut, -cut), slice(cut, -cut))
    frc = esrrf.frc_resolution(even[inner], odd[inner], 0.5, max_frequency=0.5)
    assert result.frc_resolution[0, 0] == pytest.approx(frc, rel=1e-3, nan_ok=True)
    widefield = stack.astype(np.float64).mean(0)
    assert result.rsp[0, 0] == pytest.approx(esrrf.error_map(whole, widefield, 2).rsp, abs=1e-3)


def test_sweep_best_setting_beats_its_worst_against_the_true_emitters(noisy_filaments):
    stack, truth = noisy_filaments
    params = esrrf.EsrrfParams(magnification=2, geometry="centred")
    result = esrrf.parameter_sweep(stack, (0.75, 2.0), (1.0, 4.0), params=params, device="cpu")
    assert result.best is not None and np.isfinite(result.qnr).sum() >= 3
    truth_image = np.zeros((64, 64))
    for y, x in truth:
        truth_image[round((y + 0.5) * 2 - 0.5), round((x + 0.5) * 2 - 0.5)] += 1
    truth_image = ndimage.gaussian_filter(truth_image, 0.6)

    def agreement(radius, sensitivity):
        image = esrrf.esrrf(
            stack, params=params.replace(radius=radius, sensitivity=sensitivity), device="cpu"
        )[0]
        return np.corrcoef(image[8:-8, 8:-8].ravel(), truth_image[8:-8, 8:-8].ravel())[0, 1]

    worst = np.unravel_index(np.nanargmin(result.qnr), result.qnr.shape)
    assert agreement(*result.best) > agreement(
        result.radii[worst[1]], result.sensitivities[worst[0]]
    )
    assert result.best_params().radius == result.best[0]


def test_sweep_refuses_bad_grids():
    stack = np.ones((6, 16, 16), np.float32)
    with pytest.raises(ParameterError, match="radii"):
        esrrf.parameter_sweep(stack, (), (1.0,), device="cpu")
    with pytest.raises(ParameterError, match="sensitivities"):
        esrrf.parameter_sweep(stack, (1.0,), (1.0, 1.0), device="cpu")
    with pytest.raises(InvalidInputError, match="4 to 6 frames"):
        esrrf.parameter_sweep(stack, (1.0,), (1.0,), frames=3, device="cpu")


@pytest.mark.parametrize(
    ("radii", "words"),
    [
        ((1.0,) * 5000, "holds 5000 values; a sweep takes at most 100"),
        ((1.0, 2.0) * 40, r"duplicates: 1 and 2 \(each value once\)"),
        (tuple(np.linspace(6, 7, 3000)), r"must be a finite number in \[0.5, 5\]"),
    ],
    ids=["5,000 radii", "duplicates", "out of range"],
)
def test_a_bad_grid_is_refused_in_a_short_message(radii, words):
    """Issue 26 item 14: 5,000 radii were echoed whole in a 25 kB error."""
    from napari_gpuscope.compute.esrrf import SweepParams
    from napari_gpuscope.compute.esrrf._sweep import iter_parameter_sweep

    with pytest.raises(ValueError, match=words) as refused:
        SweepParams(radii=radii)
    assert len(str(refused.value)) < 300
    stack = np.zeros((8, 16, 16), np.float32)
    with pytest.raises(ValueError, match="radii") as direct:
        iter_parameter_sweep(stack, radii=radii, device="cpu")
    assert len(str(direct.value)) < 300


def test_the_rsp_line_fit_is_numpys_least_squares():
    """The error map's intensity fit in closed form (numpy.linalg.lstsq's SVD took 40 % of a
    live measurement): the same alpha, beta and RMS residual as lstsq on the design [x, 1]."""
    from napari_gpuscope.compute.esrrf._qnr_device import _line_fit

    rng = np.random.default_rng(3)
    for scale, offset, noise in ((1.0, 0.0, 0.01), (3.5, -2.0, 0.5), (1e-3, 1e3, 1e-6)):
        x = rng.gamma(2.0, 1.0, (300, 200))
        target = scale * x + offset + rng.normal(0, noise, x.shape)
        (alpha, beta), *_ = np.linalg.lstsq(
            np.column_stack([x.ravel(), np.ones(x.size)]), target.ravel(), rcond=None
        )
        rse = np.sqrt(np.mean((target - (alpha * x + beta)) ** 2))
        got = _line_fit(x, target, target - target.mean())
        np.testing.assert_allclose(got, (alpha, beta, rse), rtol=1e-9, atol=1e-12)
    flat = np.full((20, 20), 2.0)  # nothing to fit: the mean, and the target's own spread
    target = rng.normal(5.0, 1.0, flat.shape)
    alpha, beta, rse = _line_fit(flat, target, target - target.mean())
    assert alpha == 0 and beta == pytest.approx(target.mean())
    assert rse == pytest.approx(target.std())


@pytest.mark.parametrize("magnification", [2, 4])
def test_the_device_error_map_is_the_hosts(magnification):
    """A GPU session's error map (blurs and fits in torch, SciPy-exact blurs), run here on the
    CPU's torch against the host's NumPy/SciPy one: the same sigma, RSP, RSE, line and map."""
    from napari_gpuscope.compute.esrrf._qnr import _upsampled
    from napari_gpuscope.compute.esrrf._qnr_device import error_map_on_device

    rng = np.random.default_rng(magnification)
    side = 96
    truth = ndimage.gaussian_filter(rng.random((side * magnification,) * 2), 1.5 * magnification)
    wide = truth.reshape(side, magnification, side, magnification).mean(axis=(1, 3))
    wide = wide + rng.normal(0, 0.01 * wide.std(), wide.shape)
    sr = np.clip(truth + rng.normal(0, 0.2 * truth.std(), truth.shape), 0, None)
    host = esrrf.error_map(sr, wide, magnification)
    reference = _upsampled(wide, sr.shape, magnification)
    cut = 3 * magnification
    inner = (slice(cut, sr.shape[0] - cut), slice(cut, sr.shape[1] - cut))
    rsp, rse, sigma, alpha, beta, errors = error_map_on_device(
        sr, reference, inner, magnification, torch.device("cpu")
    )
    assert 0.3 < host.sigma < 4 * magnification / 2.355 - 0.1  # an inner optimum, not a bound
    np.testing.assert_allclose(sigma, host.sigma, rtol=1e-6)
    np.testing.assert_allclose(
        (rsp, rse, alpha, beta), (host.rsp, host.rse, host.alpha, host.beta), rtol=1e-7
    )
    np.testing.assert_allclose(errors, host.map, rtol=1e-5, atol=1e-6 * host.map.max())
    assert esrrf.error_map(sr, wide, magnification, device="cpu").rsp == host.rsp  # host path


def test_the_device_halves_correlation_is_the_hosts():
    """The split halves' blurred correlation on the device (run on the CPU's torch) against
    SciPy's blur and NumPy's correlation."""
    from napari_gpuscope.compute.esrrf._qnr_device import blurred_correlation

    rng = np.random.default_rng(7)
    structure = ndimage.gaussian_filter(rng.random((200, 200)), 4)
    first, second = (structure + rng.normal(0, 0.05, structure.shape) for _ in range(2))
    inner = (slice(6, 194), slice(6, 194))
    for sigma in (0.0, 0.8, 2.5):
        a, b = (ndimage.gaussian_filter(s, sigma)[inner] for s in (first, second))
        expected = np.corrcoef(a.ravel(), b.ravel())[0, 1]
        got = blurred_correlation(first, second, sigma, inner, torch.device("cpu"))
        assert got == pytest.approx(expected, rel=1e-10)
    flat = np.ones_like(first)
    assert np.isnan(blurred_correlation(flat, second, 1.0, inner, torch.device("cpu")))
