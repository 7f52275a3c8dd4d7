"""Shared cases of the automatic phase tests: cells from Abbe's model (the independent forward
model of ``phase_abbe.py``) at 128 px, a small system from the plugin's own model for the
selectors' sums, and the correlation both tests score with."""

from __future__ import annotations

import numpy as np
import torch
from phase_abbe import abbe_stack
from scipy.ndimage import gaussian_filter

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.phase._inverse import NormalEquations, spectrum
from napari_gpuscope.compute.phase._optics import OpticsCache, key_for, z_positions
from napari_gpuscope.sample_data.phase import OPTICS

N, N_Z = 128, 7


def pearson(a, b) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def cells(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping elliptical cells, up to ~0.8 rad of phase, absorption 3 % of it."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:N, :N]
    ph = np.zeros((N, N))
    for _ in range(10):
        cy, cx = rng.uniform(12, N - 12, 2)
        a, b = rng.uniform(6, 13), rng.uniform(4, 9)
        ph += rng.uniform(0.2, 0.4) * np.sqrt(
            np.clip(1 - ((xx - cx) / a) ** 2 - ((yy - cy) / b) ** 2, 0, None)
        )
    ph = gaussian_filter(ph, 1.0)
    return ph, 0.03 * ph


def cells_stack(zenith: float, azimuth: float) -> tuple[np.ndarray, np.ndarray, tuple]:
    """A noise-free stack of :func:`cells` from Abbe's model, the true phase and the tilt."""
    ph, ab = cells()
    optics = {k: v for k, v in OPTICS.items() if k != "z_pixel_size"}
    z = (N_Z // 2 - np.arange(N_Z)) * OPTICS["z_pixel_size"]  # slice 0 on top
    stack = abbe_stack(
        ph, ab, **optics, z_positions=z, tilt_zenith=zenith, tilt_azimuth=azimuth, source_step=5
    )
    return stack, ph, (zenith, azimuth)


def small_system(seed=0, tilt=(0.1, 0.7), shape=(48, 40)):
    rng = np.random.default_rng(seed)
    params = phase.PhaseParams(**OPTICS)
    truth = gaussian_filter(rng.standard_normal(shape), 3.0)
    stack = phase.simulate_stack(
        truth, 0.1 * truth, params, 5, tilt_zenith=tilt[0], tilt_azimuth=tilt[1]
    )
    stack = (stack + 0.01 * rng.standard_normal(stack.shape)).astype(np.float32)
    data = torch.from_numpy(stack)
    key = key_for(params, shape, data.device)
    z = z_positions(5, params.z_pixel_size, 0.0, descending=True)
    tf = OpticsCache().transfer_functions(key, z, *tilt)
    d_hat = spectrum(data)
    system = NormalEquations.build(d_hat, tf.absorption, tf.phase)
    return data, d_hat, tf, system
