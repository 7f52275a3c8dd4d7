"""The fused phase kernels (compute/phase/phase_kernels.cu) against their torch twins, without a
GPU: the unchanged .cu source compiled with g++ (HostBackend), random inputs, both thread
orders; then a whole reconstruction through the emulated kernels against waveorder's fixture;
nvcc compiles the file to PTX when available."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)
from napari_gpuscope.compute.phase import _ops as ops
from napari_gpuscope.compute.phase import _regularization_ops as reg_ops

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "phase"


def _complex(shape, gen):
    return torch.complex(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_normal_equations_kernel_matches_twin(order, sign):
    gen = torch.Generator().manual_seed(3)
    backend = HostBackend(reverse=order == "reverse", max_blocks=2)
    shape = (3, 7, 11, 13)  # B, Z, Y, X
    data, a, p = (torch.view_as_real(_complex(shape, gen)).contiguous() for _ in range(3))
    outs = [torch.full((3, 11, 13), np.nan) for _ in range(2)]
    outs += [torch.full((3, 11, 13, 2), np.nan) for _ in range(3)]
    ops.normal_equations_op.run_on(backend, data, a, p, *outs, sign)
    twins = [torch.empty_like(o) for o in outs]
    ops._normal_equations_views(data, a, p, *twins, sign)
    for kernel, twin in zip(outs, twins, strict=True):
        torch.testing.assert_close(kernel, twin, rtol=1e-5, atol=1e-5)


def test_tikhonov_kernel_matches_twin_and_float64():
    gen = torch.Generator().manual_seed(5)
    args, _ = ops._tikhonov_example(torch.device("cpu"), gen)
    outs = [torch.full_like(args[5], np.nan), torch.full_like(args[6], np.nan)]
    ops.tikhonov_solve_op.run_on(HostBackend(), *args[:5], *outs, args[7])
    twins = [torch.empty_like(o) for o in outs]
    ops._tikhonov_views(*args[:5], *twins, args[7])
    for kernel, twin in zip(outs, twins, strict=True):
        torch.testing.assert_close(kernel, twin, rtol=1e-4, atol=1e-5)
    # independent oracle: the 2x2 system solved in float64 by numpy
    g_aa, g_pp, g_ap, b_a, b_p = (t.double().numpy() for t in args[:5])
    reg = args[7]
    for index in [(0, 0, 0), (2, 6, 8), (1, 3, 4)]:
        gap = complex(*g_ap[index])
        m = np.array([[g_aa[index] + reg, gap], [np.conj(gap), g_pp[index] + reg]])
        rhs = np.array([complex(*b_a[index]), complex(*b_p[index])])
        solution = np.linalg.solve(m, rhs)
        got = [complex(*outs[k][index].double().numpy()) for k in range(2)]
        np.testing.assert_allclose(got, solution, rtol=1e-4)


def test_self_tests_pass_on_the_host_backend():
    for op in (
        ops.normal_equations_op,
        ops.tikhonov_solve_op,
        reg_ops.regularization_components_op,
    ):
        ok, detail = op.self_test(HostBackend(), torch.device("cpu"))
        assert ok, f"{op.name}: {detail}"


def test_reconstruction_through_host_kernels_equals_waveorder(monkeypatch):
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    for op in (ops.normal_equations_op, ops.tikhonov_solve_op):
        op.reset()
    ref = np.load(FIXTURES / "waveorder_recon.npz")
    result = phase.reconstruct(
        ref["stack_flat"],
        regularization=float(ref["regularization"]),
        wavelength=0.45,
        yx_pixel_size=0.325,
        z_pixel_size=1.0,
        na_illumination=0.4,
        na_detection=0.55,
        index_of_refraction=1.0,
        tilt_mode="none",
        device="cpu",
    )
    np.testing.assert_allclose(result.phase, ref["flat_zero_tilt_phase"], atol=2e-5)
    assert ops.normal_equations_op.calls["host"] >= 1
    assert ops.tikhonov_solve_op.calls["host"] >= 1
    assert "host" in result.kernel_paths["phase_normal_equations"]
    for op in (ops.normal_equations_op, ops.tikhonov_solve_op):
        op.reset()


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not available")
def test_kernel_source_compiles_with_nvcc():
    ok, log = nvcc_compile_check(ops.SOURCE)
    assert ok, log


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_regularization_components_kernel_matches_twin_and_eigh(order):
    """The automatic regularization's per-frequency pass: the kernel against its twin, and both
    against numpy.linalg.eigh of each 2x2 Gram matrix (float64) for the eigenvalues, the data's
    power along each eigenvector and the histogram slot."""
    gen = torch.Generator().manual_seed(7)
    args, _ = reg_ops._components_example(torch.device("cpu"), gen)
    inputs, binning = args[:6], args[8]
    kernel_out = [torch.full_like(args[6], np.nan), torch.full_like(args[7], np.nan)]
    backend = HostBackend(reverse=order == "reverse", max_blocks=2)
    reg_ops.regularization_components_op.run_on(backend, *inputs, *kernel_out, binning)
    twin_out = [torch.empty_like(t) for t in kernel_out]
    reg_ops._components_views(*inputs, *twin_out, binning)
    torch.testing.assert_close(kernel_out[0], twin_out[0], rtol=0, atol=0)  # the slots
    torch.testing.assert_close(kernel_out[1], twin_out[1], rtol=1e-6, atol=1e-7)

    g_aa, g_pp = (t.double().numpy() for t in inputs[:2])
    g_ap, b_a, b_p = (t.double().numpy() @ np.array([1, 1j]) for t in inputs[2:5])
    gram = np.stack([np.stack([g_aa, g_ap], -1), np.stack([g_ap.conj(), g_pp], -1)], -2)
    eigenvalues, vectors = np.linalg.eigh(gram)
    power = np.abs(np.einsum("nik,ni->nk", vectors.conj(), np.stack([b_a, b_p], -1))) ** 2
    floor_ratio, low, per_decade = binning.floor_ratio, binning.low, binning.per_decade
    n_bins, spread = binning.n_bins, binning.spread
    floor = floor_ratio * (float(inputs[5][0]) + float(inputs[5][1]))
    weights = kernel_out[1].double().numpy()
    copies = (np.arange(g_aa.size) % spread) * n_bins
    flat = eigenvalues[:, 1] - eigenvalues[:, 0] <= 1e-6 * eigenvalues[:, 1]
    for k, column in ((0, 1), (1, 0)):  # eigh ascends: s_1 is its second column
        s = eigenvalues[:, column]
        kept = s > floor
        np.testing.assert_array_equal(weights[0, k], kept)
        np.testing.assert_allclose(weights[1, k][kept], s[kept], rtol=1e-6)
        distinct = kept & ~flat  # the eigenvectors of G = s I are any basis
        c = power[distinct, column] / s[distinct]
        np.testing.assert_allclose(weights[2, k][distinct], c, rtol=1e-5)
        bins = np.clip(((np.log10(s[kept]) - low) * per_decade).astype(int), 0, n_bins - 1)
        np.testing.assert_array_equal(kernel_out[0][k].numpy()[kept], copies[kept] + bins)
        np.testing.assert_array_equal(kernel_out[0][k].numpy()[~kept], copies[~kept])
        assert not weights[1:, k][:, ~kept].any()  # unresolved directions carry no weight
    assert not weights[0, 1].all()  # the example has rank-1 matrices
    # where G = s I only the total power is defined: |b|^2 = s (c_1 + c_2)
    assert flat.sum() >= 3
    total = weights[3, 0] + weights[3, 1]
    np.testing.assert_allclose(total[flat], power[flat].sum(axis=1), rtol=1e-5)


def test_regularization_statistics_through_host_kernels_equal_the_twins(monkeypatch):
    """The selector's histogram and choice on a realistic system: host-compiled kernel path
    against the torch twin (same float32 storage, so equal to the sums' rounding)."""
    from phase_auto_cases import small_system

    from napari_gpuscope.compute.phase._auto_regularization import (
        RegularizationStats,
        data_energy,
        select_regularization,
    )

    data, _, _, system = small_system()
    op = reg_ops.regularization_components_op
    twin = RegularizationStats.of(system, data_energy(data), data.shape[0])
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    op.reset()
    try:
        fused = RegularizationStats.of(system, data_energy(data), data.shape[0])
        assert op.last_paths["cpu"].path == "host", op.last_paths
    finally:
        op.reset()
    torch.testing.assert_close(fused.bins, twin.bins, rtol=1e-12, atol=0)
    assert select_regularization(fused) == pytest.approx(select_regularization(twin), rel=1e-6)
