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
interval), no seams. Rounds of ``h = 10`` iterations (halos of 12 planes) move the slab across
the bus once per 10 iterations; with less room the rounds shrink (``h`` = 5, 2 or 1) so that a
core keeps at least half of a chunk, and below 13 planes one iteration per round (halos of 3
planes) runs with whatever core is left, down to one plane. The rounds and ``solve_fgp`` share
the momentum sequence and the iteration loop (:func:`._fgp.fgp_momenta`,
:func:`._fgp.fgp_iterations`); calling ``solve_fgp`` per chunk would restart the momentum every
round, a different (slower) algorithm.

The certificate of the returned image is computed in float64 on each chunk's core at every
check (:mod:`._certificate`), and added to the slab's energies only once the chunk has finished
(a chunk that runs out of memory is retried smaller and must not be counted twice): the image
is ``P_C(f + div y)`` of the stitched dual and its
relative gap ``(P(u) - D(y)) / P(u)`` bounds ``(P(u) - P*) / P(u)`` exactly as for an unchunked
run. (A first design, block-coordinate ascent on the dual with warm-started chunk solves, cannot
be made exact with a black-box solver: the isotropic projection at a chunk's last plane also
shrinks the coupling to the next plane, which belongs to the neighbour, and the refinement then
stalled at a relative gap of ~8e-4 on noisy 3D phantoms at weight 0.5.)

Chambolle (scikit-image's algorithm and stopping rule, which has no notion of chunks) makes one
pass: each chunk, with a halo that grows with the weight relative to the noise
(:func:`~napari_gpuscope.compute.tv.halo`), is solved from its left neighbour's dual and writes
back its dual; the stitched result's gap is certified the same way.

This module runs the FGP rounds and dispatches; the slab's host state and accounting are
:mod:`._split_state`, the certificate :mod:`._split_certify`, the Chambolle pass
:mod:`._split_chambolle`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..arrays import to_host
from ..chunking import Region, SplitSlab
from ..jobs import Job, Output, Progress, is_stop
from . import _ops as ops
from ._context import OUTPUT, SolveContext, fraction_done
from ._fgp import fgp_iterations, fgp_momenta
from ._solvers import CHECK_EVERY
from ._split_certify import _certify_all, _certify_core
from ._split_chambolle import _chambolle
from ._split_state import _account, _fresh, _lead, _Slab, _Stopped

__all__ = ["solve_split"]

_ROUND_LENGTHS = tuple(h for h in range(CHECK_EVERY, 0, -1) if CHECK_EVERY % h == 0)
_MIN_FGP_PLANES = 2 * (_ROUND_LENGTHS[-1] + 2) + 1
"""Planes of the smallest FGP chunk: one core plane between halos of one round of 1 iteration
(that iteration, one plane because a chunk's last plane lacks its forward coupling, and the
plane the certificate reads beyond the core)."""


def solve_split(context: SolveContext, slab: SplitSlab) -> Job[None]:
    """Solve a slab whose leading axis is split (see the module docstring); writes the output
    of the whole slab and accounts for it in ``context.totals``."""
    if context.params.method == "fgp":
        yield from _fgp(context, slab)
    else:
        yield from _chambolle(context, slab)


# --- FGP: the unchunked iterations, round by round ---------------------------------------------


def round_length(fits: int) -> int:
    """Iterations per round for chunks of ``fits`` planes (0 when not even the smallest chunk
    fits): the longest round whose halos (``h + 2`` planes each) leave a core of more than half
    the chunk, else one iteration per round with whatever core is left.

    Examples
    --------
    >>> [round_length(fits) for fits in (6, 7, 12, 13, 29, 48, 49)]
    [0, 1, 1, 1, 5, 5, 10]
    """
    for steps in _ROUND_LENGTHS:
        if 4 * (steps + 2) < fits:
            return steps
    return _ROUND_LENGTHS[-1] if fits >= _MIN_FGP_PLANES else 0


def _fgp(context: SolveContext, slab: SplitSlab) -> Job[None]:
    steps = round_length(slab.fits)
    if steps == 0:
        raise slab.memory_error(_MIN_FGP_PLANES)
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
        self.first_gap: float | None = None  # the gap of the first check: where the bar starts
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
            self.momenta, self.t = fgp_momenta(self.t, n)
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
                if self.first_gap is None:
                    self.first_gap = self.gap
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
        else:
            # The gap of the last round is known only now: the bar ends where the run did.
            self.progress = max(self.progress, self._fraction(iteration))
            yield Progress(
                self.progress,
                f"iteration {iteration}/{params.max_iterations}, gap {self.gap:.1e}",
                step=iteration,
                metrics={"iteration": iteration, "relative_gap": self.gap},
            )
        converged = self.gap <= params.tolerance
        _account(self.context, self.slab, state, iteration, self.gap, converged, stopped, unreached)

    def _fraction(self, iteration: int) -> float:
        first = math.inf if self.first_gap is None else self.first_gap
        return fraction_done(iteration, self.gap, first, self.context.params)

    def _commit(self, below: int) -> None:
        for plane in sorted(p for p in self.pending if p < below):
            self.state.y[:, :, plane], self.z[:, :, plane] = self.pending.pop(plane)

    def _chunk(self, region: Region) -> Job[None]:
        context, slab, state = self.context, self.slab, self.state
        params = context.params
        r0, r1 = _lead(region, slab.axis)
        a, b = _lead(region, slab.axis, read=False)
        f = context.read(region.read)
        y = _fresh(state.y[:, :, r0:r1], f.device)
        z = _fresh(self.z[:, :, r0:r1], f.device)
        z, z_next = fgp_iterations(
            f,
            z,
            y,
            torch.empty_like(z),
            self.momenta,
            spacing=context.layout.coupled_spacing,
            lo=context.lo,
            hi=math.inf,
            inv_l2=self.inv_l2,
            weight=context.weight,
        )
        # The scratch buffer goes first: copying a core (a strided view) to the host makes a
        # contiguous device temporary of the core's size, which the plan counts in its place
        # (with z_next still alive, a 64x128x128 split ran 7 % over its budget on an H100).
        del z_next
        z_core = _fresh(z[:, :, a - r0 : b - r0], torch.device("cpu"))
        y_core = _fresh(y[:, :, a - r0 : b - r0], torch.device("cpu"))
        del z  # room for the certificate
        energies = _certify_core(context, slab, f, y, r0, a, b) if self.check else None
        # The chunk's device work is done: only now may it change the slab's state (an
        # out-of-memory error above retries this chunk, smaller, from the same state).
        if energies is not None:
            state.primal += energies[0]
            state.dual += energies[1]
        self._commit(a - slab.halo)  # earlier planes are not read again this round
        for plane in range(a, b):
            self.pending[plane] = (y_core[:, :, plane - a], z_core[:, :, plane - a])
        self.reached = b
        self.progress = max(self.progress, self._fraction(self.target))
        metrics = {"iteration": self.target}
        gap = ""
        if math.isfinite(self.gap):  # known from the first check on
            metrics["relative_gap"] = self.gap
            gap = f", gap {self.gap:.1e}"
        held = [f, y]
        command = yield Progress(
            self.progress,
            f"iteration {self.target}/{params.max_iterations}{gap}",
            step=self.target,
            metrics=metrics,
            outputs={OUTPUT: _preview(context, region, held)},
        )
        # The next chunk is planned without this one's f and y: a consumer that still holds
        # this update must not keep them on the device (the first H100 run measured a split
        # volume at 1.49 x its budget that way).
        held.clear()
        if is_stop(command):
            raise _Stopped


def _preview(context: SolveContext, region: Region, held: list[torch.Tensor]) -> Output:
    """The chunk's current image ``P_C(f + div y)`` on its core from ``held = [f, y]``, made
    only if displayed; valid while the job is paused at this update, like every lazy output
    (the chunk empties ``held`` when it resumes)."""

    def make() -> np.ndarray:
        if not held:
            raise RuntimeError("a chunk's preview is valid only while its job is paused there")
        f, y = held
        u = torch.empty_like(f)
        spacing = context.layout.coupled_spacing
        ops.fgp_primal(f, y, u, spacing=spacing, lo=context.lo)
        return to_host(context.to_output(u, region))

    return Output(make, region=region.core, shape=context.out.shape)
