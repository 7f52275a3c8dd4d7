"""The certificate of a split slab's result (:mod:`._split`): computed in float64 on each chunk's
core, or on the whole slab from the host dual, in blocks that fit the device, writing the output
of the planes it certifies (:mod:`._certificate` does the arithmetic)."""

from __future__ import annotations

import math

import torch

from ..arrays import to_host
from ..chunking import Region, SplitSlab
from ..jobs import Job, Progress
from . import _certificate as certificate
from ._context import SolveContext
from ._split_state import _Slab

__all__: list[str] = []


def _certify_core(
    context: SolveContext,
    slab: SplitSlab,
    f: torch.Tensor,
    y: torch.Tensor,
    r0: int,
    a: int,
    b: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Certificate and output of the core ``[a, b)`` from a chunk's data (valid one plane
    beyond the core), in blocks that fit next to the chunk's resident ``f`` and ``y``. Returns
    the core's float64 energies (host)."""
    d = y.shape[0]
    room = max(1, context.bytes_per_element - 4 * (1 + d))  # what f and y leave of a plane
    step = _block_planes(slab.fits * room, certificate.bytes_per_element(d))
    planes = slab.planes
    primal = dual = torch.zeros(y.shape[1], dtype=torch.float64)
    for start in range(a, b, step):
        stop = min(b, start + step)
        upper = min(stop + 1, planes)
        lower = max(start - 1, 0)
        block_f = f[:, start - r0 : upper - r0]
        block_y = y[:, :, lower - r0 : upper - r0]
        block_primal, block_dual = _certify_block(context, slab, block_f, block_y, start, stop)
        primal, dual = primal + block_primal, dual + block_dual
    return primal, dual


def _block_planes(room: int, bytes_per_plane_voxel: int) -> int:
    """Planes per certificate block: a block of ``p`` planes reads ``p + 2`` planes of dual."""
    return max(1, room // bytes_per_plane_voxel - 2)


def _certify_all(
    context: SolveContext, slab: SplitSlab, state: _Slab, fraction: float
) -> Job[None]:
    """Certificate and output of the whole slab from the host dual, streamed."""
    state.primal.zero_()
    state.dual.zero_()
    d = state.y.shape[0]
    inputs = 4 * (1 + d)  # f and y in float32, read for each block
    step = _block_planes(
        slab.fits * context.bytes_per_element, inputs + certificate.bytes_per_element(d)
    )
    for start in range(0, state.planes, step):
        stop = min(state.planes, start + step)
        upper = min(stop + 1, state.planes)
        read = list(slab.core)
        read[slab.axis] = slice(start, upper)
        f = context.read(tuple(read))
        y = state.y[:, :, max(start - 1, 0) : upper].to(f.device)
        primal, dual = _certify_block(context, slab, f, y, start, stop)
        state.primal += primal
        state.dual += dual
        yield Progress(fraction, f"certifying the result: planes {start}-{stop} of {state.planes}")


def _certify_block(
    context: SolveContext,
    slab: SplitSlab,
    f: torch.Tensor,
    y: torch.Tensor,
    start: int,
    stop: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Writes the output of the planes ``[start, stop)``; returns their energies (host)."""
    image, primal, dual = certificate.certify_block(
        f,
        y,
        start=start,
        stop=stop,
        length=slab.planes,
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
    return primal.cpu(), dual.cpu()
