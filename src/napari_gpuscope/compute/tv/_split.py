"""Volumes split into chunks along their leading axis, solved as one problem.

Why halos alone are not enough. ROF is global: a flat region's level is the mean of the data
over all of it, so a chunk border's influence reaches as far as the plateaus do, and those grow
with the weight. Chunks solved independently with a halo of any fixed depth leave seams, and the
gap each chunk reports says nothing about the stitched image. Measured before this module: a
96 x 24 x 24 volume chunked at weight 1 reported a gap of 1e-4 while its energy exceeded the
optimum by 7.7e-3, with jumps of 0.041 at chunk borders.

FGP: the unchunked iterations, chunk by chunk. One FGP iteration reads, for each plane, the dual
of the planes next to it and nothing farther (``u = P_C(f + div z)`` looks one plane back, the
dual step one plane ahead), so errors from a chunk's artificial ends creep inwards by one plane
per iteration (two in the first iteration at the far end, whose divergence lacks the forward
coupling). ``h`` iterations of a chunk read with ``h + 2`` planes of halo therefore leave its
core, and the one plane beyond it that the certificate reads, exactly as the unchunked run would
have them, while the halos go stale. The host holds the dual ``y`` and the extrapolated ``z`` of
the whole slab; each *round* loads every chunk with its halos, runs ``h`` iterations with the
global momentum sequence, and stores its core (a core's last planes are stored only once the
next chunk has read them as its halo, so every chunk of a round starts from the same iteration).
The chunked run is therefore the unchunked FGP, iteration for iteration: same iterates (to
float32 rounding of the same operations), same stopping iteration (``h`` divides the check
interval), no seams. Rounds of ``h = 10`` iterations move the slab across the bus once per 10
iterations; tight memory shortens the rounds (``h`` = 5, 2 or 1) rather than the cores. The
rounds call the FGP steps of :mod:`._ops` directly: ``solve_fgp`` restarts its momentum on every
call, which would make a different (slower) algorithm.

The certificate of the returned image is computed in float64 on each chunk's core at every
check (:mod:`._certificate`): the image is ``P_C(f + div y)`` of the stitched dual and its
relative gap ``(P(u) - D(y)) / P(u)`` bounds ``(P(u) - P*) / P(u)`` exactly as for an unchunked
run. (A first design, block-coordinate ascent on the dual with warm-started chunk solves, cannot
be made exact with a black-box solver: the isotropic projection at a chunk's last plane also
shrinks the coupling to the next plane, which belongs to the neighbour, and the refinement then
stalled at a relative gap of ~8e-4 on noisy 3D phantoms at weight 0.5.)

Chambolle (scikit-image's algorithm and stopping rule, which has no notion of chunks) makes one
pass: each chunk, with a halo that grows with the weight relative to the noise
(:func:`~napari_gpuscope.compute.tv.halo`), is solved from its left neighbour's dual and writes
back its dual; the stitched result's gap is certified the same way.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..arrays import to_host
from ..chunking import Region, SplitSlab
from ..jobs import Job, Output, Progress, is_stop, scaled
from ..memory import DeviceMemoryError
from . import _certificate as certificate
from . import _ops as ops
from ._context import OUTPUT, SolveContext, StopAll, fraction_done
from ._solvers import CHECK_EVERY, relative_gaps

__all__ = ["FGP_HALO", "solve_split"]

_ROUND_LENGTHS = tuple(h for h in range(CHECK_EVERY, 0, -1) if CHECK_EVERY % h == 0)
FGP_HALO = _ROUND_LENGTHS[0] + 2
"""Halo planes of a split FGP solve: one round of ``CHECK_EVERY`` iterations, plus one plane
because a chunk's last plane lacks its forward coupling from the first iteration on, plus the
plane the certificate reads beyond the core."""


class _Stopped(Exception):
    """STOP arrived inside a pass: the pass ends there."""


def solve_split(context: SolveContext, slab: SplitSlab) -> Job[None]:
    """Solve a slab whose leading axis is split (see the module docstring); writes the output
    of the whole slab and accounts for it in ``context.totals``."""
    if context.params.method == "fgp":
        yield from _fgp(context, slab)
    else:
        yield from _chambolle(context, slab)


class _Slab:
    """The slab's host-side state and shape in the solver's ``(batch, coupled...)`` layout."""

    def __init__(self, context: SolveContext, slab: SplitSlab) -> None:
        extents = [s.stop - s.start for s in slab.core]
        self.batch = math.prod(extents[a] for a in context.layout.batch_axes)
        self.coupled = [extents[a] for a in context.layout.coupled_axes]
        self.planes = slab.planes
        d = len(context.layout.coupled_spacing)
        self.y = torch.zeros((d, self.batch, *self.coupled), dtype=torch.float32)
        self.primal = torch.zeros(self.batch, dtype=torch.float64)
        self.dual = torch.zeros(self.batch, dtype=torch.float64)

    @property
    def plane_voxels(self) -> int:
        return self.batch * math.prod(self.coupled[1:])

    def gaps(self) -> np.ndarray:
        return relative_gaps(self.primal - self.dual, self.primal).numpy()


def _fresh(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A contiguous copy on ``device`` (never a view of the host state, even on the CPU)."""
    copy = torch.empty(host.shape, dtype=host.dtype, device=device)
    copy.copy_(host)
    return copy


def _lead(region: Region, axis: int, read: bool = True) -> tuple[int, int]:
    part = (region.read if read else region.core)[axis]
    return part.start, part.stop


# --- FGP: the unchunked iterations, round by round ---------------------------------------------


def _fgp(context: SolveContext, slab: SplitSlab) -> Job[None]:
    halo = min(FGP_HALO, (slab.fits - 1) // 4)
    steps = next((h for h in _ROUND_LENGTHS if h + 2 <= halo), 0)
    if steps == 0:
        # A round needs a core plus two halos of 3 planes.
        needed = 7 * slab.bytes_per_plane
        available = slab.fits * slab.bytes_per_plane
        raise DeviceMemoryError(needed, available, "TV denoising of one chunk")
    slab.set_halo(steps + 2)
    yield from _Rounds(context, slab, steps).run()


class _Rounds:
    """FGP on a split slab, ``steps`` iterations per round (see the module docstring)."""

    def __init__(self, context: SolveContext, slab: SplitSlab, steps: int) -> None:
        self.context = context
        self.slab = slab
        self.steps = steps
        self.state = _Slab(context, slab)
        self.z = torch.zeros_like(self.state.y)
        spacing = context.layout.coupled_spacing
        self.inv_l2 = 1.0 / (4.0 * sum(s * s for s in spacing))
        self.t = 1.0
        self.target = 0  # the iteration the current round reaches
        self.momenta: list[float] = []
        self.check = False
        self.gap = math.inf
        self.first_gap = math.inf
        self.progress = 0.0
        self.reached = 0  # end of the last core stored in the current round
        # New dual of planes a later chunk of the round still reads as its (old) halo.
        self.pending: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def run(self) -> Job[None]:
        params = self.context.params
        state = self.state
        iteration = 0
        stopped = first_round = False
        while iteration < params.max_iterations:
            n = min(self.steps, params.max_iterations - iteration)
            self.momenta = []
            for _ in range(n):
                t_next = (1.0 + math.sqrt(1.0 + 4.0 * self.t * self.t)) / 2.0
                self.momenta.append((self.t - 1.0) / t_next)
                self.t = t_next
            self.target = iteration + n
            self.check = self.target % CHECK_EVERY == 0 or self.target == params.max_iterations
            if self.check:
                state.primal.zero_()
                state.dual.zero_()
            self.reached = 0
            try:
                yield from self.slab.sweep(self._chunk)
            except _Stopped:
                stopped = True
            self._commit(state.planes)
            first_round = iteration == 0
            iteration = self.target
            if stopped:
                break
            if self.check:
                self.gap = float(state.gaps().max())
                self.first_gap = min(self.first_gap, self.gap)
                if self.gap <= params.tolerance:
                    break
        unreached = 0
        if stopped:
            if first_round and self.reached < state.planes:
                # Never reached: their dual is 0; dropping the coupling into them keeps them
                # exactly the input (any feasible dual certifies the result).
                state.y[0, :, self.reached - 1] = 0
                unreached = (state.planes - self.reached) * state.plane_voxels
            # Chunks not reached in the last round are one round behind: the stitched dual is
            # still feasible, so the result is certified as it is.
            yield from _certify_all(self.context, self.slab, state, self.progress)
            self.gap = float(state.gaps().max())
        converged = self.gap <= params.tolerance
        _account(self.context, self.slab, state, iteration, self.gap, converged, stopped, unreached)

    def _commit(self, below: int) -> None:
        for plane in sorted(p for p in self.pending if p < below):
            self.state.y[:, :, plane], self.z[:, :, plane] = self.pending.pop(plane)

    def _chunk(self, region: Region) -> Job[None]:
        context, slab, state = self.context, self.slab, self.state
        params = context.params
        spacing = context.layout.coupled_spacing
        r0, r1 = _lead(region, slab.axis)
        a, b = _lead(region, slab.axis, read=False)
        f = context.read(region.read)
        y = _fresh(state.y[:, :, r0:r1], f.device)
        z = _fresh(self.z[:, :, r0:r1], f.device)
        z_next = torch.empty_like(z)
        step = ops.fgp_step.bind(f, z, y, z_next)
        for momentum in self.momenta:  # exactly solve_fgp's iteration (see the module docstring)
            step(
                f,
                z,
                y,
                z_next,
                spacing=spacing,
                lo=context.lo,
                hi=math.inf,
                inv_l2=self.inv_l2,
                weight=context.weight,
                momentum=momentum,
            )
            z, z_next = z_next, z
        del z_next
        if self.check:
            _certify_core(context, slab, state, f, y, r0, a, b)
        # This chunk read from a - halo on: earlier planes are not read again this round.
        self._commit(a - slab.halo)
        y_core = y[:, :, a - r0 : b - r0].to("cpu")
        z_core = z[:, :, a - r0 : b - r0].to("cpu")
        for plane in range(a, b):
            self.pending[plane] = (y_core[:, :, plane - a], z_core[:, :, plane - a])
        self.reached = b
        done = fraction_done(self.target, self.gap, self.first_gap, params)
        self.progress = max(self.progress, done)
        metrics = {"iteration": self.target}
        gap = ""
        if math.isfinite(self.gap):  # known from the first check on
            metrics["relative_gap"] = self.gap
            gap = f", gap {self.gap:.1e}"
        command = yield Progress(
            self.progress,
            f"iteration {self.target}/{params.max_iterations}{gap}",
            step=self.target,
            metrics=metrics,
            outputs={OUTPUT: _preview(context, region, f, y)},
        )
        if is_stop(command):
            raise _Stopped


def _certify_core(
    context: SolveContext,
    slab: SplitSlab,
    state: _Slab,
    f: torch.Tensor,
    y: torch.Tensor,
    r0: int,
    a: int,
    b: int,
) -> None:
    """Certificate and output of the core ``[a, b)`` from a chunk's data (valid one plane
    beyond the core), in blocks that fit next to the chunk's resident state."""
    resident = 4 * (1 + 3 * y.shape[0])  # f, y, z and z_next in float32
    room = max(1, context.bytes_per_element - resident)
    step = max(1, (slab.fits * room) // certificate.BYTES_PER_ELEMENT - 2)
    for start in range(a, b, step):
        stop = min(b, start + step)
        upper = min(stop + 1, state.planes)
        lower = max(start - 1, 0)
        _certify_block(
            context,
            slab,
            state,
            f[:, start - r0 : upper - r0],
            y[:, :, lower - r0 : upper - r0],
            start,
            stop,
        )


def _certify_all(
    context: SolveContext, slab: SplitSlab, state: _Slab, fraction: float
) -> Job[None]:
    """Certificate and output of the whole slab from the host dual, streamed."""
    state.primal.zero_()
    state.dual.zero_()
    room = slab.fits * context.bytes_per_element
    step = max(1, room // certificate.BYTES_PER_ELEMENT - 2)
    for start in range(0, state.planes, step):
        stop = min(state.planes, start + step)
        upper = min(stop + 1, state.planes)
        read = list(slab.core)
        read[slab.axis] = slice(start, upper)
        f = context.read(tuple(read))
        y = state.y[:, :, max(start - 1, 0) : upper].to(f.device)
        _certify_block(context, slab, state, f, y, start, stop)
        yield Progress(fraction, f"certifying the result: planes {start}-{stop} of {state.planes}")


def _certify_block(
    context: SolveContext,
    slab: SplitSlab,
    state: _Slab,
    f: torch.Tensor,
    y: torch.Tensor,
    start: int,
    stop: int,
) -> None:
    image, primal, dual = certificate.certify_block(
        f,
        y,
        start=start,
        stop=stop,
        length=state.planes,
        weight=context.weight,
        spacing=context.layout.coupled_spacing,
        lo=context.lo,
        hi=math.inf,
    )
    core = list(slab.core)
    core[slab.axis] = slice(start, stop)
    core = tuple(core)
    region = Region(core=core, read=core, keep=tuple(slice(None) for _ in core), whole=False)
    context.out[core] = to_host(context.to_output(image, region))
    state.primal += primal.cpu()
    state.dual += dual.cpu()


def _preview(context: SolveContext, region: Region, f: torch.Tensor, y: torch.Tensor) -> Output:
    """The chunk's current image ``P_C(f + div y)`` on its core, made only if displayed (valid
    while the job is paused at this update, like every lazy output)."""

    def make() -> np.ndarray:
        u = torch.empty_like(f)
        spacing = context.layout.coupled_spacing
        ops.fgp_primal(f, y, u, spacing=spacing, lo=context.lo)
        return to_host(context.to_output(u, region))

    return Output(make, region=region.core, shape=context.out.shape)


def _account(
    context: SolveContext,
    slab: SplitSlab,
    state: _Slab,
    iterations: int,
    gap: float,
    converged: bool,
    stopped: bool,
    unreached: int,
    chunks: int | None = None,
) -> None:
    totals = context.totals
    totals.written.append(slab.core)
    totals.chunks += chunks if chunks is not None else math.ceil(state.planes / slab.chunk)
    totals.unreached += unreached
    totals.add(iterations, gap, converged and not stopped)
    if stopped:
        totals.stopped = True
        raise StopAll


# --- Chambolle: one pass -----------------------------------------------------------------------


def _chambolle(context: SolveContext, slab: SplitSlab) -> Job[None]:
    state = _Slab(context, slab)
    spacing = context.layout.coupled_spacing
    facts = {"iterations": 0, "fired": True, "chunks": 0, "reached": 0}

    def chunk(region: Region) -> Job[None]:
        r0, r1 = _lead(region, slab.axis)
        a, b = _lead(region, slab.axis, read=False)
        f = context.read(region.read)
        if r0 > 0:
            f[:, 0] -= spacing[0] * state.y[0, :, r0 - 1].to(f.device)
        solve = context.solve(region, f)
        result = yield from scaled(solve, a / state.planes, b / state.planes)
        _write_back(state.y, result.dual.to("cpu"), r0, r1, state.planes, context.weight)
        facts["iterations"] = max(facts["iterations"], result.iterations)
        facts["fired"] = facts["fired"] and result.converged
        facts["chunks"] += 1
        facts["reached"] = r1
        if result.stopped:
            raise _Stopped

    stopped = False
    try:
        yield from slab.sweep(chunk)
    except _Stopped:
        stopped = True
    yield from _certify_all(context, slab, state, 1.0)
    unreached = (state.planes - facts["reached"]) * state.plane_voxels if stopped else 0
    _account(
        context,
        slab,
        state,
        facts["iterations"],
        float(state.gaps().max()),
        facts["fired"],
        stopped,
        unreached,
        chunks=facts["chunks"],
    )


def _write_back(
    dual: torch.Tensor, solved: torch.Tensor, r0: int, r1: int, planes: int, weight: float
) -> None:
    """Store a chunk's dual (planes ``[r0, r1)``) into the slab's dual.

    Every variable the chunk optimised is stored, halos included (the next chunk re-solves the
    overlap with this dual next to it). The coupling ``y_0`` of the chunk's last plane to the
    next plane is left as it was (0 until the next chunk solves it; the chunk treated it as a
    boundary), so the planes beyond a stopped run stay exactly the input.
    """
    last = r1 if r1 == planes else r1 - 1
    dual[:, :, r0:last] = solved[:, :, : last - r0]
    if last < r1:
        dual[1:, :, last] = solved[1:, :, -1]
