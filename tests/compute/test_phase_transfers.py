"""Host round trips of phase, counted on the CPU (``phase_probes.HostTransfers``): each one waits
for the device on a GPU. The TV-regularised solve makes none however many ADMM iterations run
(the host-side ``tv.denoise`` per iteration it replaces made ~10 each: 162 at 15); a
tilt-optimiser iteration makes one (two after a rejected Newton step); a reconstruction a fixed
few, whatever its slices and tiles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from phase_probes import HostTransfers

from napari_gpuscope.compute import phase, tv
from napari_gpuscope.compute.phase._inverse import NormalEquations
from napari_gpuscope.compute.phase._reconstruct import TV_RHO, Reconstructor
from napari_gpuscope.sample_data.phase import OPTICS

AIR = OPTICS  # the samples' optics: air, NA 0.4 / 0.55, 0.45 µm light


def _stack(shape, seed=0, zenith=0.0):
    rng = np.random.default_rng(seed)
    params = phase.PhaseParams(**AIR)
    truth = np.zeros(shape[1:], np.float32)
    truth[shape[1] // 4 : shape[1] // 2, shape[2] // 3 : 2 * shape[2] // 3] = 0.5
    stack = phase.simulate_stack(truth, 0.03 * truth, params, shape[0], tilt_zenith=zenith)
    return (stack + 0.01 * rng.standard_normal(stack.shape)).astype(np.float32)


def host_side_admm(system, reg, strength, iterations):
    """The TV option as it was: every z-step a whole ``tv.denoise`` job through the host."""
    _, p_hat = system.solve(reg)
    z = torch.fft.ifft2(p_hat).real
    u = torch.zeros_like(z)
    shifted = NormalEquations(
        system.g_aa, system.g_pp + TV_RHO, system.g_ap, system.b_a, system.b_p
    )
    for _ in range(iterations):
        shifted.b_p = system.b_p + TV_RHO * torch.fft.fft2(z - u)
        _, p_hat = shifted.solve(reg)
        current = torch.fft.ifft2(p_hat).real
        target = (current + u).cpu().numpy().astype(np.float32)
        denoised = np.asarray(tv.denoise(target, strength / TV_RHO, device="cpu"))
        z = torch.from_numpy(denoised).to(current.device)
        u = u + current - z
    return z


def test_tv_solve_makes_no_host_round_trip_however_many_iterations():
    data = torch.from_numpy(_stack((7, 48, 48)))
    # A fixed regularization: the automatic one reads its choice back once (tested below).
    params = phase.PhaseParams(**AIR, regularizer="tv", tv_strength=2e-3, regularization=1e-3)
    cache = phase.OpticsCache()
    counts, old = {}, {}
    with torch.no_grad():
        for iterations in (5, 15, 30):
            with HostTransfers() as transfers:
                transfers.on_device(data)
                recon = Reconstructor(data, params.replace(tv_iterations=iterations), cache)
                system = recon.system(data, 0.0, 0.0)
                before = transfers.total
                recon.solve(system)
                counts[iterations] = transfers.total - before
                host_side_admm(system, params.regularization, params.tv_strength, iterations)
                old[iterations] = transfers.total - before - counts[iterations]
    assert counts == {5: 0, 15: 0, 30: 0}
    # the counter sees the old path's per-iteration copies, uploads and convergence reads
    assert old[30] - old[15] >= 3 * 15 and old[15] - old[5] >= 3 * 10, old


@pytest.mark.parametrize(
    ("optimizer", "per_iteration"),
    [("nadam", 1), ("newton", 2)],  # Newton: one more read after a rejected step
)
def test_a_tilt_iteration_reads_the_device_once(optimizer, per_iteration):
    stack = _stack((7, 64, 64), zenith=0.2)
    options = {**AIR, "optimizer": optimizer, "tilt_mode": "tiles", "tiles_y": 2, "tiles_x": 2}
    totals = {}
    for iterations in (3, 7):
        with HostTransfers() as transfers:
            result = phase.estimate_tilt(stack, **options, iterations=iterations, device="cpu")
        assert result.iterations == iterations
        totals[iterations] = transfers.total
    assert (totals[7] - totals[3]) / 4 <= per_iteration, totals
    # outside the iterations: the stack, its checks, the crop indices, the start values and,
    # after them, the one flag of the blank-stack check (TiltResult.not_measurable)
    assert totals[3] - 3 * per_iteration <= 5, totals


def test_a_reconstruction_reads_back_a_fixed_few_whatever_its_slices_and_tiles():
    cache = phase.OpticsCache()
    counts = {}
    for n_z, tiles in ((5, (1, 1)), (9, (1, 1)), (9, (3, 3))):
        stack = _stack((n_z, 64, 64))
        params = phase.PhaseParams(**AIR, tilt_zenith=0.1, tilt_azimuth=1.0)
        grid = phase.TileGrid.covering((64, 64), tiles, 0.25)
        tilt = phase.TiltMap.uniform(grid, 0.1, 1.0)
        with HostTransfers() as transfers:  # the cache's optics are device memory too
            phase.reconstruct(stack, params=params, tilt_map=tilt, optics_cache=cache, device="cpu")
            transfers.counts.clear()
            phase.reconstruct(stack, params=params, tilt_map=tilt, optics_cache=cache, device="cpu")
        counts[(n_z, tiles)] = dict(transfers.counts)
    first = counts[(5, (1, 1))]
    assert all(c == first for c in counts.values()), counts
    # the upload, one read of both input checks, the automatic regularization's statistics
    # (all tiles' at once), the two results
    assert first == {"upload": 1, "Tensor.tolist": 1, "Tensor.cpu": 1, "copy to host": 2}, first
