"""Chambolle on a split slab (:mod:`._split`): one pass over the chunks, each with a halo that
grows with the weight relative to the noise, solved to scikit-image's stopping rule with the
dual of the chunk before it as a boundary; the stitched result is certified as FGP's is."""

from __future__ import annotations

import contextlib

import torch

from ..arrays import InvalidInputError
from ..chunking import Region, SplitSlab
from ..job_parts import scaled
from ..jobs import Job
from ._context import SolveContext
from ._halo import halo
from ._split_certify import _certify_all
from ._split_state import _account, _lead, _Slab, _Stopped
from ._weight import noise_sigma

__all__: list[str] = []


def _chambolle_halo(context: SolveContext, slab: SplitSlab) -> int:
    """The public :func:`~._halo.halo` for the leading axis (with the noise level estimated
    if an absolute weight left it unknown), at most a quarter of the planes that fit."""
    noise = context.noise_sigma
    if noise is None and context.params.weight is not None and context.camera is None:
        with contextlib.suppress(InvalidInputError):
            noise = noise_sigma(context.image, context.scale)
    wanted = halo(context.params, context.layout.coupled_spacing[0], noise_sigma=noise)
    return max(0, min(wanted, slab.planes - 1, (slab.fits - 1) // 4))


def _chambolle(context: SolveContext, slab: SplitSlab) -> Job[None]:
    slab.set_halo(_chambolle_halo(context, slab))
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
        _write_back(state.y, result.dual.to("cpu"), r0, r1, state.planes)
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


def _write_back(dual: torch.Tensor, solved: torch.Tensor, r0: int, r1: int, planes: int) -> None:
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
