"""The host side of a split slab (:mod:`._split`): its dual and energies in the solver's
layout, the planes a chunk reads, and the accounting of the finished slab in the job's totals."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..chunking import Region, SplitSlab
from ._context import SolveContext, StopAll
from ._solvers import relative_gaps

__all__: list[str] = []


class _Stopped(Exception):
    """STOP arrived inside a pass: the pass ends there."""


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
    # The stitched image is on the host by now: the same refusal as a whole-volume solve.
    context.refuse_non_finite(
        not math.isnan(gap) and bool(np.isfinite(context.out[slab.core]).all())
    )
    totals = context.totals
    totals.written.append(slab.core)
    totals.chunks += chunks if chunks is not None else math.ceil(state.planes / slab.chunk)
    totals.unreached += unreached
    totals.add(iterations, gap, converged and not stopped)
    if stopped:
        totals.stopped = True
        raise StopAll
