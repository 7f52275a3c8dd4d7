"""Reconstruction of absorption and phase at known tilt: whole image, or tiles blended."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..jobs import run_job
from ..memory import plan_chunk, run_in_chunks
from ._inverse import NormalEquations, normalize_stack
from ._optics import OpticsCache, OpticsKey, key_for, z_positions
from ._params import PhaseParams
from ._tiles import TiltMap, blend_weights

__all__ = ["TV_ITERATIONS", "TV_RHO", "Reconstructor"]

TV_RHO = 0.05
"""ADMM penalty of the TV option (in units of the Gram entries, which are ~1 per slice)."""
TV_ITERATIONS = 15
"""ADMM iterations of the TV option (each solves one TV denoising of the phase)."""


@dataclass
class Reconstructor:
    """What one reconstruction shares: the prepared stack, the optics and their cache.

    Parameters
    ----------
    data : torch.Tensor
        ``(Z, Y, X)`` float32 on the device (the raw stack; normalised per tile or image).
    params : PhaseParams
        The parameters.
    cache : OpticsCache
        Device optics, reused between calls (the dock keeps one per device).
    """

    data: torch.Tensor
    params: PhaseParams
    cache: OpticsCache
    memory_budget: int | None = None
    chunks: int = 0
    """Slice chunks the latest :meth:`system` needed (1 when every slice fit at once)."""

    def key(self, shape: tuple[int, int]) -> OpticsKey:
        """Optics key of a ``(Y, X)`` region on the data's device."""
        return key_for(self.params, shape, self.data.device)

    def z(self, focus: float = 0.0) -> torch.Tensor:
        """Slice positions of the stack for a focus offset (slices), in model units."""
        p = self.params
        z = z_positions(
            self.data.shape[-3],
            p.z_pixel_size,
            p.z_focus_offset + focus,
            descending=p.z_order == "descending",
            device=self.data.device,
        )
        return -z if p.invert_phase_contrast else z

    def system(
        self, stack: torch.Tensor, zenith: float, azimuth: float, focus: float = 0.0
    ) -> NormalEquations:
        """The normal equations of one region ``(Z, h, w)`` at one tilt.

        They are sums over the slices, so slices are processed in chunks planned from the free
        device memory (and retried smaller on an out-of-memory error); the sums of the chunks
        are the unchunked ones up to float32 summation order.
        """
        key = self.key(tuple(stack.shape[-2:]))
        z = self.z(focus)
        contrast = normalize_stack(stack)
        n_z = int(stack.shape[-3])
        plane = key.shape[0] * key.shape[1]
        oversampled = plane * key.factor**2
        # Per slice: defocused pupil and its FFT (cached), FFT(S Q), the two correlations and
        # the cropped TFs, the data spectrum; fixed: the grid (6 planes), the sums (8 planes).
        per_slice = 8 * (5 * oversampled + 4 * plane)
        fixed = 4 * 6 * oversampled + 8 * 8 * plane
        what = f"the phase transfer functions of a {key.shape[0]} x {key.shape[1]} region"
        chunk = plan_chunk(
            n_z, per_slice, stack.device, fixed_bytes=fixed, budget=self.memory_budget, what=what
        )
        parts: list[NormalEquations] = []

        def process(start: int, stop: int):
            tf = self.cache.transfer_functions(key, z[start:stop], zenith, azimuth)
            data_hat = torch.fft.fft2(contrast[start:stop])
            parts.append(NormalEquations.build(data_hat, tf.absorption, tf.phase))
            return
            yield  # a job without progress of its own

        self.chunks = run_job(
            run_in_chunks(
                n_z,
                chunk,
                process,
                device=stack.device,
                bytes_per_item=per_slice,
                fixed_bytes=fixed,
                budget=self.memory_budget,
                what=what,
            )
        )
        total = parts[0]
        for part in parts[1:]:
            pairs = zip(total.fields(), part.fields(), strict=True)
            total = NormalEquations(*(a + b for a, b in pairs))
        return total

    def solve(self, system: NormalEquations, regularization: float | None = None):
        """Absorption and phase ``(h, w)`` of one region (Tikhonov, or ADMM-TV on the phase)."""
        p = self.params
        reg = p.regularization if regularization is None else regularization
        a_hat, p_hat = system.solve(reg)
        if p.regularizer == "tv":
            a_hat, p_hat = _admm_tv(system, reg, p.tv_strength, p_hat)
        return torch.fft.ifft2(a_hat).real, torch.fft.ifft2(p_hat).real

    def whole(self, zenith: float, azimuth: float, focus: float = 0.0):
        """Absorption and phase of the whole image at one tilt."""
        return self.solve(self.system(self.data, zenith, azimuth, focus))

    def tile_systems(self, tilt: TiltMap) -> Iterator[NormalEquations]:
        """The normal equations of every tile of ``tilt``, each at its own tilt."""
        zen, azi, foc = tilt.zenith.ravel(), tilt.azimuth.ravel(), tilt.focus.ravel()
        for index, (ys, xs) in enumerate(tilt.grid.boxes()):
            yield self.system(
                self.data[:, ys, xs], float(zen[index]), float(azi[index]), float(foc[index])
            )

    def tiles(
        self, tilt: TiltMap, systems: Iterator[NormalEquations] | None = None
    ) -> Iterator[tuple[int, tuple[torch.Tensor, torch.Tensor] | None]]:
        """Reconstruct tile by tile with each tile's tilt and blend smoothly.

        Yields the index of each finished tile (and ``None``), then ``(-1, (absorption,
        phase))`` with the blended result. ``systems`` reuses prepared normal equations.
        """
        blend = _Blend(tilt, self.data.device)
        for index, system in enumerate(systems or self.tile_systems(tilt)):
            blend.add(index, *self.solve(system))
            yield index, None
        yield -1, blend.result()


class _Blend:
    """Weighted sum of overlapping tile solutions (smooth weights, normalised at the end)."""

    def __init__(self, tilt: TiltMap, device: Any) -> None:
        self.boxes = tilt.grid.boxes()
        shape = tilt.grid.shape
        self.weights = blend_weights(tilt.grid, device)
        self.absorption = torch.zeros(shape, device=device)
        self.phase = torch.zeros(shape, device=device)
        self.total = torch.zeros(shape, device=device)

    def add(self, index: int, absorption: torch.Tensor, phase: torch.Tensor) -> None:
        ys, xs = self.boxes[index]
        # Each tile's phase has an arbitrary mean (the data cannot tell it): remove it so the
        # blend does not step between tiles.
        self.absorption[ys, xs] += self.weights * absorption
        self.phase[ys, xs] += self.weights * (phase - phase.mean())
        self.total[ys, xs] += self.weights

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.absorption / self.total, self.phase / self.total


def _admm_tv(
    system: NormalEquations, reg: float, strength: float, phase_hat: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """ADMM for ``1/2 |H x - d|^2 + reg/2 |x|^2 + strength TV(phase)`` (split ``z = phase``).

    The x-step is the same closed-form 2x2 solve with ``rho`` added to the phase diagonal and
    ``rho FFT(z - u)`` to its right-hand side; the z-step is TV denoising (the TV method's
    solver) with weight ``strength / rho``.
    """
    from .. import tv

    device = phase_hat.device
    phase = torch.fft.ifft2(phase_hat).real
    z = phase.clone()
    u = torch.zeros_like(phase)
    shifted = NormalEquations(
        system.g_aa, system.g_pp + TV_RHO, system.g_ap, system.b_a, system.b_p
    )
    a_hat = None
    for _ in range(TV_ITERATIONS):
        shifted.b_p = system.b_p + TV_RHO * torch.fft.fft2(z - u)
        a_hat, phase_hat = shifted.solve(reg)
        phase = torch.fft.ifft2(phase_hat).real
        target = (phase + u).cpu().numpy().astype(np.float32)
        z = torch.from_numpy(
            np.asarray(tv.denoise(target, strength / TV_RHO, device=_tv_device(device)))
        ).to(device)
        u = u + phase - z
    return a_hat, torch.fft.fft2(z)


def _tv_device(device: torch.device) -> Any:
    return "cpu" if device.type == "cpu" else device


def solve_all(
    recon: Reconstructor,
    tilt: TiltMap,
    systems: list[NormalEquations],
    regularization: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorption and phase from prepared systems (one, or one per tile of ``tilt``)."""
    if tilt.grid.count == 1:
        return recon.solve(systems[0], regularization)
    blend = _Blend(tilt, recon.data.device)
    for index, system in enumerate(systems):
        blend.add(index, *recon.solve(system, regularization))
    return blend.result()
