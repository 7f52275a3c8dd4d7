"""Flat-field (BaSiC): fused kernels against their twins and whole jobs on a real GPU.

Also the per-iteration budget of the ALM on the device: host syncs reported by
``torch.cuda.set_sync_debug_mode("warn")`` (ceiling 0 per iteration) and launches (12 without
the darkfield, 19 with it), and fits of several problems, autotune and correction on the GPU
against the CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

# (P, T, (m, n)): tiny, the kit's T = 50 and a 1000-tile fit at 128 x 128, odd sizes
FLATFIELD_SIZES = [(1, 3, (5, 7)), (2, 50, (128, 128)), (3, 7, (33, 65)), (1, 1000, (128, 128))]
SYNCS_PER_ITERATION = 0
"""Ceiling on host syncs per ALM iteration (the flags are read one iteration late, through a
CUDA event and pinned memory)."""
SYNCS_PER_PASS = 2
LAUNCHES = {False: 12, True: 19}


def _compare(op, args, kwargs):
    """Kernel (it must run, not the twin) against the twin on the GPU; tolerances 10 x the
    self-test's (sums over up to 1000 images of terms that FMA rounds differently)."""
    # tensors and AlmStates (the state ops' one argument) both clone
    expected = [a.clone() if hasattr(a, "clone") else a for a in args]
    op.twin(*expected, **kwargs)
    got = [a.clone() if hasattr(a, "clone") else a for a in args]
    op(*got, **kwargs)
    assert op.last_paths["cuda:0"].path == "kernel", op.path("cuda:0")
    for have, want in zip(op.outputs_of(got, kwargs), op.outputs_of(expected, kwargs), strict=True):
        torch.testing.assert_close(have, want, rtol=10 * op.rtol, atol=10 * op.atol, equal_nan=True)


@pytest.mark.parametrize("dark", [False, True], ids=["no-dark", "dark"])
@pytest.mark.parametrize("size", FLATFIELD_SIZES, ids=lambda s: f"p{s[0]}-t{s[1]}")
def test_flatfield_kernels_match_twins(gpu, size, dark):
    from napari_gpuscope.compute.flatfield import _examples
    from napari_gpuscope.compute.flatfield import _ops as ff

    p, t, image = size
    gen = torch.Generator().manual_seed(p + t)
    sparse_args, _ = _examples.sparse_example(gpu, gen, p, t, image)
    _compare(ff.basic_sparse, sparse_args, {})
    (dual,), dual_kw = _examples.dual_example(gpu, gen, p, t, image)
    if not dark:
        dual.pixel_sums = dual.pixel_sums[:, :1].contiguous()
    _compare(ff.basic_dual, [dual], dual_kw)
    for op in ff.OPS:
        assert not op.disabled_devices and not op.unavailable, op.path(gpu)


@pytest.mark.parametrize("dark", [False, True], ids=["no-dark", "dark"])
def test_flatfield_small_kernels_match_twins(gpu, dark):
    from napari_gpuscope.compute.flatfield import _ops as ff

    for seed in range(3):
        for op in (ff.basic_shrink, ff.basic_status, ff.basic_dark_shape, ff.basic_dark_finish):
            args, kwargs = op.example(gpu, torch.Generator().manual_seed(seed))
            args = list(args)
            if op is ff.basic_shrink:
                kwargs = {**kwargs, "with_y": dark}
            if op is ff.basic_status and not dark:
                args[0].totals = args[0].totals[:, :1].contiguous()
            _compare(op, args, kwargs)


@pytest.mark.parametrize("dark", [False, True], ids=["no-dark", "dark"])
def test_flatfield_fit_fused_equals_twin(gpu, monkeypatch, dark):
    from napari_gpuscope.compute.flatfield import fit_basic
    from napari_gpuscope.sample_data._shading import shaded_tiles

    tiles = shaded_tiles(200, (256, 256), seed=0, dark_offset=100.0).images
    fused = fit_basic(tiles, get_darkfield=dark, device=gpu)
    small = fit_basic(tiles[:40], get_darkfield=dark, working_size=64, device=gpu)
    monkeypatch.setenv("NAPARI_GPUSCOPE_NO_FUSED", "1")
    twin = fit_basic(tiles, get_darkfield=dark, device=gpu)
    np.testing.assert_allclose(fused.flatfield, twin.flatfield, atol=5e-4)
    assert fused.converged == twin.converged
    # and the CPU's fit (smaller: the CPU is slow)
    cpu = fit_basic(tiles[:40], get_darkfield=dark, working_size=64, device="cpu")
    np.testing.assert_allclose(small.flatfield, cpu.flatfield, atol=5e-4)


@pytest.mark.parametrize("dark", [False, True], ids=["no-dark", "dark"])
@pytest.mark.parametrize("t", [50, 1000])
def test_alm_iteration_syncs_and_launches(gpu, kit_record, t, dark):
    """Host syncs per ALM iteration (set_sync_debug_mode("warn"), counted warnings) and launches
    per iteration (fused kernels counted at CupyBackend.launch, torch operations by a dispatch
    mode), on (1, T, 128, 128)."""
    import kit_flatfield

    row = kit_flatfield.iteration_profile(gpu, t, dark)
    kit_record(f"flatfield_iteration_T{t}_{'dark' if dark else 'nodark'}", row)
    assert row["syncs_per_iteration"] <= SYNCS_PER_ITERATION, row
    assert row["syncs_per_pass_of_10"] <= SYNCS_PER_PASS, row
    assert row["launches_per_iteration"] <= LAUNCHES[dark], row
    assert row["async_copies_per_iteration"] == 1, row


def test_several_problems_freeze_on_their_own_on_gpu(gpu):
    """Four problems converging after different passes: the batch equals each alone (on the
    GPU), and the CPU's result."""
    from napari_gpuscope.compute.flatfield import fit_basic
    from napari_gpuscope.sample_data._shading import shaded_tiles

    stacks = [
        shaded_tiles(16, (24, 24), seed=1, vignetting=0.6).images,
        shaded_tiles(16, (24, 24), seed=4, vignetting=1.4).images,
        shaded_tiles(16, (24, 24), seed=5, read_noise=20.0, dark_offset=10.0).images,
        shaded_tiles(16, (24, 24), seed=3, cells=300.0).images,
    ]
    both = fit_basic(np.stack(stacks), batch_axis=0, device=gpu)
    cpu = fit_basic(np.stack(stacks), batch_axis=0, device="cpu")
    assert len(set(both.reweight_passes)) > 1
    for k, stack in enumerate(stacks):
        alone = fit_basic(stack, device=gpu)
        assert both.reweight_passes[k] == alone.reweight_passes[0]
        assert both.alm_iterations[k] == alone.alm_iterations[0]
        np.testing.assert_allclose(both.flatfield[k], alone.flatfield, atol=1e-5)
    np.testing.assert_allclose(both.flatfield, cpu.flatfield, atol=1e-3)
    assert both.converged == cpu.converged


def test_autotune_on_gpu_matches_cpu(gpu):
    from napari_gpuscope.compute.flatfield import autotune
    from napari_gpuscope.sample_data._shading import shaded_tiles

    tiles = shaded_tiles(40, (64, 64), seed=0).images
    candidates = (0.5, 1.0, 2.0, 4.0)
    on_gpu = autotune(tiles, candidates=candidates, device=gpu)
    on_cpu = autotune(tiles, candidates=candidates, device="cpu")
    assert on_gpu.smoothness_flatfield == on_cpu.smoothness_flatfield
    np.testing.assert_allclose(on_gpu.costs, on_cpu.costs, rtol=2e-2)
    np.testing.assert_allclose(on_gpu.profile.flatfield, on_cpu.profile.flatfield, atol=1e-3)


class _Store:
    """A non-NumPy destination (as zarr): only __setitem__ and a shape."""

    def __init__(self, shape, dtype):
        self.data = np.zeros(shape, dtype)
        self.shape = shape

    def __setitem__(self, key, value):
        self.data[key] = value


def test_correction_on_gpu_equals_cpu(gpu, tmp_path):
    from napari_gpuscope.compute.flatfield import ShadingProfile, correct
    from napari_gpuscope.sample_data._shading import shaded_tiles

    truth = shaded_tiles(30, (96, 80), seed=2, dark_offset=100.0)
    profile = ShadingProfile.from_arrays(truth.flatfield, truth.darkfield)
    reference = correct(truth.images, profile, device="cpu")
    got = correct(truth.images, profile, chunk_frames=7, device=gpu)
    np.testing.assert_allclose(got, reference, rtol=1e-6, atol=1e-4)
    memmap = np.lib.format.open_memmap(tmp_path / "c.npy", "w+", np.uint16, truth.images.shape)
    correct(truth.images, profile, dtype="uint16", out=memmap, chunk_frames=9, device=gpu)
    expected = np.clip(np.round(reference), 0, 65535).astype(np.uint16)
    assert np.abs(memmap.astype(np.int32) - expected).max() <= 1
    store = _Store(truth.images.shape, np.float32)
    correct(truth.images, profile, out=store, device=gpu)
    np.testing.assert_allclose(store.data, reference, rtol=1e-6, atol=1e-4)
    planes = np.stack([truth.images, truth.images[::-1]], axis=1)  # (T, Z, Y, X)
    strided = correct(planes, profile, batch_axis=1, device=gpu)
    np.testing.assert_allclose(strided[:, 0], reference, rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(strided[:, 1], reference[::-1], rtol=1e-6, atol=1e-4)
