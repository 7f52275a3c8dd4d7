"""Phase: fused kernels against their twins and whole jobs on a real GPU."""

from __future__ import annotations

import math

import pytest
import torch

from napari_gpuscope.compute.phase import _ops as phase_ops

pytestmark = pytest.mark.gpu


PHASE_CASES = [(1, 21, 64, 64), (3, 7, 37, 53), (64, 21, 128, 128), (1, 21, 2048, 2048)]


@pytest.mark.parametrize("case", PHASE_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_phase_kernels_match_twins(gpu, case, sign):
    gen = torch.Generator(device=gpu).manual_seed(0)
    batch, n_z, ny, nx = case
    data, a, p = (torch.randn((batch, n_z, ny, nx, 2), device=gpu, generator=gen) for _ in range(3))
    outs = [torch.full((batch, ny, nx), math.nan, device=gpu) for _ in range(2)]
    outs += [torch.full((batch, ny, nx, 2), math.nan, device=gpu) for _ in range(3)]
    twins = [torch.empty_like(o) for o in outs]
    phase_ops.normal_equations_op(data, a, p, *outs, sign)
    assert phase_ops.normal_equations_op.path(gpu).path == "kernel"
    phase_ops._normal_equations_views(data, a, p, *twins, sign)
    scale = float(n_z)
    for kernel, twin in zip(outs, twins, strict=True):
        torch.testing.assert_close(kernel, twin, rtol=1e-4, atol=1e-4 * scale)
    g_aa, g_pp, g_ap, b_a, b_p = outs
    solved = [torch.empty_like(b_a), torch.empty_like(b_p)]
    twin_solved = [torch.empty_like(b_a), torch.empty_like(b_p)]
    phase_ops.tikhonov_solve_op(g_aa, g_pp, g_ap, b_a, b_p, *solved, 1e-3)
    phase_ops._tikhonov_views(g_aa, g_pp, g_ap, b_a, b_p, *twin_solved, 1e-3)
    for kernel, twin in zip(solved, twin_solved, strict=True):
        torch.testing.assert_close(kernel, twin, rtol=1e-3, atol=1e-4)


def test_phase_reconstruction_kernels_equal_twins_end_to_end(gpu, monkeypatch):
    from napari_gpuscope.compute import phase

    rng = torch.Generator().manual_seed(1)
    stack = (1 + 0.05 * torch.randn((21, 512, 512), generator=rng)).numpy()
    optics = {"wavelength": 0.45, "yx_pixel_size": 0.325, "z_pixel_size": 1.0}
    optics |= {"na_illumination": 0.4, "na_detection": 0.55, "index_of_refraction": 1.0}
    fused = phase.reconstruct(stack, **optics, tilt_zenith=0.2, tilt_azimuth=1.0, device=gpu)
    assert "kernel" in fused.kernel_paths["phase_normal_equations"]
    monkeypatch.setenv("NAPARI_GPUSCOPE_NO_FUSED", "1")
    twin = phase.reconstruct(stack, **optics, tilt_zenith=0.2, tilt_azimuth=1.0, device=gpu)
    scale = float(abs(twin.phase).max())
    assert float(abs(fused.phase - twin.phase).max()) <= 1e-4 * scale
