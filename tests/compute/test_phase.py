"""Phase reconstruction: agreement with waveorder 3.0.5 (committed fixtures), the closed-form
inverse against the SVD path, cached optics, the tilt convention, and input checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.sample_data.phase import OPTICS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "phase"
AIR = OPTICS  # the samples' optics: air, NA 0.4 / 0.55, 0.45 µm light
WATER = {
    "wavelength": 0.532,
    "yx_pixel_size": 0.1,
    "z_pixel_size": 0.25,
    "na_illumination": 0.9,
    "na_detection": 1.2,
    "index_of_refraction": 1.3,
}


@pytest.fixture(scope="module")
def tf_ref():
    return dict(np.load(FIXTURES / "waveorder_tf.npz"))


@pytest.fixture(scope="module")
def recon_ref():
    return dict(np.load(FIXTURES / "waveorder_recon.npz"))


def pearson(a, b) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def _key(optics: dict, shape) -> phase.OpticsKey:
    return phase.OpticsKey(
        tuple(shape),
        optics["yx_pixel_size"],
        optics["wavelength"],
        optics["index_of_refraction"],
        optics["na_illumination"],
        optics["na_detection"],
        1e4,
        "cpu",
    )


@pytest.mark.parametrize(
    ("case", "optics", "shape"),
    [("air_flat", AIR, (32, 32)), ("air_tilt", AIR, (32, 32)), ("water_offset", WATER, (24, 40))],
)
def test_transfer_functions_equal_waveorder(tf_ref, case, optics, shape):
    z = torch.from_numpy(tf_ref[f"{case}_z"])
    zenith, azimuth = (float(v) for v in tf_ref[f"{case}_tilt"])
    tf = phase.transfer_functions(_key(optics, shape), z, zenith, azimuth)
    for part in ("absorption", "phase"):
        ref = tf_ref[f"{case}_{part}"]
        ours = getattr(tf, part).numpy()
        assert np.abs(ours - ref).max() <= 2e-6 * np.abs(ref).max(), part


def test_cached_optics_equal_fresh_and_z_change_rebuilds_only_defocus(tf_ref):
    key = _key(AIR, (32, 32))
    z = torch.from_numpy(tf_ref["air_tilt_z"])
    cache = phase.OpticsCache()
    cached = cache.transfer_functions(key, z, 0.2, 1.0)
    fresh = phase.transfer_functions(key, z, 0.2, 1.0)  # the differentiable path, uncached
    for part in ("absorption", "phase"):
        ours, ref = getattr(cached, part), getattr(fresh, part)
        assert float((ours - ref).abs().max()) <= 1e-6 * float(ref.abs().max()), part
    assert cache.transfer_functions(key, z, 0.2, 1.0) is cached  # same optics: nothing built
    assert cache.builds == {"grid": 1, "source": 1, "defocus": 1, "transfer": 1}
    cache.transfer_functions(key, z + 0.5, 0.2, 1.0)  # focus moved: angles untouched
    assert cache.builds == {"grid": 1, "source": 1, "defocus": 2, "transfer": 2}
    cache.transfer_functions(key, z, 0.3, 1.0)  # angle moved: defocus reused
    assert cache.builds == {"grid": 1, "source": 2, "defocus": 2, "transfer": 3}


@pytest.mark.parametrize("label", ["flat", "tilt"])
def test_zero_tilt_reconstruction_equals_waveorder(recon_ref, label):
    result = phase.reconstruct(
        recon_ref[f"stack_{label}"], **AIR, regularization=1e-3, tilt_mode="none", device="cpu"
    )
    np.testing.assert_allclose(result.phase, recon_ref[f"{label}_zero_tilt_phase"], atol=1e-5)
    np.testing.assert_allclose(
        result.absorption, recon_ref[f"{label}_zero_tilt_absorption"], atol=1e-5
    )


def test_tilt_convention_waveorder_azimuth_is_ours_plus_pi(recon_ref):
    zenith, azimuth = (float(v) for v in recon_ref["tilt"])
    ours = phase.reconstruct(
        recon_ref["stack_tilt"],
        **AIR,
        regularization=float(recon_ref["regularization"]),
        tilt_zenith=zenith,
        tilt_azimuth=azimuth,
        device="cpu",
    )
    np.testing.assert_allclose(ours.phase, recon_ref["tilt_plus_pi_phase"], atol=1e-5)
    assert phase.azimuth_to_waveorder(azimuth) == pytest.approx(azimuth + math.pi)
    assert phase.azimuth_from_waveorder(azimuth + math.pi) == pytest.approx(azimuth)
    truth = recon_ref["phase_truth"]
    # The true tilt in waveorder's own inverse is worse than ignoring the tilt; ours is better.
    assert pearson(ours.phase, truth) > pearson(recon_ref["tilt_zero_tilt_phase"], truth) + 0.05
    assert pearson(recon_ref["tilt_as_given_phase"], truth) < pearson(ours.phase, truth) - 0.2


def test_closed_form_inverse_equals_svd_path(tf_ref):
    a = torch.from_numpy(tf_ref["air_tilt_absorption"])
    p = torch.from_numpy(tf_ref["air_tilt_phase"])
    for reg in (1e-3, 1e-1):
        svd = phase.svd_filter(a, p, reg)
        closed = phase.tikhonov_filter(a, p, reg, "waveorder")
        assert (closed - svd).abs().max() <= 1e-5 * svd.abs().max()
    # The applied solve (normal equations) equals the filter applied to data spectra.
    data_hat = torch.fft.fft2(torch.randn(7, 32, 32, generator=torch.Generator().manual_seed(0)))
    system = phase.NormalEquations.build(data_hat, a, p)
    _absorption_hat, phase_hat = system.solve(1e-3)
    w = phase.tikhonov_filter(a, p, 1e-3, "consistent")
    expected = (w[1] * data_hat).sum(0)
    assert (phase_hat - expected).abs().max() <= 1e-5 * expected.abs().max()


def test_tilted_forward_model_is_inverted_at_the_true_tilt(recon_ref):
    truth = recon_ref["phase_truth"]
    params = phase.PhaseParams(**AIR)
    stack = phase.simulate_stack(
        truth, 0.03 * truth, params, 11, tilt_zenith=0.25, tilt_azimuth=2.5
    )
    right = phase.reconstruct(
        stack, params=params, tilt_zenith=0.25, tilt_azimuth=2.5, device="cpu"
    )
    flat = phase.reconstruct(stack, params=params, tilt_mode="none", device="cpu")
    mirrored = phase.reconstruct(
        stack, params=params, tilt_zenith=0.25, tilt_azimuth=2.5 + math.pi, device="cpu"
    )
    assert pearson(right.phase, truth) > 0.97
    assert pearson(right.phase, truth) > pearson(flat.phase, truth) + 0.03
    assert pearson(right.phase, truth) > pearson(mirrored.phase, truth) + 0.1


def test_z_order_and_focus_offset(recon_ref):
    stack = recon_ref["stack_flat"]
    down = phase.reconstruct(stack, **AIR, device="cpu")
    up = phase.reconstruct(stack[::-1].copy(), **AIR, z_order="ascending", device="cpu")
    np.testing.assert_allclose(up.phase, down.phase, atol=1e-5)
    truth = recon_ref["phase_truth"]
    wrong = phase.reconstruct(stack[::-1].copy(), **AIR, device="cpu")
    assert pearson(wrong.phase, truth) < 0  # the wrong order flips the phase


def test_params_round_trip_and_layers(recon_ref):
    p = phase.PhaseParams(**AIR, tilt_mode="tiles", tiles_y=3, optimizer="newton")
    assert phase.PhaseParams.from_json(p.to_json()) == p
    assert phase.PhaseParams.from_yaml(p.to_yaml()) == p
    result = phase.reconstruct(
        recon_ref["stack_tilt"],
        **AIR,
        regularization=1e-3,
        tilt_zenith=0.2,
        tilt_azimuth=1.0,
        device="cpu",
    )
    layers = result.layers("cells")
    assert [kind for _, _, kind in layers] == ["image", "image", "vectors"]
    assert layers[0][1]["name"] == "phase · cells [reg=0.001]"
    assert result.regularization_chosen is None and result.regularization == 1e-3
    assert layers[0][1]["metadata"]["intensity_unit"] == "rad"
    assert "tilt zenith 0.200 rad" in result.describe()
    assert result.summary()["tilt_map"]["zenith_rad"] == [[0.2]]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"na_detection": 1.1}, "na_detection.*refractive index"),
        ({"na_illumination": 1.05}, "na_illumination.*refractive index"),
        ({"yx_pixel_size": 0.0}, "yx_pixel_size"),
        ({"z_pixel_size": -1.0}, "z_pixel_size"),
        ({"wavelength": 0.0}, "wavelength"),
        ({"yx_pixel_size": 325.0}, "same unit"),
        ({"wavelength": 450.0}, "same unit"),
    ],
)
def test_bad_parameters_are_named(changes, match):
    with pytest.raises(ParameterError, match=match):
        phase.PhaseParams(**{**AIR, **changes})


def test_illumination_na_above_detection_is_warned_and_clamped(recon_ref):
    with pytest.warns(phase.PhaseWarning, match="0.9 x na_detection"):
        p = phase.PhaseParams(**{**AIR, "na_illumination": 0.6})
    assert p.effective_na_illumination == pytest.approx(0.495)
    result = phase.reconstruct(recon_ref["stack_flat"], params=p, device="cpu")
    assert np.isfinite(result.phase).all()


def test_bad_stacks_are_refused():
    good = np.ones((5, 16, 16), np.float32)
    with pytest.raises(InvalidInputError, match="at least 3 slices"):
        phase.reconstruct(good[:2], **AIR, device="cpu")
    with pytest.raises(InvalidInputError, match=r"2 dimensions; expected \(Z, Y, X\)"):
        phase.reconstruct(good[0], **AIR, device="cpu")
    bad = good.copy()
    bad[1, 2, 3] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        phase.reconstruct(bad, **AIR, device="cpu")
    with pytest.raises(InvalidInputError, match="non-positive mean"):
        phase.reconstruct(good - 1, **AIR, device="cpu")


# -- issue 17, item 11 -------------------------------------------------------------------------
@pytest.mark.parametrize("reg", [0.0, -1.0, math.nan, math.inf])
def test_the_solvers_regularization_is_validated_like_the_params(recon_ref, reg):
    """0 and -1 gave finite-looking phase, NaN and infinity an all-NaN phase."""
    params = phase.PhaseParams(**AIR)
    solver = phase.PhaseSolver(recon_ref["stack_tilt"], params, device="cpu")
    with pytest.raises(ParameterError, match=r"PhaseParams\.regularization"):
        solver.solve(reg)
    with pytest.raises(ParameterError, match=r"PhaseParams\.regularization"):
        params.replace(regularization=reg)  # the same rule


def test_a_focus_offset_beyond_the_stack_is_refused_naming_the_valid_range():
    stack = np.ones((5, 16, 16), np.float32)
    for run in (phase.reconstruct, phase.estimate_tilt):
        with pytest.raises(ParameterError, match=r"z_focus_offset=1000.*\[-4, 4\]"):
            run(stack, **AIR, z_focus_offset=1000, device="cpu")
    with pytest.raises(ParameterError, match=r"\[-4, 4\]"):
        phase.PhaseSolver(stack, phase.PhaseParams(**AIR, z_focus_offset=-4.5), device="cpu")
    # One-sided series stay possible: the focus at the first slice's side, 4 slices away.
    assert np.isfinite(phase.reconstruct(stack, **AIR, z_focus_offset=4, device="cpu").phase).all()


def test_a_stack_near_float32s_maximum_gives_the_unit_stacks_phase(recon_ref):
    """Its slice sums overflowed float32, the contrast collapsed to 0: phase 0 and absorption
    -0.5 without error. The contrast I / mean(I) does not depend on the scale, and power-of-two
    scaling is exact, so the result must equal the unit stack's bit for bit."""
    stack = recon_ref["stack_tilt"].astype(np.float32)
    unit = stack / stack.max()
    big = unit * np.float32(2.0**126)  # up to 8.5e37; a slice's sum is ~1e42
    with np.errstate(over="ignore"):
        assert np.isfinite(big).all() and not np.isfinite(big[0].sum(dtype=np.float32))
    params = phase.PhaseParams(**AIR, tilt_zenith=0.2, tilt_azimuth=1.0)
    reference = phase.reconstruct(unit, params=params, device="cpu")
    result = phase.reconstruct(big, params=params, device="cpu")
    assert np.abs(reference.phase).max() > 0.1
    np.testing.assert_array_equal(result.phase, reference.phase)
    np.testing.assert_array_equal(result.absorption, reference.absorption)


def test_solver_resolves_like_a_full_reconstruction(recon_ref):
    stack = recon_ref["stack_tilt"]
    params = phase.PhaseParams(**AIR, tilt_zenith=0.2, tilt_azimuth=1.0)
    solver = phase.PhaseSolver(stack, params, device="cpu")
    for reg in (1e-4, 3e-2):
        _, ph = solver.solve(reg)
        full = phase.reconstruct(stack, params=params, regularization=reg, device="cpu")
        np.testing.assert_allclose(ph, full.phase, atol=1e-6)
    assert solver.matches(params.replace(regularization=0.5))
    assert not solver.matches(params.replace(z_pixel_size=2.0))
    assert not solver.matches(params.replace(tilt_zenith=0.3))  # another manual tilt
    assert not solver.matches(params.replace(tilt_mode="none"))


def test_slices_in_chunks_equal_the_unchunked_result(recon_ref):
    stack = recon_ref["stack_tilt"]
    params = phase.PhaseParams(**AIR, tilt_zenith=0.2, tilt_azimuth=1.0)
    whole = phase.reconstruct(stack, params=params, device="cpu")
    # fresh optics: with the process's (now holding these), nothing is built and one chunk fits
    chunked = phase.reconstruct(
        stack,
        params=params,
        memory_budget=2_300_000,
        optics_cache=phase.OpticsCache(),
        device="cpu",
    )
    assert whole.chunks == 1
    assert chunked.chunks > 2
    np.testing.assert_allclose(chunked.phase, whole.phase, atol=1e-5)
    np.testing.assert_allclose(chunked.absorption, whole.absorption, atol=1e-5)
    from napari_gpuscope.compute.memory import DeviceMemoryError

    with pytest.raises(DeviceMemoryError):
        phase.reconstruct(
            stack,
            params=params,
            memory_budget=500_000,
            optics_cache=phase.OpticsCache(),
            device="cpu",
        )
