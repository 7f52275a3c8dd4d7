"""The fused BaSiC ALM kernels (compute/flatfield/basic_alm.cu) against their torch twins,
without a GPU: compiled with g++ (HostBackend, threads in order and reversed, grids small
enough to exercise the grid-stride loops), then a whole fit through the emulated kernels must
give the twins' fit; nvcc compiles the file to PTX when available."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_gpuscope.compute.flatfield import _examples, fit_basic
from napari_gpuscope.compute.flatfield import _ops as ops
from napari_gpuscope.compute.flatfield._alm_state import AlmState
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)
from napari_gpuscope.sample_data._shading import shaded_tiles

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")

BACKENDS = {
    "in-order": HostBackend(),
    "reversed-small-grid": HostBackend(block=32, max_blocks=3, reverse=True),
}


def _cloned(args):
    """A copy of an op's arguments (tensors and AlmStates cloned)."""
    return [a.clone() if isinstance(a, torch.Tensor | AlmState) else a for a in args]


def _compare(op, args, kwargs, backend):
    expected = _cloned(args)
    op.twin(*expected, **kwargs)
    got = _cloned(args)
    op.launch(backend, *got, **kwargs)
    for have, want in zip(op.outputs_of(got, kwargs), op.outputs_of(expected, kwargs),
                          strict=True):
        torch.testing.assert_close(have, want, rtol=op.rtol, atol=op.atol, equal_nan=True)
    return got


def _sized_example(op, p, t, shape, seed):
    gen = torch.Generator().manual_seed(seed)
    cpu = torch.device("cpu")
    if op is ops.basic_sparse:
        return _examples.sparse_example(cpu, gen, p, t, shape)
    if op is ops.basic_dual:
        return _examples.dual_example(cpu, gen, p, t, shape)
    return op.example(cpu, gen)


# (P, T, (m, n)): one problem; several with many lanes (40 x 40 px: 64 lanes per image) and
# several chunks of the image axis (T = 40: 4 chunks of 10)
SIZES = [(1, 3, (4, 5)), (3, 7, (6, 11)), (3, 40, (40, 40))]


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS.keys())
@pytest.mark.parametrize("op", ops.OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"p{s[0]}-t{s[1]}")
def test_kernel_matches_twin(backend, op, size):
    p, t, shape = size
    args, kwargs = _sized_example(op, p, t, shape, seed=p * 100 + t)
    _compare(op, args, kwargs, backend)


def test_the_sizes_split_lanes_and_chunks():
    assert ops.sparse_lanes(3 * 40, 40 * 40) == 64
    assert ops.dual_chunks(40, 3 * 40 * 40) == 4
    assert ops.sparse_lanes(1 * 3, 4 * 5) == 32 and ops.dual_chunks(3, 20) == 1


@pytest.mark.parametrize("with_dark", [False, True], ids=["no-dark", "dark"])
def test_dual_without_darkfield_sums_one_row(with_dark):
    """pixel_sums with one row (no darkfield): the kernel writes only F^2, as the twin."""
    (state,), kwargs = _sized_example(ops.basic_dual, 3, 40, (40, 40), seed=3)
    if not with_dark:
        state.pixel_sums = state.pixel_sums[:, :1].contiguous()
        state.scratch = ops.scratch_for(state.images, False)
    _compare(ops.basic_dual, [state], kwargs, BACKENDS["reversed-small-grid"])


def test_status_without_darkfield():
    cpu, generator = torch.device("cpu"), torch.Generator().manual_seed(4)
    (state,), kwargs = _examples.status_example(cpu, generator)
    state.totals = state.totals[:, :1].contiguous()
    (got,) = _compare(ops.basic_status, [state], kwargs, BACKENDS["in-order"])
    torch.testing.assert_close(got.thr_dark, state.thr_dark)  # untouched
    torch.testing.assert_close(got.dark_values, state.dark_values)  # untouched


@pytest.mark.parametrize("op", ops.OPS, ids=lambda op: op.name)
def test_frozen_problems_are_not_touched(op):
    """With every problem frozen, no output changes (bit for bit), in kernel and twin."""
    args, kwargs = op.example(torch.device("cpu"), torch.Generator().manual_seed(5))
    # basic_shrink takes (x, y, threshold, active, out); the others one AlmState
    active = args[3] if op is ops.basic_shrink else args[0].active
    active.zero_()
    for run in (
        lambda a: op.launch(BACKENDS["reversed-small-grid"], *a, **kwargs),
        lambda a: op.twin(*a, **kwargs),
    ):
        got = _cloned(args)
        run(got)
        outputs = zip(op.outputs, op.outputs_of(got, kwargs), op.outputs_of(args, kwargs),
                      strict=True)
        for output, have, before in outputs:
            if output == (0, "active_next"):  # basic_status: 0 for frozen problems
                assert not have.any()
                continue
            assert torch.equal(have, before), (op.name, output)


def test_nan_is_kept_by_the_shrink():
    """A NaN input stays NaN (as the twin's sign x clamp): a diverged fit is never finite."""
    x = torch.tensor([[float("nan"), 2.0, -3.0, 0.5]])
    args = (x, x, torch.tensor([1.0]), torch.tensor([1.0]), torch.zeros_like(x))
    got = _compare(ops.basic_shrink, args, {"with_y": False}, BACKENDS["in-order"])
    assert torch.isnan(got[4][0, 0]) and got[4][0, 1:].tolist() == [1.0, -2.0, 0.0]


@pytest.mark.parametrize("get_darkfield", [False, True], ids=["no-dark", "dark"])
def test_fit_through_host_kernels_equals_twin_fit(monkeypatch, get_darkfield):
    truth = shaded_tiles(12, (32, 32), seed=1, dark_offset=100.0)
    images = truth.images.astype(np.float32)
    twin = fit_basic(images, get_darkfield=get_darkfield, device="cpu")
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    calls = {op.name: op.calls["host"] for op in ops.OPS}
    fused = fit_basic(images, get_darkfield=get_darkfield, device="cpu")
    used = {op.name for op in ops.OPS if op.calls["host"] > calls[op.name]}
    assert {"basic_shrink", "basic_sparse", "basic_dual", "basic_status"} <= used
    assert ("basic_dark_finish" in used) == get_darkfield
    np.testing.assert_allclose(fused.flatfield, twin.flatfield, atol=2e-4)
    np.testing.assert_allclose(fused.darkfield, twin.darkfield, atol=0.05 * twin.darkfield.std())
    assert fused.converged == twin.converged
    assert fused.reweight_passes == twin.reweight_passes


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
def test_nvcc_compiles_to_ptx():
    ok, log = nvcc_compile_check(ops.SOURCE)
    assert ok, log


def test_every_kernel_of_the_file_is_listed():
    """ops.KERNELS (what the GPU kit hands to compute-sanitizer and ncu) is the file's kernels,
    and every op names only kernels of the file."""
    assert set(ops.KERNELS) == set(ops.SOURCE.kernel_names)
    assert set().union(*(op.kernel_names for op in ops.OPS)) == set(ops.KERNELS)
