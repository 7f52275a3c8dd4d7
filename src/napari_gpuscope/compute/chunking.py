"""Axis layouts and device-sized chunks with halos, shared by the methods.

Many methods treat some axes of the input as independent (time, channels, a batch of tiles) and
couple the voxels along the others (y, x, and z for volumes). :class:`AxisLayout` maps an input
array onto the solver layout ``(batch, coupled...)``. :class:`HaloChunker` splits the input into
regions that fit in device memory: independent axes first (their chunks need no halo), then the
leading coupled axis, whose chunks read ``halo`` extra planes on each side and keep only their
core. The halo is the method's business; a method exposes it publicly (e.g.
:func:`napari_gpuscope.compute.tv.halo`) so a Dask ``map_overlap`` can ask for the same depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .jobs import Job, scaled
from .memory import DeviceMemoryError, plan_chunk, run_in_chunks

__all__ = ["AxisLayout", "HaloChunker", "Region"]


@dataclass(frozen=True)
class AxisLayout:
    """How the input's axes map onto a solver's ``(batch, coupled...)`` problem layout.

    Attributes
    ----------
    shape : tuple of int
        Input shape.
    batch_axes : tuple of int
        Independent axes (channel, zero-weight axes), in input order.
    coupled_axes : tuple of int
        Axes the solver couples, in input order.
    coupled_spacing : tuple of float
        Difference weight of each coupled axis.

    Examples
    --------
    >>> layout = AxisLayout.of((5, 8, 9), spacing=(0.0, 1.0, 1.0))
    >>> layout.batch_axes, layout.coupled_axes
    ((0,), (1, 2))
    """

    shape: tuple[int, ...]
    batch_axes: tuple[int, ...]
    coupled_axes: tuple[int, ...]
    coupled_spacing: tuple[float, ...]

    @staticmethod
    def of(
        shape: Sequence[int], spacing: Sequence[float], channel_axis: int | None = None
    ) -> AxisLayout:
        """Layout of an input of ``shape``: axes with a zero weight and the channel are batch.

        Parameters
        ----------
        shape : sequence of int
            Input shape.
        spacing : sequence of float
            One weight per non-channel axis.
        channel_axis : int, optional
            Axis holding independent channels (non-negative index).
        """
        shape = tuple(int(s) for s in shape)
        spatial = [a for a in range(len(shape)) if a != channel_axis]
        weight_of = dict(zip(spatial, spacing, strict=True))
        coupled = tuple(a for a in spatial if weight_of[a] > 0)
        batch = tuple(a for a in range(len(shape)) if a not in coupled)
        return AxisLayout(shape, batch, coupled, tuple(float(weight_of[a]) for a in coupled))

    @property
    def perm(self) -> tuple[int, ...]:
        """Axis permutation from input order to ``batch + coupled`` order."""
        return self.batch_axes + self.coupled_axes

    def to_problem(self, region: torch.Tensor) -> torch.Tensor:
        """Region tensor (input axis order) -> contiguous ``(batch, coupled...)`` tensor."""
        permuted = region.permute(self.perm)
        coupled_shape = permuted.shape[len(self.batch_axes) :]
        return permuted.reshape(-1, *coupled_shape).contiguous()

    def from_problem(self, problem: torch.Tensor, region_shape: Sequence[int]) -> torch.Tensor:
        """Inverse of :meth:`to_problem` (a view, input axis order)."""
        permuted_shape = [region_shape[a] for a in self.perm]
        inverse = np.argsort(self.perm).tolist()
        return problem.reshape(permuted_shape).permute(inverse)


@dataclass(frozen=True)
class Region:
    """One chunk: the core it owns, the (larger) region it reads, and where the core sits.

    Attributes
    ----------
    core : tuple of slice
        Part of the output this chunk writes (input coordinates).
    read : tuple of slice
        Part of the input it reads: the core plus the halo along the halo axis.
    keep : tuple of slice
        The core inside the read region.
    whole : bool
        Whether the core is the whole input.
    """

    core: tuple[slice, ...]
    read: tuple[slice, ...]
    keep: tuple[slice, ...]
    whole: bool

    @property
    def read_shape(self) -> tuple[int, ...]:
        """Shape of the read region."""
        return tuple(s.stop - s.start for s in self.read)

    @property
    def core_shape(self) -> tuple[int, ...]:
        """Shape of the core."""
        return tuple(s.stop - s.start for s in self.core)


class HaloChunker:
    """Split an input into device-sized :class:`Region` s and run a job on each.

    Parameters
    ----------
    layout : AxisLayout
        The input's layout (at least one coupled axis).
    bytes_per_element : int
        Device bytes the method needs per element of a read region.
    halo : int
        Extra planes read on each side along the leading coupled axis.
    device : torch.device
        Where memory is planned.
    budget : int, optional
        Overrides the free memory (see :func:`~napari_gpuscope.compute.memory.plan_chunk`).
    what : str
        Name used in memory messages.

    Attributes
    ----------
    chunks : int
        Regions processed so far.
    """

    def __init__(
        self,
        layout: AxisLayout,
        *,
        bytes_per_element: int,
        halo: int,
        device: torch.device,
        budget: int | None = None,
        what: str = "one chunk",
    ) -> None:
        if not layout.coupled_axes:
            raise ValueError("HaloChunker needs at least one coupled axis")
        self.layout = layout
        self.bytes_per_element = int(bytes_per_element)
        lead = layout.coupled_axes[0]
        self.halo = max(0, min(layout.shape[lead] - 1, int(halo)))
        self.device = device
        self.budget = budget
        self.what = what
        self.split_axes = (*layout.batch_axes, lead)
        self.chunks = 0

    def run(self, solve: Callable[[Region], Job[None]]) -> Job[None]:
        """Run ``solve(region)`` on every region, in order; it stores its results itself.

        ``solve`` may be restarted on the same region with a smaller chunk after an
        out-of-memory error.
        """
        full = [(0, n) for n in self.layout.shape]
        yield from self._split(0, full, solve)

    def _split(
        self, level: int, region: list[tuple[int, int]], solve: Callable[[Region], Job[None]]
    ) -> Job[None]:
        axis = self.split_axes[level]
        coupled = level == len(self.split_axes) - 1
        start0, stop0 = region[axis]
        length = stop0 - start0
        elements = math.prod(b - a for a, b in region)
        per_item = elements // length * self.bytes_per_element
        halo = self.halo if coupled else 0
        # A chunk reads its core plus up to 2 halos, never more than the whole axis.
        fixed = min(2 * halo, length - 1) * per_item
        try:
            chunk = plan_chunk(
                length, per_item, self.device, fixed_bytes=fixed, budget=self.budget, what=self.what
            )
        except DeviceMemoryError:
            if coupled:
                raise
            # Not even one slab along this independent axis fits: split the next axis inside it.
            for index in range(length):
                sub = list(region)
                sub[axis] = (start0 + index, start0 + index + 1)
                yield from scaled(
                    self._split(level + 1, sub, solve), index / length, (index + 1) / length
                )
            return

        def process(start: int, stop: int) -> Job[None]:
            sub = list(region)
            sub[axis] = (start0 + start, start0 + stop)
            return self._solve(sub, axis if coupled else None, solve)

        yield from run_in_chunks(
            length,
            chunk,
            process,
            device=self.device,
            bytes_per_item=per_item,
            fixed_bytes=fixed,
            what=self.what,
        )

    def _solve(
        self,
        core: list[tuple[int, int]],
        halo_axis: int | None,
        solve: Callable[[Region], Job[None]],
    ) -> Job[None]:
        read = list(core)
        if halo_axis is not None:
            a, b = core[halo_axis]
            read[halo_axis] = (
                max(0, a - self.halo),
                min(self.layout.shape[halo_axis], b + self.halo),
            )
        keep = tuple(slice(c[0] - r[0], c[1] - r[0]) for c, r in zip(core, read, strict=True))
        whole = all(a == 0 and b == n for (a, b), n in zip(core, self.layout.shape, strict=True))
        region = Region(
            core=tuple(slice(a, b) for a, b in core),
            read=tuple(slice(a, b) for a, b in read),
            keep=keep,
            whole=whole,
        )
        yield from solve(region)
        self.chunks += 1
