"""The fused FGP kernels (kernels/tv_fgp.cu) against their torch twins, without a GPU.

The unchanged .cu source is compiled with g++ (HostBackend) and run on random inputs for every
number of coupled axes, with spacing weights and a batch; then the whole solver runs through the
emulated kernels and must give the twin solver's result. nvcc compiles the file to PTX when
available.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import _tv_ops as ops
from napari_gpuscope.compute import tv
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")

SHAPES = {1: (7,), 2: (5, 6), 3: (4, 3, 5), 4: (3, 2, 4, 3)}
SPACINGS = {1: (0.7,), 2: (1.0, 0.3), 3: (0.2, 1.0, 1.0), 4: (0.5, 0.25, 1.0, 2.0)}


@pytest.fixture(scope="module")
def backend():
    return HostBackend()


def problem(ndim: int, batch: int = 3, seed: int = 0):
    gen = torch.Generator().manual_seed(seed + ndim)
    shape = (batch, *SHAPES[ndim])
    f = torch.randn(shape, generator=gen)
    dual = 0.4 * torch.randn((ndim, *shape), generator=gen)
    return f, dual, list(SPACINGS[ndim])


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_primal_kernel_matches_twin(backend, ndim):
    f, z, spacing = problem(ndim)
    for lo, hi in [(-np.inf, np.inf), (0.0, np.inf), (-0.3, 0.4)]:
        expected, got = torch.empty_like(f), torch.full_like(f, np.nan)
        ops._twin_primal(f, z, expected, spacing=spacing, lo=lo, hi=hi)
        ops.fgp_primal.run_on(backend, f, z, got, spacing=spacing, lo=lo, hi=hi)
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_divergence_is_the_negative_adjoint_of_the_gradient():
    for ndim in SHAPES:
        u, p, spacing = problem(ndim, seed=7)
        u, p = u.double(), p.double()
        lhs = (ops.gradient(u, spacing) * p).sum()
        rhs = -(u * ops.divergence(p, spacing)).sum()
        assert float(lhs) == pytest.approx(float(rhs), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_dual_kernel_matches_twin_in_place(backend, ndim):
    u, z, spacing = problem(ndim)
    y = 0.4 * torch.randn(z.shape, generator=torch.Generator().manual_seed(11))
    kwargs = {"spacing": spacing, "inv_l2": 1 / (4 * sum(s * s for s in spacing))}
    kwargs |= {"weight": 0.3, "momentum": 0.4}
    z_twin, y_twin = z.clone(), y.clone()
    ops._twin_dual(u, z_twin, y_twin, **kwargs)
    ops.fgp_dual.run_on(backend, u, z, y, **kwargs)
    torch.testing.assert_close(y, y_twin, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(z, z_twin, rtol=1e-6, atol=1e-6)
    # The projection really bounds every dual vector by the weight.
    assert float(torch.sqrt((y * y).sum(0)).max()) <= 0.3 * (1 + 1e-6)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_gap_kernel_matches_twin(backend, ndim):
    f, y, spacing = problem(ndim)
    u = f + 0.2 * torch.randn(f.shape, generator=torch.Generator().manual_seed(3))
    primal_twin, gap_twin = torch.empty_like(f), torch.empty_like(f)
    primal, gap = torch.full_like(f, np.nan), torch.full_like(f, np.nan)
    ops._twin_gap(f, y, u, primal_twin, gap_twin, spacing=spacing, weight=0.25)
    ops.tv_gap_terms.run_on(backend, f, y, u, primal, gap, spacing=spacing, weight=0.25)
    torch.testing.assert_close(primal, primal_twin, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gap, gap_twin, rtol=1e-6, atol=1e-6)


def test_self_tests_pass_on_the_host_backend(backend):
    for op in (ops.fgp_primal, ops.fgp_dual, ops.tv_gap_terms):
        ok, detail = op.self_test(backend, torch.device("cpu"))
        assert ok, f"{op.name}: {detail}"


def test_whole_solver_through_emulated_kernels_equals_twin_solver(monkeypatch):
    rng = np.random.default_rng(1)
    image = rng.random((2, 5, 14, 16)).astype(np.float32)  # (C, Z, Y, X)
    kwargs = {
        "channel_axis": 0,
        "spacing": (0.4, 1.0, 1.0),
        "tolerance": 0,
        "max_iterations": 25,
        "nonnegative": True,
        "device": "cpu",
    }
    monkeypatch.delenv(HOST_KERNELS_ENV, raising=False)
    twin = run_job(tv.iter_denoise(image, 0.1, **kwargs))
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    for op in (ops.fgp_primal, ops.fgp_dual, ops.tv_gap_terms):
        op.reset()
    host = run_job(tv.iter_denoise(image, 0.1, **kwargs))
    assert ops.fgp_dual.calls["host"] == 25 and ops.fgp_dual.calls["twin"] == 0
    assert ops.tv_gap_terms.calls["host"] == 3
    assert not ops.fgp_primal.disabled_devices
    np.testing.assert_allclose(host.image, twin.image, rtol=0, atol=1e-5)
    assert host.relative_gap == pytest.approx(twin.relative_gap, rel=1e-3)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not available")
def test_kernel_source_compiles_with_nvcc():
    ok, detail = nvcc_compile_check(ops.SOURCE)
    assert ok, detail
