"""The fused BaSiC ALM kernels (compute/flatfield/basic_alm.cu) against their torch twins,
without a GPU: compiled with g++ (HostBackend), then a whole fit through the emulated kernels
must give the twins' fit; nvcc compiles the file to PTX when available."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_gpuscope.compute.flatfield import _ops as ops
from napari_gpuscope.compute.flatfield import fit_basic
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    host_emulation_available,
    nvcc_available,
    nvcc_compile_check,
)
from napari_gpuscope.sample_data._shading import shaded_tiles

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")

FLATFIELD_OPS = (ops.basic_sparse, ops.basic_dual)


@pytest.fixture(scope="module")
def backend():
    return HostBackend()


@pytest.mark.parametrize("op", FLATFIELD_OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("shape", [(1, 3, (4, 5)), (3, 7, (6, 11))])
def test_kernel_matches_twin(backend, op, shape):
    p, t, image = shape
    gen = torch.Generator().manual_seed(p * 100 + t)
    state = ops._example_state(torch.device("cpu"), gen, p, t, image)
    images, flat, baseline, dark, dual, weight, mu = state
    if op is ops.basic_sparse:
        args = [images, flat, baseline, dark, dual, weight, mu, torch.empty_like(images)]
        outputs = (7,)
    else:
        sparse = 20 * (torch.rand(images.shape, generator=gen) - 0.5)
        args = [
            images,
            flat,
            baseline,
            dark,
            sparse,
            dual,
            mu,
            1.5 * mu,
            torch.empty_like(flat),
            torch.empty_like(flat),
        ]
        outputs = (5, 8, 9)
    expected = [a.clone() for a in args]
    op.twin(*expected)
    got = [a.clone() for a in args]
    op.launch(backend, *got)
    for index in outputs:
        torch.testing.assert_close(got[index], expected[index], rtol=1e-5, atol=1e-3)


def test_fit_through_host_kernels_equals_twin_fit(monkeypatch):
    truth = shaded_tiles(12, (32, 32), seed=1, dark_offset=100.0)
    images = truth.images.astype(np.float32)
    twin = fit_basic(images, get_darkfield=True, device="cpu")
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    calls = ops.basic_sparse.calls["host"], ops.basic_dual.calls["host"]
    fused = fit_basic(images, get_darkfield=True, device="cpu")
    assert ops.basic_sparse.calls["host"] > calls[0] and ops.basic_dual.calls["host"] > calls[1]
    np.testing.assert_allclose(fused.flatfield, twin.flatfield, atol=2e-4)
    np.testing.assert_allclose(fused.darkfield, twin.darkfield, atol=0.05 * twin.darkfield.std())
    assert fused.converged == twin.converged


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
def test_nvcc_compiles_to_ptx():
    ok, log = nvcc_compile_check(ops.SOURCE)
    assert ok, log
