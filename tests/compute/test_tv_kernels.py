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


def step_kwargs(spacing, *, lo=-np.inf, hi=np.inf, weight=0.3, momentum=0.4):
    inv_l2 = 1 / (4 * sum(s * s for s in spacing))
    return {
        "spacing": spacing,
        "lo": lo,
        "hi": hi,
        "inv_l2": inv_l2,
        "weight": weight,
        "momentum": momentum,
    }


def gap_buffers(f, threads=None):
    batch, per_problem = f.shape[0], f[0].numel()
    threads = threads or ops.gap_threads(batch, per_problem)
    return [torch.full((batch, threads), np.nan) for _ in range(2)]


def assert_all_kernels_match_twins(backend, f, z, y, spacing, *, lo=-np.inf, hi=np.inf):
    """Run the three FGP kernels and their twins on the same inputs and compare every output."""
    u, got = torch.empty_like(f), torch.full_like(f, np.nan)
    ops._twin_primal(f, z, u, spacing=spacing, lo=lo, hi=hi)
    ops.fgp_primal.run_on(backend, f, z, got, spacing=spacing, lo=lo, hi=hi)
    torch.testing.assert_close(got, u, rtol=1e-6, atol=1e-6)

    kwargs = step_kwargs(spacing, lo=lo, hi=hi)
    y_twin, z_next_twin = y.clone(), torch.full_like(z, np.nan)
    ops._twin_step(f, z, y_twin, z_next_twin, **kwargs)
    z_before = z.clone()
    z_next = torch.full_like(z, np.nan)
    ops.fgp_step.run_on(backend, f, z, y, z_next, **kwargs)
    assert torch.equal(z, z_before)  # z is only read
    torch.testing.assert_close(y, y_twin, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(z_next, z_next_twin, rtol=1e-6, atol=1e-6)
    # The projection really bounds every dual vector by the weight.
    assert float(torch.sqrt((y * y).sum(0)).max()) <= 0.3 * (1 + 1e-6)

    u = torch.empty_like(f)
    ops._twin_primal(f, y, u, spacing=spacing, lo=lo, hi=hi)
    for threads in (None, 1, 3):
        expected, terms = gap_buffers(f, threads), gap_buffers(f, threads)
        ops._twin_gap_partials(f, y, u, *expected, spacing=spacing, weight=0.25)
        ops.tv_gap_partials.run_on(backend, f, y, u, *terms, spacing=spacing, weight=0.25)
        for got_term, expected_term in zip(terms, expected, strict=True):
            torch.testing.assert_close(got_term, expected_term, rtol=1e-5, atol=1e-6)


def numpy_energy_terms(f, y, u, spacing, weight):
    """Independent oracle: per-problem ROF energy and duality gap in float64 NumPy."""
    f, y, u = (t.double().numpy() for t in (f, y, u))
    grads = []
    for a, s in enumerate(spacing):
        axis = a + 1
        grads.append(s * np.diff(u, axis=axis, append=np.take(u, [-1], axis=axis)))
    norm = np.sqrt(sum(g * g for g in grads))
    dot = sum(y[a] * g for a, g in enumerate(grads))
    primal = 0.5 * (u - f) ** 2 + weight * norm
    gap = weight * norm - dot
    axes = tuple(range(1, f.ndim))
    return primal.sum(axes), gap.sum(axes)


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


@pytest.mark.parametrize("ndim", [2, 3])
def test_fused_step_equals_a_primal_then_the_textbook_dual_update(backend, ndim):
    """Independent oracle for fgp_step: u from the divergence, then the projection by hand."""
    f, z, spacing = problem(ndim, seed=3)
    y = 0.4 * torch.randn(z.shape, generator=torch.Generator().manual_seed(5))
    kwargs = step_kwargs(spacing, lo=-0.5, hi=0.8, weight=0.35, momentum=0.6)
    u = (f.double() + ops.divergence(z.double(), spacing)).clamp(-0.5, 0.8)
    v = z.double() + ops.gradient(u, spacing) * kwargs["inv_l2"]
    norm = torch.sqrt((v * v).sum(0))
    y_new = v * torch.where(norm > 0.35, 0.35 / norm, torch.ones_like(norm))
    z_expected = y_new + 0.6 * (y_new - y.double())
    z_next = torch.full_like(z, np.nan)
    ops.fgp_step.run_on(backend, f, z, y, z_next, **kwargs)
    np.testing.assert_allclose(y.numpy(), y_new.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z_next.numpy(), z_expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_gap_partials_sum_to_the_numpy_energy_and_gap(backend, ndim):
    f, z, spacing = problem(ndim, batch=4, seed=9)
    y = 0.2 * torch.randn(z.shape, generator=torch.Generator().manual_seed(2))
    y *= 0.3 / torch.sqrt((y * y).sum(0)).clamp(min=0.3)  # a feasible dual, |y_i| <= 0.3
    u = torch.empty_like(f)
    ops.fgp_primal.run_on(backend, f, y, u, spacing=spacing)
    parts = gap_buffers(f)
    ops.tv_gap_partials.run_on(backend, f, y, u, *parts, spacing=spacing, weight=0.3)
    primal, gap = numpy_energy_terms(f, y, u, spacing, 0.3)
    np.testing.assert_allclose(parts[0].double().sum(1).numpy(), primal, rtol=1e-5)
    np.testing.assert_allclose(parts[1].double().sum(1).numpy(), gap, rtol=1e-4, atol=1e-5)
    assert (gap >= -1e-6).all()


def test_kernels_and_twins_agree_on_nan(backend):
    """A NaN in the data stays NaN through the box constraint, in the kernel as in the twin."""
    f, z, spacing = problem(2, seed=1)
    f[1, 2, 3] = np.nan
    y = torch.zeros_like(z)
    for lo, hi in [(0.0, 1.0), (-np.inf, np.inf), (0.0, np.inf)]:
        u_twin, u_kernel = torch.empty_like(f), torch.empty_like(f)
        ops._twin_primal(f, z, u_twin, spacing=spacing, lo=lo, hi=hi)
        ops.fgp_primal.run_on(backend, f, z, u_kernel, spacing=spacing, lo=lo, hi=hi)
        assert torch.equal(u_kernel.isnan(), u_twin.isnan())
        assert bool(u_kernel[1, 2, 3].isnan())
        y_twin, y_kernel = y.clone(), y.clone()
        z_twin, z_kernel = torch.empty_like(z), torch.empty_like(z)
        kwargs = step_kwargs(spacing, lo=lo, hi=hi)
        ops._twin_step(f, z, y_twin, z_twin, **kwargs)
        ops.fgp_step.run_on(backend, f, z, y_kernel, z_kernel, **kwargs)
        assert torch.equal(y_kernel.isnan(), y_twin.isnan())
        assert torch.equal(z_kernel.isnan(), z_twin.isnan())
        assert bool(y_kernel.isnan().any())


def test_fused_step_is_race_free(backend):
    """Every thread reads only what no thread of the same launch writes: the emulated threads
    give bit-identical results in either order."""
    f, z, spacing = problem(3, seed=4)
    y = 0.4 * torch.randn(z.shape, generator=torch.Generator().manual_seed(6))
    results = []
    for order in (HostBackend(), HostBackend(reverse=True, max_blocks=1)):
        y_run, z_next = y.clone(), torch.empty_like(z)
        ops.fgp_step.run_on(order, f, z, y_run, z_next, **step_kwargs(spacing))
        parts = gap_buffers(f)
        ops.tv_gap_partials.run_on(order, f, y_run, f, *parts, spacing=spacing, weight=0.3)
        results.append((y_run, z_next, *parts))
    for forward, backward in zip(*results, strict=True):
        assert torch.equal(forward, backward)


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
    for op in (ops.fgp_primal, ops.fgp_step, ops.tv_gap_partials):
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
    for op in (ops.fgp_primal, ops.fgp_step, ops.tv_gap_partials):
        op.reset()
    host = run_job(tv.iter_denoise(image, 0.1, **kwargs))
    assert ops.fgp_step.calls["host"] == 25 and ops.fgp_step.calls["twin"] == 0
    assert ops.tv_gap_partials.calls["host"] == 3
    assert not ops.fgp_primal.disabled_devices
    np.testing.assert_allclose(host.image, twin.image, rtol=0, atol=1e-5)
    assert host.relative_gap == pytest.approx(twin.relative_gap, rel=1e-3)


# --- index math: 32-bit fast path and 64-bit path ------------------------------------------

# A host-only probe appended to a copy of tv_fgp.cu: the kernels' own coordinate helper, for
# both index types, evaluated at chosen flat indices (no array of N elements is allocated).
COORDS_PROBE = """
template <int D, class I>
__device__ void tv_probe_one(long long index, I n0, I n1, I n2, I n3, long long* out) {
    const TvGrid<D, I> g = tv_grid<D, I>(n0, n1, n2, n3, 0.0f, 0.0f, 0.0f, 0.0f);
    I c[D];
    tv_coords<D, I>((I)index, g, c);
    for (int a = 0; a < D; ++a) out[a] = (long long)c[a];
}

template <class I>
__device__ void tv_probe(const long long* index, long long* coord, long long count, I n0, I n1,
                         I n2, I n3, int ndim) {
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < count;
         t += (long long)blockDim.x * gridDim.x) {
        long long* out = coord + t * TV_MAX_DIMS;
        if (ndim == 1) tv_probe_one<1, I>(index[t], n0, n1, n2, n3, out);
        if (ndim == 2) tv_probe_one<2, I>(index[t], n0, n1, n2, n3, out);
        if (ndim == 3) tv_probe_one<3, I>(index[t], n0, n1, n2, n3, out);
        if (ndim == 4) tv_probe_one<4, I>(index[t], n0, n1, n2, n3, out);
    }
}

extern "C" __global__ void tv_coords_probe_u32(const long long* index, long long* coord,
                                               long long count, unsigned int n0,
                                               unsigned int n1, unsigned int n2,
                                               unsigned int n3, int ndim) {
    tv_probe<unsigned int>(index, coord, count, n0, n1, n2, n3, ndim);
}

extern "C" __global__ void tv_coords_probe_i64(const long long* index, long long* coord,
                                               long long count, long long n0, long long n1,
                                               long long n2, long long n3, int ndim) {
    tv_probe<long long>(index, coord, count, n0, n1, n2, n3, ndim);
}
"""


def _variant_source(tmp_path, name: str, prefix: str = "", suffix: str = "") -> KernelSource:
    path = tmp_path / name
    path.write_text(prefix + ops.SOURCE.text + suffix, encoding="utf-8")
    return KernelSource(path)


@pytest.mark.parametrize(
    ("shape", "width"),
    [
        ((1, 4000, 1000), 32),
        ((1, 65535, 65537), 64),  # N = 2**32 - 1: no room for a grid stride past the end
        ((1, 65536, 65536), 64),  # N = 2**32
        ((3, 2, 1000, 999, 1001), 64),  # N ~ 6e9, 4 coupled axes
        ((5, 7, 3, 11), 32),
    ],
)
def test_coordinates_match_numpy_on_both_index_paths(tmp_path, shape, width):
    source = _variant_source(tmp_path, "probe.cu", suffix=COORDS_PROBE)
    backend = HostBackend(max_blocks=2)
    total = int(np.prod(shape, dtype=np.int64))
    ndim = len(shape) - 1
    assert ops.index_width(total, ndim) == width
    rng = np.random.default_rng(total % 1000)
    edges = [0, 1, total - 1, total - 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1]
    index = np.array(
        sorted({i for i in edges if 0 <= i < total} | set(rng.integers(0, total, 300).tolist())),
        dtype=np.int64,
    )
    count = index.size
    expected = np.stack(np.unravel_index(index, shape)[1:], axis=1)  # independent oracle
    kinds = [("i64", np.int64)] + ([("u32", np.uint32)] if width == 32 else [])
    for name, dtype in kinds:
        function = backend.function(source, f"tv_coords_probe_{name}")
        coord = np.full(count * 4, -1, dtype=np.int64)
        n = [dtype(v) for v in shape[1:]] + [dtype(1)] * (4 - ndim)
        backend.launch(function, count, [index, coord, np.int64(count), *n, np.int32(ndim)])
        got = coord.reshape(count, 4)[:, :ndim]
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_index_width_counts_dual_components_and_the_grid_stride():
    reach = ops.MAX_BLOCKS * ops.BLOCK_SIZE
    limit = ops.NARROW_INDEX_LIMIT
    assert ops.index_width((limit - reach) // 3, 3) == 32
    assert ops.index_width((limit - reach) // 3 + 1, 3) == 64
    assert ops.index_width(2**31, 1) == 32
    assert ops.index_width(2**31, 2) == 64


@pytest.fixture
def wide_indices(monkeypatch):
    """Every launch takes the 64-bit kernels."""
    monkeypatch.setattr(ops, "NARROW_INDEX_LIMIT", 0)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_64_bit_index_path_matches_twins(backend, wide_indices, ndim):
    f, z, spacing = problem(ndim, seed=5)
    assert ops._launch_geometry(f, spacing)[0].endswith("i64")
    y = 0.4 * torch.randn(z.shape, generator=torch.Generator().manual_seed(13))
    assert_all_kernels_match_twins(backend, f, z, y, spacing, lo=-0.3, hi=0.4)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not available")
def test_kernel_source_compiles_with_nvcc():
    ok, detail = nvcc_compile_check(ops.SOURCE)
    assert ok, detail
