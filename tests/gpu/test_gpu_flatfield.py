"""Flat-field (BaSiC): fused kernels against their twins and whole jobs on a real GPU."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


FLATFIELD_SIZES = [(1, 3, (5, 7)), (2, 50, (128, 128)), (3, 7, (33, 65))]


@pytest.mark.parametrize("size", FLATFIELD_SIZES, ids=lambda s: f"p{s[0]}-t{s[1]}")
def test_flatfield_kernels_match_twins(gpu, size):
    from napari_gpuscope.compute.flatfield import _ops as ff

    p, t, image = size
    gen = torch.Generator().manual_seed(p + t)
    images, flat, baseline, dark, dual, weight, mu = ff._example_state(gpu, gen, p, t, image)
    sparse_args = [images, flat, baseline, dark, dual, weight, mu, torch.empty_like(images)]
    expected = [a.clone() for a in sparse_args]
    ff.basic_sparse.twin(*expected)
    ff.basic_sparse(*sparse_args)
    assert ff.basic_sparse.path(gpu).path == "kernel"
    torch.testing.assert_close(sparse_args[7], expected[7], rtol=1e-5, atol=1e-3)
    sparse = sparse_args[7]
    dual_args = [
        images,
        flat,
        baseline,
        dark,
        sparse,
        dual.clone(),
        mu,
        1.5 * mu,
        torch.empty_like(flat),
        torch.empty_like(flat),
    ]
    expected = [a.clone() for a in dual_args]
    ff.basic_dual.twin(*expected)
    ff.basic_dual(*dual_args)
    for index in (5, 8, 9):
        torch.testing.assert_close(dual_args[index], expected[index], rtol=1e-4, atol=1e-2)
    for op in (ff.basic_sparse, ff.basic_dual):
        assert not op.disabled_devices and not op.unavailable, op.path(gpu)


def test_flatfield_fit_fused_equals_twin(gpu, monkeypatch):
    import numpy as np

    from napari_gpuscope.compute.flatfield import fit_basic
    from napari_gpuscope.sample_data._shading import shaded_tiles

    tiles = shaded_tiles(200, (256, 256), seed=0, dark_offset=100.0).images
    fused = fit_basic(tiles, get_darkfield=True, device=gpu)
    monkeypatch.setenv("NAPARI_GPUSCOPE_NO_FUSED", "1")
    twin = fit_basic(tiles, get_darkfield=True, device=gpu)
    np.testing.assert_allclose(fused.flatfield, twin.flatfield, atol=5e-4)
    assert fused.converged == twin.converged
