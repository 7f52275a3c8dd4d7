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

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    KernelSource,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)
from napari_gpuscope.compute.tv import _ops as ops

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


def test_divergence_is_the_negative_adjoint_of_the_gradient():
    for ndim in SHAPES:
        u, p, spacing = problem(ndim, seed=7)
        u, p = u.double(), p.double()
        lhs = (ops.gradient(u, spacing) * p).sum()
        rhs = -(u * ops.divergence(p, spacing)).sum()
        assert float(lhs) == pytest.approx(float(rhs), rel=1e-12, abs=1e-12)


def assert_all_kernels_match_twins(backend, f, z, y, spacing, *, lo=-np.inf, hi=np.inf):
    """Run the three FGP kernels and their twins on the same inputs and compare every output."""
    u, got = torch.empty_like(f), torch.full_like(f, np.nan)
    ops._twin_primal(f, z, u, spacing=spacing, lo=lo, hi=hi)
    ops.fgp_primal.run_on(backend, f, z, got, spacing=spacing, lo=lo, hi=hi)
    torch.testing.assert_close(got, u, rtol=1e-6, atol=1e-6)

    kwargs = {"spacing": spacing, "inv_l2": 1 / (4 * sum(s * s for s in spacing))}
    kwargs |= {"weight": 0.3, "momentum": 0.4}
    z_twin, y_twin = z.clone(), y.clone()
    ops._twin_dual(u, z_twin, y_twin, **kwargs)
    ops.fgp_dual.run_on(backend, u, z, y, **kwargs)
    torch.testing.assert_close(y, y_twin, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(z, z_twin, rtol=1e-6, atol=1e-6)
    # The projection really bounds every dual vector by the weight.
    assert float(torch.sqrt((y * y).sum(0)).max()) <= 0.3 * (1 + 1e-6)

    expected = [torch.empty_like(f) for _ in range(2)]
    terms = [torch.full_like(f, np.nan) for _ in range(2)]
    ops._twin_gap(f, y, u, *expected, spacing=spacing, weight=0.25)
    ops.tv_gap_terms.run_on(backend, f, y, u, *terms, spacing=spacing, weight=0.25)
    for got_term, expected_term in zip(terms, expected, strict=True):
        torch.testing.assert_close(got_term, expected_term, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@pytest.mark.parametrize(("lo", "hi"), [(-np.inf, np.inf), (0.0, np.inf), (-0.3, 0.4)])
def test_kernels_match_twins(backend, ndim, lo, hi):
    f, z, spacing = problem(ndim)
    y = 0.4 * torch.randn(z.shape, generator=torch.Generator().manual_seed(11))
    assert_all_kernels_match_twins(backend, f, z, y, spacing, lo=lo, hi=hi)


@pytest.mark.parametrize("shape", [(2, 1, 5), (2, 4, 1), (1, 2, 1, 3), (3, 1, 1, 2, 1)])
def test_twins_match_kernels_on_size_one_and_two_axes(backend, shape):
    gen = torch.Generator().manual_seed(len(shape))
    ndim = len(shape) - 1
    spacing = [0.5, 1.0, 2.0, 0.25][:ndim]
    f = torch.randn(shape, generator=gen)
    z = 0.4 * torch.randn((ndim, *shape), generator=gen)
    y = 0.4 * torch.randn((ndim, *shape), generator=gen)
    assert_all_kernels_match_twins(backend, f, z, y, spacing)


def test_gradient_and_divergence_match_numpy():
    gen = torch.Generator().manual_seed(4)
    u = torch.randn((2, 4, 1, 6), generator=gen, dtype=torch.float64)
    p = torch.randn((3, 2, 4, 1, 6), generator=gen, dtype=torch.float64)
    spacing = [0.5, 3.0, 2.0]
    g, div = ops.gradient(u, spacing), ops.divergence(p, spacing)
    u_np, p_np = u.numpy(), p.numpy()
    expected_div = np.zeros_like(u_np)
    for a, s in enumerate(spacing):
        axis = a + 1
        diff = s * np.diff(u_np, axis=axis, append=np.take(u_np, [-1], axis=axis))
        np.testing.assert_allclose(g[a].numpy(), diff, rtol=1e-12, atol=1e-12)
        # Adjoint of the forward difference: p_i - p_{i-1} with p_{-1} = p_{n-1} = 0.
        q = np.moveaxis(p_np[a], axis, 0).copy()
        q[-1] = 0
        back = q - np.concatenate([np.zeros_like(q[:1]), q[:-1]])
        expected_div += s * np.moveaxis(back, 0, axis)
    np.testing.assert_allclose(div.numpy(), expected_div, rtol=1e-12, atol=1e-12)


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


# --- index math: 32-bit fast path and 64-bit path ------------------------------------------

# A host-only probe appended to a copy of tv_fgp.cu: the kernels' own coordinate helper and
# path choice, evaluated at chosen flat indices (no array of N elements is ever allocated).
COORDS_PROBE = """
extern "C" __global__ void tv_coords_probe(const long long* index, long long* coord,
                                           long long count, long long N, long long n0,
                                           long long n1, long long n2, long long n3, int ndim) {
    const long long n[TV_MAX_DIMS] = {n0, n1, n2, n3};
    const bool narrow = tv_narrow_indices(N);
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < count;
         t += (long long)blockDim.x * gridDim.x) {
        long long c[TV_MAX_DIMS] = {0, 0, 0, 0};
        tv_coords(index[t], n, ndim, narrow, c);
        for (int a = 0; a < TV_MAX_DIMS; ++a) coord[t * TV_MAX_DIMS + a] = c[a];
        coord[count * TV_MAX_DIMS + t] = narrow ? 1 : 0;
    }
}
"""


def _variant_source(tmp_path, name: str, prefix: str = "", suffix: str = "") -> KernelSource:
    path = tmp_path / name
    path.write_text(prefix + ops.SOURCE.text + suffix, encoding="utf-8")
    return KernelSource(path)


@pytest.mark.parametrize(
    ("shape", "expect_narrow"),
    [
        ((1, 65535, 65537), True),  # N = 2**32 - 1: the largest count on the 32-bit path
        ((1, 65536, 65536), False),  # N = 2**32
        ((3, 2, 1000, 999, 1001), False),  # N ~ 6e9, 4 coupled axes
        ((5, 7, 3, 11), True),
    ],
)
def test_coordinates_match_numpy_on_both_index_paths(tmp_path, shape, expect_narrow):
    source = _variant_source(tmp_path, "probe.cu", suffix=COORDS_PROBE)
    backend = HostBackend(max_blocks=2)
    function = backend.function(source, "tv_coords_probe")
    total = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(total % 1000)
    edges = [0, 1, total - 1, total - 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1]
    index = np.array(
        sorted({i for i in edges if 0 <= i < total} | set(rng.integers(0, total, 300).tolist())),
        dtype=np.int64,
    )
    count = index.size
    ndim = len(shape) - 1
    coord = np.full(count * 4 + count, -1, dtype=np.int64)
    n = [np.int64(v) for v in shape[1:]] + [np.int64(1)] * (4 - ndim)
    args = [index, coord, np.int64(count), np.int64(total), *n, np.int32(ndim)]
    backend.launch(function, count, args)
    got = coord[: count * 4].reshape(count, 4)[:, :ndim]
    expected = np.stack(np.unravel_index(index, shape)[1:], axis=1)  # independent oracle
    np.testing.assert_array_equal(got, expected)
    assert set(coord[count * 4 :].tolist()) == {int(expect_narrow)}


@pytest.fixture
def wide_index_source(tmp_path, monkeypatch):
    """tv_fgp.cu compiled so that every launch takes the 64-bit coordinate path."""
    source = _variant_source(
        tmp_path, "tv_fgp_wide.cu", prefix="#define TV_NARROW_INDEX_LIMIT -1LL\n"
    )
    monkeypatch.setattr(ops, "SOURCE", source)
    return source


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_64_bit_index_path_matches_twins(backend, wide_index_source, ndim):
    f, z, spacing = problem(ndim, seed=5)
    y = 0.4 * torch.randn(z.shape, generator=torch.Generator().manual_seed(13))
    assert_all_kernels_match_twins(backend, f, z, y, spacing, lo=-0.3, hi=0.4)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not available")
def test_kernel_source_compiles_with_nvcc():
    ok, detail = nvcc_compile_check(ops.SOURCE)
    assert ok, detail
