"""Tilt estimation (global and per tile, NAdam and damped Newton, frozen parameters, warm start,
stop & keep), blended tile reconstruction, and the TV option. Small sizes: CPU-fast."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.ndimage import gaussian_filter

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.job_control import StopToken
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.sample_data.phase import OPTICS

AIR = OPTICS  # the samples' optics: air, NA 0.4 / 0.55, 0.45 µm light
N_Z = 11


def cells(shape, seed):
    """Random smooth 'cells' (0.3-0.6 rad ellipsoids) and a little absorption."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]].astype(float)
    ph = np.zeros(shape)
    for _ in range(max(4, shape[0] * shape[1] // 600)):
        cy, cx = rng.uniform(4, shape[0] - 4), rng.uniform(4, shape[1] - 4)
        a, b, t = rng.uniform(4, 8), rng.uniform(3, 6), rng.uniform(0, np.pi)
        u = ((xx - cx) * np.cos(t) + (yy - cy) * np.sin(t)) / a
        v = (-(xx - cx) * np.sin(t) + (yy - cy) * np.cos(t)) / b
        ph += rng.uniform(0.3, 0.6) * np.sqrt(np.clip(1 - u * u - v * v, 0, None))
    ph = gaussian_filter(ph, 1.0).astype(np.float32)
    return ph, (0.03 * ph).astype(np.float32)


def noisy(stack, seed, photons=3000.0):
    rng = np.random.default_rng(seed)
    return (rng.poisson(photons * stack) / photons).astype(np.float32)


def angle_error(a, b):
    d = (np.asarray(a) - np.asarray(b)) % (2 * math.pi)
    return np.minimum(d, 2 * math.pi - d)


def pearson(a, b) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


@pytest.fixture(scope="module")
def global_stack():
    ph, ab = cells((64, 64), 0)
    params = phase.PhaseParams(**AIR)
    stack = phase.simulate_stack(ph, ab, params, N_Z, tilt_zenith=0.2, tilt_azimuth=1.0)
    return noisy(stack, 1), ph


@pytest.mark.parametrize(
    ("optimizer", "iterations", "loss", "tolerance"),
    [
        ("nadam", 30, "residual", 0.03),
        ("newton", 8, "residual", 0.03),
        # waveorder's criterion over-estimates the zenith (0.23 for 0.2 on this field).
        ("newton", 8, "midband", 0.05),
    ],
)
def test_global_tilt_is_recovered(global_stack, optimizer, iterations, loss, tolerance):
    stack, truth = global_stack
    result = phase.estimate_tilt(
        stack,
        **AIR,
        tilt_mode="global",
        optimizer=optimizer,
        iterations=iterations,
        tilt_loss=loss,
        device="cpu",
    )
    tilt = result.tilt_map
    assert result.is_global
    assert result.iterations <= iterations  # the estimate stops by itself when converged
    assert abs(tilt.zenith.item() - 0.2) < tolerance
    assert angle_error(tilt.azimuth.item(), 1.0) < 0.1
    assert result.loss_history[-1] < result.loss_history[0]
    recon = phase.reconstruct(stack, **AIR, tilt_map=tilt, device="cpu")
    flat = phase.reconstruct(stack, **AIR, tilt_mode="none", device="cpu")
    assert pearson(recon.phase, truth) > pearson(flat.phase, truth) + 0.02


def test_frozen_parameters_warm_start_and_stop(global_stack):
    stack, _ = global_stack
    frozen = phase.estimate_tilt(
        stack,
        **AIR,
        tilt_mode="global",
        tilt_azimuth=1.0,
        lr_azimuth=0.0,
        iterations=5,
        device="cpu",
    )
    assert frozen.tilt_map.azimuth.item() == pytest.approx(1.0, abs=1e-6)
    assert frozen.tilt_map.zenith.item() != pytest.approx(0.05)
    # A warm start begins where a previous estimate ended (its loss is the first loss).
    cold = phase.estimate_tilt(
        stack, **AIR, tilt_mode="global", optimizer="newton", iterations=8, device="cpu"
    )
    warm = phase.estimate_tilt(
        stack,
        **AIR,
        tilt_mode="global",
        optimizer="newton",
        iterations=2,
        init=cold.tilt_map,
        device="cpu",
    )
    assert warm.loss_history[0] == pytest.approx(cold.tilt_map.loss.item(), rel=1e-5)
    assert abs(warm.tilt_map.zenith.item() - cold.tilt_map.zenith.item()) < 0.005
    # Stop & keep returns the best values so far, marked as stopped.
    stop = StopToken()
    seen = []

    def on_progress(update):
        seen.append(update)
        if len(seen) == 2:
            stop.stop()

    kept = run_job(
        phase.iter_estimate_tilt(stack, **AIR, tilt_mode="global", iterations=50, device="cpu"),
        on_progress=on_progress,
        stop=stop,
    )
    assert kept.stopped_early
    assert not kept.converged
    assert kept.iterations <= 3
    assert seen[0].indeterminate
    assert "tilt objective" in seen[0].metrics
    assert seen[0].outputs["tilt"].kind == "vectors"
    assert seen[0].outputs["tilt"].array().shape == (1, 2, 2)


def test_tilt_gradient_across_tiles_is_recovered():
    """Three 64 px fields side by side with zenith 0.1, 0.2, 0.3 (azimuth 0.5): a meniscus."""
    zeniths = (0.1, 0.2, 0.3)
    params = phase.PhaseParams(**AIR)
    ph, ab = cells((64, 192), 3)
    parts = [
        phase.simulate_stack(ph, ab, params, N_Z, tilt_zenith=z, tilt_azimuth=0.5) for z in zeniths
    ]
    stack = np.concatenate([p[:, :, 64 * i : 64 * (i + 1)] for i, p in enumerate(parts)], axis=2)
    stack = noisy(stack, 4)
    updates = []
    result = run_job(
        phase.iter_reconstruct(
            stack,
            **AIR,
            tilt_mode="tiles",
            tiles_y=1,
            tiles_x=3,
            tile_overlap=0.0,
            optimizer="newton",
            iterations=8,
            device="cpu",
        ),
        on_progress=updates.append,
    )
    tilt = result.tilt_map
    assert tilt.grid.tiles == (1, 3)
    assert np.all(np.abs(tilt.zenith.ravel() - zeniths) < 0.04), tilt.zenith
    assert np.all(angle_error(tilt.azimuth.ravel(), 0.5) < 0.15), tilt.azimuth
    assert np.all(np.diff(tilt.zenith.ravel()) > 0)
    assert any("tilt objective" in u.metrics for u in updates)
    assert result.layers("bf")[2][0].shape == (3, 2, 2)
    assert "1x3 tilt map" in result.describe()


def test_blended_tiles_have_no_seams():
    params = phase.PhaseParams(**AIR)
    ph, ab = cells((96, 96), 5)
    stack = phase.simulate_stack(ph, ab, params, N_Z, tilt_zenith=0.15, tilt_azimuth=2.0)
    grid = phase.TileGrid.covering((96, 96), (3, 3), overlap=0.5)
    weights = phase.blend_weights(grid).numpy()
    assert weights.min() > 0
    assert weights.max() > 0.99
    tiled = phase.reconstruct(
        stack, params=params, tilt_map=phase.TiltMap.uniform(grid, 0.15, 2.0), device="cpu"
    )
    whole = phase.reconstruct(
        stack, params=params, tilt_zenith=0.15, tilt_azimuth=2.0, device="cpu"
    )
    assert pearson(tiled.phase, whole.phase) > 0.9  # 48 px tiles lose the lowest frequencies
    # Seams would show as jumps at tile edges: the largest step there is no larger than inside.
    steps = np.abs(np.diff(tiled.phase - whole.phase, axis=1))
    edges = sorted({s + grid.size[1] for s in grid.starts_x[:-1]} | set(grid.starts_x[1:]))
    at_edges = steps[:, [e - 1 for e in edges]].max()
    assert at_edges <= 1.5 * np.percentile(steps, 99)


def test_radial_init_and_canonical_tilt():
    grid = phase.TileGrid.covering((64, 64), (3, 3), overlap=0.25)
    zen, azi = phase.radial_zenith_init(grid.centers(), (31.5, 31.5), 45.0)
    assert zen[4] == pytest.approx(0.05)
    assert zen[0] > 0.1
    assert azi[5] == pytest.approx(0.0)
    assert azi[7] == pytest.approx(math.pi / 2)
    z, a = phase.canonical_tilt([-0.2, 0.1], [1.0, -1.0])
    np.testing.assert_allclose(z, [0.2, 0.1])
    np.testing.assert_allclose(a, [1.0 + math.pi, 2 * math.pi - 1.0])


def test_tv_regularised_phase_is_smoother_and_faithful():
    params = phase.PhaseParams(**AIR)
    ph, ab = cells((64, 64), 6)
    stack = noisy(phase.simulate_stack(ph, ab, params, N_Z), 7, photons=500.0)
    tik = phase.reconstruct(stack, params=params, regularization=1e-4, device="cpu")
    tv = phase.reconstruct(
        stack,
        params=params,
        regularization=1e-4,
        regularizer="tv",
        tv_strength=2e-3,
        device="cpu",
    )

    def total_variation(x):
        return np.abs(np.diff(x, axis=0)).sum() + np.abs(np.diff(x, axis=1)).sum()

    assert total_variation(tv.phase) < 0.8 * total_variation(tik.phase)
    assert pearson(tv.phase, ph) > pearson(tik.phase, ph)
    assert tv.params.label.startswith("TV=")


def test_tiles_in_groups_give_each_tile_the_same_estimate(global_stack):
    """A grid too large for the device runs in groups of tiles; tiles are independent, so each
    tile's estimate is the one of the single batch."""
    from napari_gpuscope.compute.phase._tilt import bytes_per_tile

    stack, _ = global_stack
    options = {**AIR, "optimizer": "newton", "iterations": 4}
    params = phase.PhaseParams(**options)
    together = phase.estimate_tilt(stack, **options, tiles=(2, 2), device="cpu")
    budget = int(1.5 * bytes_per_tile(params, (38, 38), N_Z))  # one tile at a time
    updates = []
    grouped = run_job(
        phase.iter_estimate_tilt(
            stack, **options, tiles=(2, 2), memory_budget=budget, device="cpu"
        ),
        on_progress=updates.append,
    )
    assert any("tiles 4-4 of 4" in u.message for u in updates)
    np.testing.assert_allclose(grouped.tilt_map.zenith, together.tilt_map.zenith, atol=1e-5)
    np.testing.assert_allclose(grouped.tilt_map.azimuth, together.tilt_map.azimuth, atol=1e-5)


def test_focus_offset_is_estimated_with_the_tilt():
    """lr_focus > 0 frees the focus offset (in slices) beside zenith and azimuth."""
    params = phase.PhaseParams(**AIR)
    ph, ab = cells((64, 64), 0)
    defocused = params.replace(z_focus_offset=0.6)
    stack = phase.simulate_stack(ph, ab, defocused, N_Z, tilt_zenith=0.2, tilt_azimuth=1.0)
    result = phase.estimate_tilt(
        noisy(stack, 1),
        params=params,
        tilt_mode="global",
        optimizer="newton",
        iterations=8,
        lr_focus=0.1,
        device="cpu",
    )
    assert abs(result.tilt_map.focus.item() - 0.6) < 0.05
    assert abs(result.tilt_map.zenith.item() - 0.2) < 0.03


def test_tilt_arrows_stay_in_their_tiles_and_proportional():
    """Issue 18: an outlier tile's arrow ran past the image edge."""
    from napari_gpuscope.compute.phase import TileGrid, TiltMap

    grid = TileGrid.covering((120, 180), (3, 3), overlap=0.25)
    rng = np.random.default_rng(4)
    zenith = rng.uniform(0.0, 0.3, (3, 3))
    zenith[1, 2] = 0.79  # a tile ~45 degrees off
    azimuth = rng.uniform(0.0, 2 * np.pi, (3, 3))
    tilt = TiltMap(grid, zenith, azimuth, np.zeros((3, 3)), np.full((3, 3), np.nan))
    arrows = tilt.vectors()
    tips = arrows[:, 0] + arrows[:, 1]
    for (rows, cols), tip in zip(grid.boxes(), tips, strict=True):
        assert rows.start <= tip[0] <= rows.stop - 1 and cols.start <= tip[1] <= cols.stop - 1
    lengths = np.hypot(*arrows[:, 1].T)
    np.testing.assert_allclose(lengths / zenith.ravel(), lengths[5] / 0.79, rtol=1e-5)


def test_a_blank_stack_is_not_measurable_never_converged():
    """Issue 26 item 12: a constant stack has no contrast, so no tilt; the result says so
    instead of "converged" at the start values."""
    params = phase.PhaseParams(**OPTICS, optimizer="newton", iterations=5)
    result = phase.estimate_tilt(
        np.full((5, 64, 64), 800.0, np.float32), params=params, device="cpu"
    )
    assert not result.converged
    assert "constant" in result.not_measurable
    assert "not measurable" in result.describe() and "converged" not in result.describe()
    assert result.summary()["not_measurable"] == result.not_measurable


# ----------------------------------------------------------------- noise-only stacks
def _noise_stacks(shape=(11, 256, 256)):
    """Stacks of noise only, of the kinds a camera gives: Poisson at 50, 3000 and 30000
    photons, Gaussian read noise, noise correlated over ~1.5 px, and Poisson under a
    vignetted illumination with a gradient (a smooth profile, the same in every slice)."""
    rng = np.random.default_rng(26)
    yy, xx = np.mgrid[0 : shape[1], 0 : shape[2]] / shape[1]
    light = (1 - 0.3 * ((yy - 0.4) ** 2 + (xx - 0.55) ** 2)) * (1 + 0.2 * xx)
    return {
        "poisson-50": rng.poisson(50.0, shape),
        "poisson-3000": rng.poisson(3000.0, shape),
        "poisson-30000": rng.poisson(30000.0, shape),
        "read-noise": 1000 + rng.normal(0, 10, shape),
        "correlated": 1000 + gaussian_filter(rng.normal(0, 10, shape), (0, 1.5, 1.5)),
        "vignetted": rng.poisson(3000.0 * light[None] * np.ones(shape)),
    }


def test_noise_only_stacks_share_no_structure_and_are_not_measurable():
    """Issue 26 items 1 and 12: a stack of noise holds no tilt; the optimiser fits the noise
    and reported a zenith of 0.003 rad, 'converged'. Each of these 256 x 256 x 11 stacks is
    called so by the noise model, whatever the noise's level or spectrum."""
    from napari_gpuscope.compute.phase._measurable import not_measurable_reason

    params = phase.PhaseParams(**AIR)
    for kind, stack in _noise_stacks().items():
        reason = not_measurable_reason(torch.from_numpy(stack.astype(np.float32)), params)
        assert "share no structure above the noise" in reason, kind
    constant = torch.full((5, 64, 64), 800.0)
    assert "every one of the 5 slices is constant" in not_measurable_reason(constant, params)
    one_slice = torch.from_numpy(_noise_stacks((1, 64, 64))["poisson-3000"].astype(np.float32))
    assert not_measurable_reason(one_slice, params) == ""  # no pair: left to the estimate


def test_the_structure_score_of_noise_is_standard_normal():
    """The oracle is the noise model itself: on white noise (Poisson, Gaussian) the pooled
    cross-correlation of neighbouring slices, in units of the predicted spread, has mean 0
    and standard deviation 1 at each lag (4 stacks x 225 lags, standard error ~0.03 with
    the lags' correlation)."""
    from napari_gpuscope.compute.phase._measurable import _pooled_surface

    params = phase.PhaseParams(**AIR)
    rng = np.random.default_rng(7)
    for make in (lambda s: rng.poisson(200.0, s), lambda s: 1000 + rng.normal(0, 10, s)):
        values = np.concatenate(
            [
                _pooled_surface(torch.from_numpy(make((7, 256, 256)).astype(np.float32)), params)[0]
                .numpy()
                .ravel()
                for _ in range(4)
            ]
        )
        assert abs(values.mean()) < 0.15 and 0.9 < values.std() < 1.1


def test_a_weak_but_real_sample_is_measured_not_refused():
    """A weak sample (0.7 of the cells' phase, 3000 photons, 256 x 256 x 11) whose tilt the
    estimate still finds (zenith 0.172 for 0.2, azimuth 0.98 for 1.0 here; at half the phase
    it is 0.153, at a tenth it misses the zenith by 0.15 rad, which this test does not judge)
    is far above the noise (45 sigma against a threshold of 4.6): the noise model refuses no
    stack whose tilt the estimate can measure."""
    from napari_gpuscope.compute.phase._measurable import noise_only_reason, slice_structure

    params = phase.PhaseParams(**AIR, optimizer="newton", iterations=8)
    ph, ab = cells((256, 256), 3)
    stack = noisy(
        phase.simulate_stack(0.7 * ph, 0.7 * ab, params, N_Z, tilt_zenith=0.2, tilt_azimuth=1.0),
        1,
        photons=3000.0,
    )
    data = torch.from_numpy(stack)
    peak, threshold = slice_structure(data, params)
    assert peak > 5 * threshold
    assert noise_only_reason(data, params) == ""
    result = phase.estimate_tilt(stack, params=params, device="cpu")
    assert abs(result.tilt_map.zenith.item() - 0.2) < 0.05
    assert angle_error(result.tilt_map.azimuth.item(), 1.0) < 0.15


def test_a_noise_only_stack_is_not_measurable_never_converged():
    """The estimate itself (not only the check) refuses a stack of pure noise: the optimiser
    would fit the noise and report an invented tilt."""
    params = phase.PhaseParams(**OPTICS, optimizer="newton", iterations=5)
    noise = np.random.default_rng(4).poisson(3000.0, (11, 256, 256)).astype(np.float32)
    result = phase.estimate_tilt(noise, params=params, device="cpu")
    assert not result.converged
    assert "share no structure above the noise" in result.not_measurable
    assert "not measurable" in result.describe()
