"""Reconstruction of absorption and phase at known tilt: whole image, or tiles blended."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from .._types import Device
from ..fourier import fft2, ifft2
from ..jobs import run_job
from ..memory import DeviceMemoryError, run_in_chunks
from ..tv._fgp import FUSED_OPS as TV_FUSED_OPS
from ._admm import TV_PROX_ITERATIONS, TV_RHO, admm_tv
from ._auto_regularization import (
    RegularizationStats,
    data_energy,
    select_regularization,
    stats_bytes,
)
from ._auto_tv import SEARCH_BYTES, SEARCH_SIZE, TVStrengthChoice, search_region, select_tv_strength
from ._inverse import NormalEquations, spectrum
from ._memory import SUMS_PER_ELEMENT, MemoryPlan, Pass, admm_passes, solve_passes
from ._ops import normal_equations_op, tikhonov_solve_op
from ._optics import (
    GRID_PLANES,
    GRID_TEMPORARIES,
    OpticsCache,
    OpticsKey,
    build_group,
    key_for,
    z_positions,
)
from ._params import PhaseParams
from ._regularization_ops import regularization_components_op
from ._tiles import TileGrid, TiltMap, blend_weights

__all__ = ["TV_PROX_ITERATIONS", "TV_RHO", "MemoryPlan", "Reconstructor", "admm_tv"]


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
    gather_stats: bool = False
    """Give every system the statistics of the automatic regularization even when the
    parameters fix it (a solver whose regularization may become "auto" later)."""
    chosen_regularization: float | None = None
    """The regularization the latest automatic solve chose (None: none was automatic)."""
    tv_choice: TVStrengthChoice | None = None
    """The TV strength the latest automatic TV solve chose, and its search (None: none was
    automatic)."""
    _tv_memo: tuple | None = field(default=None, repr=False)
    """The latest search: what it was for (reg, iterations, tilt, system) and its choice; a
    solver's previews at the same values reuse it instead of solving the crop again."""

    @property
    def needs_stats(self) -> bool:
        """Whether :meth:`system` gathers the statistics of the automatic choices."""
        return self.gather_stats or self.chooses_from_data

    @property
    def chooses_from_data(self) -> bool:
        """Whether a value is chosen from the data: the regularization, or the TV strength of
        the TV solve (a Tikhonov solve has none, whatever ``tv_strength`` holds)."""
        p = self.params
        auto_tv = p.regularizer == "tv" and p.tv_strength is None
        return p.regularization is None or auto_tv

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
            device=None,  # the host
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
        """The device bytes :meth:`system` and :meth:`solve` need for a ``(h, w)`` region.

        Counted from the arrays the code allocates (:mod:`._memory`). ``keep=False``: the
        transfer functions are built chunk by chunk and dropped.
        """
        key = self.key(shape)
        z = self.z(focus)
        device = self.data.device
        plane = key.shape[0] * key.shape[1]
        oversampled = plane * key.factor**2
        complex_plane, complex_over = 8 * plane, 8 * oversampled
        sums = SUMS_PER_ELEMENT * plane
        held = 0 if keep else sums  # the running sums while the next chunk is summed
        twin = 0 if normal_equations_op.prepare(device) else 3 * complex_plane
        passes = {
            "spectrum": Pass(fixed=held, per_slice=2 * complex_plane, fft_per_slice=complex_plane),
            "sums": Pass(fixed=held + sums, per_slice=complex_plane + twin),
        }
        if self.params.regularizer == "tv":
            solve = admm_passes(plane, fused_tv=all(op.prepare(device) for op in TV_FUSED_OPS))
        else:
            solve = solve_passes(plane, fused=tikhonov_solve_op.prepare(device))
        for name, step in solve.items():
            passes[name] = Pass(fixed=sums + step.fixed, fft=step.fft)
        if self.needs_stats:
            fused = regularization_components_op.prepare(device)
            passes["auto regularization"] = Pass(fixed=sums + stats_bytes(plane, fused=fused))
        if self.params.regularizer == "tv" and self.params.tv_strength is None:
            # The search: on a crop (its own sums, not its optics' build) or on this region.
            search = min(plane, SEARCH_SIZE**2)
            crop = 0 if search == plane else SUMS_PER_ELEMENT * search
            steps = admm_passes(search, fused_tv=all(op.prepare(device) for op in TV_FUSED_OPS))
            admm = max(step.fixed for step in steps.values())
            passes["auto TV strength"] = Pass(fixed=sums + crop + max(admm, SEARCH_BYTES * search))
        if keep and self.cache.has(key, z, zenith, azimuth):
            return MemoryPlan(0, 0, passes, keep=True)
        stored = 0
        if not self.cache.has_grid(key):
            stored += GRID_PLANES * 4 * oversampled
        if not (self.cache.has_grid(key) and self.cache.has_source(key, zenith, azimuth)):
            stored += 4 * oversampled
            passes["setup"] = Pass(fixed=GRID_TEMPORARIES * 4 * oversampled)
        stored_per_slice = 2 * complex_plane  # the absorption and phase transfer functions
        spectra = "transient"
        if keep:
            spectra = "cached" if self.cache.has_spectra(key, z) else "kept"
            stored_per_slice += complex_over if spectra == "kept" else 0
        arrays = 3 if spectra == "transient" else 2
        passes["build"] = Pass(
            fixed=held,
            per_slice=arrays * complex_over,
            fft_per_slice=complex_over,
            group=build_group(key),
        )
        return MemoryPlan(stored, stored_per_slice, passes, keep=keep)

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
        fits = self.cache.limit(device) >= plan.stored_per_slice * n_z
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

        per_item = plan.peak(2) - plan.peak(1)
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
        if self.needs_stats:
            # The sums are complete; one more read of the stack gives its energy.
            sums[0].stats = RegularizationStats.of(sums[0], data_energy(stack), n_z)
        return sums[0]

    def regularization_for(self, systems: Sequence[NormalEquations]) -> float:
        """The params' regularization, or the automatic choice for these systems (one value
        for all the tiles of an image: their statistics add up); noted in
        :attr:`chosen_regularization`."""
        if self.params.regularization is not None:
            return self.params.regularization
        if any(system.stats is None for system in systems):
            raise ValueError("the automatic regularization needs systems built with stats")
        total = RegularizationStats.total([s.stats for s in systems if s.stats is not None])
        self.chosen_regularization = select_regularization(total)
        return self.chosen_regularization

    def tv_strength_for(
        self,
        systems: Sequence[NormalEquations],
        reg: float,
        tilt: TiltMap | None = None,
    ) -> float:
        """The params' TV strength, or the automatic choice (:mod:`._auto_tv`) for these
        systems at ``reg``, noted in :attr:`tv_choice`.

        The search solves a central crop of at most ``SEARCH_SIZE`` pixels a side at the tilt
        of ``tilt``'s tile nearest the centre; without ``tilt``, the middle system itself.
        """
        p = self.params
        if p.regularizer != "tv" or p.tv_strength is not None:
            return p.tv_strength if p.tv_strength is not None else 0.0
        system = systems[len(systems) // 2]
        memo = self._tv_memo
        if (
            memo is not None
            and memo[:2] == (float(reg), p.tv_iterations)
            and memo[2] is tilt
            and memo[3] is system
        ):
            self.tv_choice = memo[4]  # the search is deterministic: the same systems, reg
            return self.tv_choice.strength
        middle = system
        if tilt is not None:
            height, width = (int(n) for n in self.data.shape[-2:])
            if tilt.grid.count > 1 or max(height, width) > SEARCH_SIZE:
                system = self._search_system(tilt)
        stats = system.stats
        if stats is None:
            raise ValueError("the automatic TV strength needs systems built with stats")

        def solve(strength: float) -> tuple[torch.Tensor, torch.Tensor]:
            a_hat, phase = admm_tv(system, reg, strength, p.tv_iterations)
            return a_hat, fft2(phase)

        self.tv_choice = select_tv_strength(system, stats, reg, solve)
        self._tv_memo = (float(reg), p.tv_iterations, tilt, middle, self.tv_choice)
        return self.tv_choice.strength

    def _search_system(self, tilt: TiltMap) -> NormalEquations:
        """The normal equations (with statistics) of the central crop the TV search solves."""
        ys, xs, zenith, azimuth, focus = search_region(tilt)
        chunks, plan, gather = self.chunks, self.plan, self.gather_stats
        self.gather_stats = True
        try:
            return self.system(self.data[:, ys, xs], zenith, azimuth, focus)
        finally:  # what the result reports is the image's own build
            self.chunks, self.plan, self.gather_stats = chunks, plan, gather

    def solve(
        self,
        system: NormalEquations,
        regularization: float | None = None,
        tv_strength: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Absorption and phase ``(h, w)`` of one region (Tikhonov, or ADMM-TV on the phase);
        an automatic regularization or TV strength is chosen for this system alone."""
        p = self.params
        reg = self.regularization_for([system]) if regularization is None else regularization
        if p.regularizer == "tv":
            if tv_strength is None:
                tv_strength = self.tv_strength_for([system], reg)
            a_hat, phase = admm_tv(system, reg, tv_strength, p.tv_iterations)
            return ifft2(a_hat).real, phase
        a_hat, p_hat = system.solve(reg)
        return ifft2(a_hat).real, ifft2(p_hat).real

    def whole(self, zenith: float, azimuth: float, focus: float = 0.0):
        """Absorption and phase of the whole image at one tilt (its regularization and TV
        strength automatic when the params say so)."""
        system = self.system(self.data, zenith, azimuth, focus)
        reg = self.regularization_for([system])
        shape = (int(self.data.shape[-2]), int(self.data.shape[-1]))
        grid = TileGrid(shape, (1, 1), shape, (0,), (0,))
        tilt = TiltMap.uniform(grid, zenith, azimuth, focus)
        strength = self.tv_strength_for([system], reg, tilt)
        return self.solve(system, reg, strength)

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
        systems = systems or self.tile_systems(tilt)
        reg = strength = None
        if self.chooses_from_data:
            # One value for the blended image: every tile's statistics first (the systems are
            # kept until all are solved, as the dock's solver keeps them).
            systems = list(systems)
            reg = self.regularization_for(systems)
            strength = self.tv_strength_for(systems, reg, tilt)
        for index, system in enumerate(systems):
            blend.add(index, *self.solve(system, reg, strength))
            yield index, None
        yield -1, blend.result()


class _Blend:
    """Weighted sum of overlapping tile solutions (smooth weights, normalised at the end)."""

    def __init__(self, tilt: TiltMap, device: Device) -> None:
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


def solve_all(
    recon: Reconstructor,
    tilt: TiltMap,
    systems: list[NormalEquations],
    regularization: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorption and phase from prepared systems (one, or one per tile of ``tilt``); an
    automatic regularization and TV strength are chosen once for all of them."""
    if regularization is None:
        regularization = recon.regularization_for(systems)
    strength = recon.tv_strength_for(systems, regularization, tilt)
    if tilt.grid.count == 1:
        return recon.solve(systems[0], regularization, strength)
    blend = _Blend(tilt, recon.data.device)
    for index, system in enumerate(systems):
        blend.add(index, *recon.solve(system, regularization, strength))
    return blend.result()
