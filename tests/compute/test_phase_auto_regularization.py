"""The automatic phase regularization (``regularization="auto"``).

Accuracy against an independent forward model (Abbe's sum over source points,
``phase_abbe.py``, not the plugin's transfer functions): at three noise levels, with and without
tilt, the phase at the automatic value correlates with the true phase within 0.01 of the best
fixed value of a logarithmic grid. The histogram behind the selector against the same sums
computed frequency by frequency from explicit solves; and the plumbing (params, result,
provenance, tiles, solver, preview).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from phase_auto_cases import cells_stack, pearson, small_system

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.phase._auto_regularization import (
    RegularizationStats,
    data_energy,
    gcv_curve,
)
from napari_gpuscope.compute.phase._inverse import tikhonov_filter
from napari_gpuscope.compute.preview import PlaneView
from napari_gpuscope.sample_data.phase import OPTICS

GRID = np.logspace(-5, -1, 17)  # the fixed values to beat: 4 per decade


@pytest.fixture(scope="module", params=[(0.0, 0.0), (0.2, 1.0)], ids=["no-tilt", "tilt"])
def clean(request):
    """A noise-free stack of the cells from Abbe's model, the truth and the tilt."""
    return cells_stack(*request.param)


@pytest.mark.parametrize("photons", [3e3, 1e4, 1e5])  # 1.8 %, 1 % and 0.3 % noise
def test_auto_is_within_0_01_of_the_best_fixed_value(clean, photons):
    stack, truth, (zenith, azimuth) = clean
    rng = np.random.default_rng(int(photons))
    noisy = (rng.poisson(stack * photons) / photons).astype(np.float32)
    params = phase.PhaseParams(**OPTICS, tilt_zenith=zenith, tilt_azimuth=azimuth)
    assert params.regularization is None  # the default
    solver = phase.PhaseSolver(noisy, params, device="cpu")
    best = max(pearson(solver.solve(reg)[1], truth) for reg in GRID)
    result = phase.reconstruct(noisy, params=params, device="cpu")
    solver.solve()
    assert result.regularization_chosen == pytest.approx(solver.chosen_regularization)
    got = pearson(result.phase, truth)
    assert got >= best - 0.01, (result.regularization_chosen, got, best)
    # The former default: below the automatic choice by more than the tolerance somewhere
    # (here at 0.3 % noise), which is the point of choosing per stack.
    if photons == 1e5:
        assert pearson(solver.solve(1e-3)[1], truth) < got - 0.01


def test_the_histogram_equals_the_sums_over_frequencies():
    """RSS, the trace of the influence matrix and the correlation estimate, from the
    histogram, against the same quantities from explicit solves frequency by frequency."""
    data, d_hat, tf, system = small_system()
    stats = RegularizationStats.of(system, data_energy(data), data.shape[0])
    regs = np.logspace(-3, 0, 7)  # within the selector's grid (from 1e-6 of the largest s)
    curve = gcv_curve(stats, regs)
    # sigma^2 with the unbiased least-squares residual: 2 components fitted per frequency
    energy = float((d_hat.abs() ** 2).sum())
    n_data = d_hat.numel()
    for index, reg in enumerate(regs):
        a_hat, p_hat = system.solve(float(reg))
        model = tf.absorption * a_hat + tf.phase * p_hat
        rss = float(((d_hat.to(torch.complex128) - model).abs() ** 2).sum())
        w = tikhonov_filter(tf.absorption, tf.phase, float(reg), "consistent")
        trace = float((w[0] * tf.absorption + w[1] * tf.phase).sum().real)
        assert curve["rss"][index] == pytest.approx(rss, rel=2e-3)
        assert curve["trace"][index] == pytest.approx(trace, abs=0.01 * trace + 1)
        assert curve["gcv"][index] == pytest.approx(n_data * rss / (n_data - trace) ** 2, rel=5e-3)
    assert float(stats.energy) == pytest.approx(energy, rel=1e-5)


def test_tiles_choose_one_value_from_their_summed_statistics():
    data, _, _, _ = small_system(shape=(64, 64))
    stack = data.numpy()
    params = phase.PhaseParams(**OPTICS)
    grid = phase.TileGrid.covering((64, 64), (2, 2), 0.25)
    tilt = phase.TiltMap.uniform(grid, 0.1, 0.7)
    result = phase.reconstruct(stack, params=params, tilt_map=tilt, device="cpu")
    chosen = result.regularization_chosen
    assert chosen is not None and 0 < chosen <= 1e3
    fixed = phase.reconstruct(
        stack, params=params.replace(regularization=chosen), tilt_map=tilt, device="cpu"
    )
    np.testing.assert_allclose(result.phase, fixed.phase, atol=1e-6)


def test_the_result_says_the_chosen_value_everywhere():
    data, _, _, _ = small_system()
    stack = data.numpy()
    params = phase.PhaseParams(**OPTICS, tilt_zenith=0.1, tilt_azimuth=0.7)
    assert params.label == "reg=auto"
    assert phase.PhaseParams.from_yaml(params.to_yaml()) == params
    assert params.to_dict()["regularization"] is None
    result = phase.reconstruct(stack, params=params, device="cpu")
    chosen = result.regularization_chosen
    assert result.regularization == chosen
    summary = result.summary()
    assert summary["regularization"] == "auto"
    assert summary["regularization_chosen"] == pytest.approx(chosen)
    assert f"Tikhonov auto → {chosen:.2g}" in result.describe()
    assert result.layers("cells")[0][1]["name"] == f"phase · cells [reg=auto {chosen:.2g}]"
    fixed = phase.reconstruct(stack, params=params.replace(regularization=chosen), device="cpu")
    np.testing.assert_array_equal(result.phase, fixed.phase)
    # The tilt estimate runs at the former default when the regularization is automatic.
    estimate = phase.estimate_tilt(
        stack, params=params.replace(tilt_mode="global", iterations=2), device="cpu"
    )
    pinned = phase.estimate_tilt(
        stack,
        params=params.replace(tilt_mode="global", iterations=2, regularization=1e-3),
        device="cpu",
    )
    assert estimate.tilt_map.zenith.item() == pinned.tilt_map.zenith.item()


def test_tv_uses_the_automatic_tikhonov_part_and_keeps_its_weight():
    data, _, _, _ = small_system()
    stack = data.numpy()
    params = phase.PhaseParams(**OPTICS, regularizer="tv", tv_strength=2e-3, tv_iterations=5)
    result = phase.reconstruct(stack, params=params, device="cpu")
    chosen = result.regularization_chosen
    assert chosen is not None
    fixed = phase.reconstruct(stack, params=params.replace(regularization=chosen), device="cpu")
    np.testing.assert_allclose(result.phase, fixed.phase, atol=1e-6)
    assert "TV 0.002" in result.describe()


def test_the_preview_chooses_as_a_run_does():
    data, _, _, _ = small_system()
    stack = data.numpy()
    params = phase.PhaseParams(**OPTICS, tilt_mode="none")
    view = PlaneView(shape=stack.shape, axes=(1, 2), index=(0, 0, 0))
    solvers = phase.PhaseSolvers()
    job = phase.preview_job(solvers, stack, params, "cpu", view, None)
    try:
        while True:
            next(job)
    except StopIteration as stop:
        preview = stop.value
    run = phase.reconstruct(stack, params=params, device="cpu")
    assert preview.result.regularization_chosen == pytest.approx(run.regularization_chosen)
    np.testing.assert_allclose(preview.planes["phase"], run.phase, atol=1e-6)
    assert not math.isnan(preview.result.regularization)


@pytest.mark.parametrize(
    ("shape", "path"),
    [((48, 40), "twin"), ((512, 512), "twin"), ((512, 512), "host")],
    ids=["48x40", "512x512", "512x512-host-kernel"],
)
def test_the_histogram_bins_are_numpys_sums(shape, path, monkeypatch):
    """The binning (a per-frequency pass, then index_add_ into the histogram, chunk by chunk)
    against NumPy:
    each 2x2 Gram matrix's eigen-decomposition by ``numpy.linalg.eigh``, ``c = |v^H b|^2 / s``,
    and unbuffered sums per bin of count, sum s, sum c, sum c s. The pass stores its values as
    float32 (computed in float64), so the sums agree to float32's rounding. At 512 x 512 the
    frequencies go in 8 passes into 4 copies of the histogram; "host" runs the fused kernel,
    compiled with g++."""
    from napari_gpuscope.compute.kernels import HOST_KERNELS_ENV, host_emulation_available
    from napari_gpuscope.compute.phase import _auto_regularization as auto
    from napari_gpuscope.compute.phase._regularization_ops import regularization_components_op

    if path == "host":
        if not host_emulation_available():
            pytest.skip("g++ not available")
        monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    data, _, _, system = small_system(shape=shape)
    regularization_components_op.reset()
    try:
        stats = RegularizationStats.of(system, data_energy(data), data.shape[0])
        assert regularization_components_op.last_paths["cpu"].path == path
    finally:
        regularization_components_op.reset()
    g_aa, g_pp, g_ap, b_a, b_p = (
        t.reshape(-1).numpy().astype(np.complex128) for t in system.fields()
    )
    gram = np.stack([np.stack([g_aa, g_ap], -1), np.stack([g_ap.conj(), g_pp], -1)], -2)
    eigenvalues, vectors = np.linalg.eigh(gram)  # ascending: (s_2, s_1)
    rhs = np.stack([b_a, b_p], -1)
    along = np.einsum("nik,ni->nk", vectors.conj(), rhs)  # v_k^H b
    s_max = float(system.g_aa.max().double() + system.g_pp.max().double())
    low, high = auto.LOG_RANGE
    n_bins = int((high - low) * auto.BINS_PER_DECADE)
    expected = np.zeros((4, n_bins))
    for k in range(2):
        s, q = eigenvalues[:, k], np.abs(along[:, k]) ** 2
        kept = s > auto.FLOOR * s_max
        s, c = s[kept], q[kept] / s[kept]
        index = np.clip(((np.log10(s) - low) * auto.BINS_PER_DECADE).astype(int), 0, None)
        index = np.minimum(index, n_bins - 1)
        for row, values in enumerate((np.ones(kept.sum()), s, c, c * s)):
            np.add.at(expected[row], index, values)
    np.testing.assert_array_equal(stats.bins[0].numpy(), expected[0])
    np.testing.assert_allclose(stats.bins.numpy(), expected, rtol=1e-6, atol=0)
    assert stats.bins[0].sum() > 0.9 * 2 * g_aa.size  # most components kept
