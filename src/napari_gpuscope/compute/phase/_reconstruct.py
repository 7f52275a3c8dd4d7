"""Reconstruction of absorption and phase at known tilt: whole image, or tiles blended."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..jobs import run_job
from ..memory import DeviceMemoryError, plan_chunk, run_in_chunks
from ._inverse import NormalEquations, spectrum
from ._ops import normal_equations_op, tikhonov_solve_op
from ._optics import (
    FFT_WORK_PLANES,
    GRID_PLANES,
    GRID_TEMPORARIES,
    OpticsCache,
    OpticsKey,
    build_bytes,
    build_group,
    key_for,
    z_positions,
)
from ._params import PhaseParams
from ._tiles import TiltMap, blend_weights

__all__ = ["TV_PROX_ITERATIONS", "TV_RHO", "MemoryPlan", "Reconstructor"]

TV_RHO = 0.05
"""ADMM penalty of the TV option (in units of the Gram entries, which are ~1 per slice)."""
TV_PROX_ITERATIONS = 50
"""FGP iterations of each ADMM z-step, warm-started from the previous step's dual. Measured on
the tests' cells (128 and 256 px, TV strengths 2e-3 to 1e-2, 15 ADMM iterations): the certified
``tv.denoise`` z-steps that this replaces took 10-160 iterations each (150-1000 per solve) and
ended 0.004-0.008 rad from the exact ADMM result; 50 warm-started ones end 1e-5 to 3e-3 rad from
it, with no host round trip."""


@dataclass(frozen=True)
class MemoryPlan:
    """Device bytes of :meth:`Reconstructor.system` for ``c`` slices at once (and the solve).

    ``peak(c) = stored + c * stored_per_slice + max(setup, min(c, build_group) * build_per_slice,
    solve, c * per_slice + sums)``: what the call keeps (the optics it makes and, per slice,
    the transfer functions and defocus spectra it builds), plus the largest of its passes, which
    follow one another: making the grid and illumination pupil, the transfer-function build (a
    group of slices at a time), the solve, and the data of ``c`` slices (the contrast as a
    complex array, its FFT and the FFT's work area) with the normal equations (one set, two
    while the chunks are summed).
    """

    stored: int
    stored_per_slice: int
    setup: int
    build_per_slice: int
    build_group: int
    solve: int
    per_slice: int
    sums: int
    keep: bool
    """Whether the built transfer functions (and defocus spectra) stay in the cache."""

    def peak(self, slices: int) -> int:
        """Planned device bytes with ``slices`` slices per chunk."""
        build = min(slices, self.build_group) * self.build_per_slice
        passes = max(self.setup, build, self.solve, slices * self.per_slice + self.sums)
        return self.stored + slices * self.stored_per_slice + passes

    def chunk(self, n_z: int, device: Any, budget: int | None, what: str) -> int:
        """The most slices (<= ``n_z``) whose :meth:`peak` fits the usable memory.

        Raises :class:`~napari_gpuscope.compute.memory.DeviceMemoryError` when one does not.
        """
        usable = plan_chunk(2**62, 1, device, budget=budget, what=what)  # bytes, as items
        if self.peak(1) > usable:
            plan_chunk(1, self.peak(1), device, budget=budget, what=what)  # raises, with advice
        low, high = 1, n_z
        while low < high:  # peak grows with the chunk
            middle = (low + high + 1) // 2
            low, high = (middle, high) if self.peak(middle) <= usable else (low, middle - 1)
        return low


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
    plan: MemoryPlan | None = None
    """The memory plan of the latest :meth:`system`."""

    def key(self, shape: tuple[int, int]) -> OpticsKey:
        """Optics key of a ``(Y, X)`` region on the data's device."""
        return key_for(self.params, shape, self.data.device)

    def z(self, focus: float = 0.0) -> torch.Tensor:
        """Slice positions of the stack for a focus offset (slices), in model units.

        On the host: they key the optics cache, and a device copy read back for that would
        wait for the device (the build copies them over when it needs them).
        """
        p = self.params
        z = z_positions(
            self.data.shape[-3],
            p.z_pixel_size,
            p.z_focus_offset + focus,
            descending=p.z_order == "descending",
            device="cpu",
        )
        return -z if p.invert_phase_contrast else z

    def memory_plan(
        self,
        shape: tuple[int, int],
        zenith: float,
        azimuth: float,
        focus: float = 0.0,
        *,
        keep: bool = True,
    ) -> MemoryPlan:
        """The device bytes :meth:`system` needs for a ``(h, w)`` region at one tilt.

        Counted from the arrays the code allocates (``tests/compute/test_phase_memory.py``
        checks it against the allocator on the CPU, the GPU kit against CUDA's peak).
        ``keep=False``: the transfer functions are built chunk by chunk and dropped.
        """
        key = self.key(shape)
        z = self.z(focus)
        plane = key.shape[0] * key.shape[1]
        oversampled = plane * key.factor**2
        complex_plane = 8 * plane
        per_slice = complex_plane * (2 + FFT_WORK_PLANES)  # contrast, spectrum, FFT work
        if not normal_equations_op.prepare(self.data.device):
            per_slice += 3 * complex_plane  # the twin's products over the slices
        sums = NormalEquations.BYTES_PER_ELEMENT * plane
        solve = sums + self.solve_bytes(plane)
        if keep and self.cache.has(key, z, zenith, azimuth):
            return MemoryPlan(0, 0, 0, 0, 1, solve, per_slice, sums, keep=True)
        stored = setup = 0
        if not self.cache.has_grid(key):
            stored += GRID_PLANES * 4 * oversampled
            setup = GRID_TEMPORARIES * 4 * oversampled
        if not self.cache.has_source(key, zenith, azimuth):
            stored += 4 * oversampled
            setup = GRID_TEMPORARIES * 4 * oversampled
        transfer = 2 * complex_plane  # absorption and phase TFs of a slice
        group = build_group(key)
        if keep:
            spectra = 0 if self.cache.has_spectra(key, z) else 8 * oversampled
            build = build_bytes(key, transient_spectra=False)
            return MemoryPlan(
                stored, transfer + spectra, setup, build, group, solve, per_slice, sums, True
            )
        # Chunks: a chunk's transfer functions live until its sums are added; two sets of sums.
        build = build_bytes(key, transient_spectra=True)
        return MemoryPlan(stored, transfer, setup, build, group, solve, per_slice, 2 * sums, False)

    def solve_bytes(self, plane: int) -> int:
        """Device bytes of :meth:`solve` for a region of ``plane`` pixels, beyond its normal
        equations: the two spectra, two inverse FFTs and their work area; the ADMM of the TV
        option adds its state and one z-step (:func:`_admm_bytes`)."""
        tikhonov = 8 * plane * (4 + FFT_WORK_PLANES)
        if not tikhonov_solve_op.prepare(self.data.device):
            tikhonov += 8 * plane * 6  # the twin's products and quotients
        if self.params.regularizer != "tv":
            return tikhonov
        return max(tikhonov, _admm_bytes(plane))

    def system(
        self, stack: torch.Tensor, zenith: float, azimuth: float, focus: float = 0.0
    ) -> NormalEquations:
        """The normal equations of one region ``(Z, h, w)`` at one tilt.

        They are sums over the slices, so slices are processed in chunks planned from the free
        device memory (:meth:`memory_plan`; retried smaller on an out-of-memory error); the
        sums of the chunks are the unchunked ones up to float32 summation order. When every
        slice fits at once, the transfer functions stay in the optics cache (next time this
        region, tilt and slices cost no optics at all); chunked, they are built per chunk and
        dropped.
        """
        shape = (int(stack.shape[-2]), int(stack.shape[-1]))
        key = self.key(shape)
        z = self.z(focus)
        n_z = int(stack.shape[-3])
        what = f"the phase transfer functions of a {shape[0]} x {shape[1]} region"
        device = stack.device
        plan = self.memory_plan(shape, zenith, azimuth, focus)
        fits = plan.keep and self.cache.limit(device) >= plan.stored_per_slice * n_z
        if fits:
            try:
                fits = plan.chunk(n_z, device, self.memory_budget, what) == n_z
            except DeviceMemoryError:
                fits = False
        if not fits:
            plan = self.memory_plan(shape, zenith, azimuth, focus, keep=False)
        chunk = plan.chunk(n_z, device, self.memory_budget, what)
        self.plan = plan
        sums: list[NormalEquations] = []

        def process(start: int, stop: int):
            keep = plan.keep and (start, stop) == (0, n_z)
            tf = self.cache.transfer_functions(key, z[start:stop], zenith, azimuth, keep=keep)
            part = NormalEquations.build(spectrum(stack[start:stop]), tf.absorption, tf.phase)
            del tf
            if sums:
                sums[0].add_(part)
            else:
                sums.append(part)
            return
            yield  # a job without progress of its own

        per_item = plan.stored_per_slice + plan.per_slice
        self.chunks = run_job(
            run_in_chunks(
                n_z,
                chunk,
                process,
                device=device,
                bytes_per_item=per_item,
                fixed_bytes=plan.peak(1) - per_item,
                budget=self.memory_budget,
                what=what,
            )
        )
        return sums[0]

    def solve(
        self, system: NormalEquations, regularization: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Absorption and phase ``(h, w)`` of one region (Tikhonov, or ADMM-TV on the phase)."""
        p = self.params
        reg = p.regularization if regularization is None else regularization
        if p.regularizer == "tv":
            a_hat, phase = admm_tv(system, reg, p.tv_strength, p.tv_iterations)
            return torch.fft.ifft2(a_hat).real, phase
        a_hat, p_hat = system.solve(reg)
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


def admm_tv(
    system: NormalEquations,
    reg: float,
    strength: float,
    iterations: int,
    *,
    prox_iterations: int = TV_PROX_ITERATIONS,
    warm_start: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ADMM for ``1/2 |H x - d|^2 + reg/2 |x|^2 + strength TV(phase)`` (split ``z = phase``).

    The x-step is the same closed-form 2x2 solve with ``rho`` added to the phase diagonal and
    ``rho FFT(z - u)`` to its right-hand side; the z-step is the TV proximal step
    (:func:`~napari_gpuscope.compute.tv.prox`, ``prox_iterations`` FGP iterations, warm-started
    from the previous z-step's dual unless ``warm_start=False``) with weight
    ``strength / rho``. Everything stays on the device: no host copy or synchronisation
    however many ``iterations``. Returns the absorption spectrum and the phase ``z``.
    """
    from .. import tv

    a_hat, p_hat = system.solve(reg)
    z = torch.fft.ifft2(p_hat).real.contiguous()
    del p_hat
    u = torch.zeros_like(z)
    shifted = NormalEquations(
        system.g_aa, system.g_pp + TV_RHO, system.g_ap, system.b_a, system.b_p
    )
    dual = z.new_zeros((2, *z.shape)) if warm_start else None
    weight = strength / TV_RHO
    for _ in range(iterations):
        shifted.b_p = torch.add(system.b_p, torch.fft.fft2(z - u), alpha=TV_RHO)
        a_hat, p_hat = shifted.solve(reg)
        phase = torch.fft.ifft2(p_hat).real
        del p_hat
        z = tv.prox(phase + u, weight, iterations=prox_iterations, dual=dual)
        u.add_(phase).sub_(z)
        del phase
    return a_hat, z


def _admm_bytes(plane: int) -> int:
    """Device bytes of :func:`admm_tv` beyond the normal equations, for ``plane`` pixels: its
    state (the shifted diagonal, ``z``, ``u``, the dual) and the larger of its two steps: the
    x-step's right-hand side (the residual, its complex copy, spectrum and FFT work, the new
    right-hand side) or the z-step (the x-step's spectra, the inverse FFT and its work area,
    the TV target and the proximal step's fields, :func:`~napari_gpuscope.compute.tv._prox.
    prox_bytes`)."""
    from ..tv._prox import prox_bytes

    real, complex_ = 4 * plane, 8 * plane
    state = real * (1 + 2 + 2)
    x_step = real + complex_ * (3 + FFT_WORK_PLANES)
    z_step = complex_ * (2 + 1 + FFT_WORK_PLANES) + real + prox_bytes(plane, 2, warm=True)
    return state + complex_ + max(x_step, z_step)


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
