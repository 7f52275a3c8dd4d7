"""Axis layouts and device-sized chunks with halos, shared by the methods.

Many methods treat some axes of the input as independent (time, channels, a batch of tiles) and
couple the voxels along the others (y, x, and z for volumes). :class:`AxisLayout` maps an input
array onto the solver layout ``(batch, coupled...)``. :class:`HaloChunker` splits the input into
regions that fit in device memory: independent axes first (their chunks need no halo), then the
leading coupled axis, whose chunks read ``halo`` extra planes on each side and keep only their
core. The halo is the method's business; a method exposes it publicly (e.g.
:func:`napari_gpuscope.compute.tv.halo`) so a Dask ``map_overlap`` can ask for the same depth.

A halo makes a chunk exact only for methods whose output depends on a bounded neighbourhood. A
global problem (TV: a flat region's level depends on all of it) passes ``split=`` to
:meth:`HaloChunker.run`: each independent slab whose leading axis must be split is then handed
over whole as a :class:`SplitSlab`; the method chooses its halo (:meth:`SplitSlab.set_halo`) from
the planes that fit, and :meth:`SplitSlab.sweep` runs one pass over its chunks, as often as the
method's own convergence test requires. Out-of-memory errors are recovered from, and given up
on, through one :class:`~napari_gpuscope.compute.memory.MemoryRetry`. :class:`AxisLayout` is
defined in :mod:`._axis_layout`; this module is its public home.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ._axis_layout import AxisLayout
from .job_parts import mapped, scaled
from .jobs import Job, Progress
from .memory import DeviceMemoryError, MemoryRetry, plan_chunk, run_in_chunks

__all__ = ["AxisLayout", "HaloChunker", "Region", "SplitSlab"]


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
    device : torch.device
        Where memory is planned.
    halo : int or callable
        Extra planes read on each side along the leading coupled axis, or a zero-argument
        function computing it (called once, only if a halo is ever needed). Not used for the
        slabs handed to ``split`` (see :meth:`run`).
    budget : int, optional
        Overrides the free memory (see :func:`~napari_gpuscope.compute.memory.plan_chunk`).
    what : str
        Name used in memory messages.
    """

    def __init__(
        self,
        layout: AxisLayout,
        *,
        bytes_per_element: int,
        device: torch.device,
        halo: int | Callable[[], int] = 0,
        budget: int | None = None,
        what: str = "one chunk",
    ) -> None:
        if not layout.coupled_axes:
            raise ValueError("HaloChunker needs at least one coupled axis")
        self.layout = layout
        self.bytes_per_element = int(bytes_per_element)
        lead = layout.coupled_axes[0]
        self._halo = halo
        self._lead_length = layout.shape[lead]
        self.device = device
        self.budget = budget
        self.what = what
        self.split_axes = (*layout.batch_axes, lead)
        self.retry = MemoryRetry(device, budget, what)

    @functools.cached_property
    def halo(self) -> int:
        """Planes read on each side of a chunk along the leading coupled axis."""
        halo = self._halo() if callable(self._halo) else self._halo
        return max(0, min(self._lead_length - 1, int(halo)))

    def run(
        self,
        solve: Callable[[Region], Job[None]],
        *,
        split: Callable[[SplitSlab], Job[None]] | None = None,
    ) -> Job[None]:
        """Run ``solve(region)`` on every region, in order; it stores its results itself.

        ``solve`` may be restarted on the same region with a smaller chunk after an
        out-of-memory error.

        With ``split``, a slab (all planes of the leading coupled axis for some independent
        indices) that does not fit at once is not cut into halo regions here: ``split(slab)``
        gets the whole :class:`SplitSlab`, sets its halo and decides how to sweep it.
        """
        full = [(0, n) for n in self.layout.shape]
        yield from self._split(0, full, solve, split)

    def _split(
        self,
        level: int,
        region: list[tuple[int, int]],
        solve: Callable[[Region], Job[None]],
        split: Callable[[SplitSlab], Job[None]] | None,
    ) -> Job[None]:
        axis = self.split_axes[level]
        coupled = level == len(self.split_axes) - 1
        start0, stop0 = region[axis]
        length = stop0 - start0
        elements = math.prod(b - a for a, b in region)
        per_item = elements // length * self.bytes_per_element
        if coupled and split is not None:
            yield from self._whole_or_split(region, axis, solve, split)
            return
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
                    self._split(level + 1, sub, solve, split), index / length, (index + 1) / length
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
            budget=self.budget,
            what=self.what,
        )

    def _whole_or_split(
        self,
        region: list[tuple[int, int]],
        axis: int,
        solve: Callable[[Region], Job[None]],
        split: Callable[[SplitSlab], Job[None]],
    ) -> Job[None]:
        """A slab at once if it fits (and does not run out of memory), else ``split(slab)``."""
        start0, stop0 = region[axis]
        length = stop0 - start0
        per_plane = math.prod(b - a for a, b in region) // length
        plan = {"device": self.device, "budget": self.budget, "what": self.what}
        fits = plan_chunk(length, per_plane * self.bytes_per_element, **plan)
        bytes_per_plane = per_plane * self.bytes_per_element
        if fits >= length:
            try:
                yield from self._solve(region, None, solve)
                return
            except Exception as exc:
                if not self.retry.recover(exc):
                    raise
                fits = length // 2
                if fits < 1:
                    raise self.retry.error(bytes_per_plane) from exc
                yield Progress(0.0, "out of device memory; splitting into chunks")
        yield from split(SplitSlab(self, list(region), axis, fits, bytes_per_plane))

    def _solve(
        self,
        core: list[tuple[int, int]],
        halo_axis: int | None,
        solve: Callable[[Region], Job[None]],
        halo: int | None = None,
    ) -> Job[None]:
        halo = self.halo if halo is None else halo
        read = list(core)
        if halo_axis is not None:
            a, b = core[halo_axis]
            read[halo_axis] = (
                max(0, a - halo),
                min(self.layout.shape[halo_axis], b + halo),
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


class SplitSlab:
    """A slab whose leading coupled axis is split into chunks, handed to the method whole.

    Attributes
    ----------
    core : tuple of slice
        The slab in input coordinates (every plane of the leading axis).
    axis : int
        The leading coupled axis (input index).
    fits : int
        Planes that fit on the device at once (a chunk's core plus its two halos).
    bytes_per_plane : int
        Device bytes one plane of a chunk needs.
    halo : int
        Planes read on each side of a chunk's core: 0 until the method chooses it with
        :meth:`set_halo` (only the method knows how far its chunks must see).
    chunk : int
        Core planes per chunk, ``fits - 2 * halo``; halved after an out-of-memory error, for the
        following sweeps too.
    """

    def __init__(
        self,
        chunker: HaloChunker,
        bounds: list[tuple[int, int]],
        axis: int,
        fits: int,
        bytes_per_plane: int,
    ) -> None:
        self._chunker = chunker
        self._bounds = bounds
        self.axis = axis
        self.fits = fits
        self.bytes_per_plane = bytes_per_plane
        self.core = tuple(slice(a, b) for a, b in bounds)
        self.set_halo(0)

    def set_halo(self, halo: int) -> None:
        """Use ``halo`` planes on each side (the core shrinks to keep ``fits`` planes)."""
        self.halo = int(halo)
        self.chunk = max(1, self.fits - 2 * self.halo)

    def memory_error(self, planes: int) -> DeviceMemoryError:
        """The error for a method whose smallest chunk needs ``planes`` planes (core and halos)
        when fewer fit; the advice matches the device and the budget."""
        return self._chunker.retry.error(planes * self.bytes_per_plane)

    @property
    def planes(self) -> int:
        """Planes along the leading axis."""
        return self._bounds[self.axis][1] - self._bounds[self.axis][0]

    def sweep(self, solve: Callable[[Region], Job[None]]) -> Job[None]:
        """Run ``solve`` on every chunk of the slab (a :class:`Region` with halos), in order.

        The chunks' progress fractions pass through unchanged (the method knows how a sweep
        relates to its whole run); their messages get a ``"chunk k of n: "`` prefix. On an
        out-of-memory error the failed chunk's memory is freed and the chunk halved (also for
        later sweeps), down to one core plane, then :class:`DeviceMemoryError` is raised. A
        chunk may therefore run again, smaller: it must change the method's state only once
        its device work has succeeded.
        """
        start0 = self._bounds[self.axis][0]
        start = 0
        index = 0
        fraction: float | None = None

        def relabel(prefix: str) -> Callable[[Progress], Progress]:
            def rewrite(update: Progress) -> Progress:
                nonlocal fraction
                fraction = update.fraction
                return dataclasses.replace(update, message=prefix + update.message)

            return rewrite

        while start < self.planes:
            stop = min(self.planes, start + self.chunk)
            total = index + math.ceil((self.planes - start) / self.chunk)
            sub = list(self._bounds)
            sub[self.axis] = (start0 + start, start0 + stop)
            job = self._chunker._solve(sub, self.axis, solve, self.halo)
            try:
                yield from mapped(job, relabel(f"chunk {index + 1} of {total}: "))
            except Exception as exc:
                if not self._chunker.retry.recover(exc):
                    raise
                if self.chunk <= 1:
                    raise self.memory_error(1 + 2 * self.halo) from exc
                self.chunk = max(1, min(self.chunk, stop - start) // 2)
                self.fits = self.chunk + 2 * self.halo
                yield Progress(
                    fraction, f"out of device memory; retrying with chunks of {self.chunk} planes"
                )
                continue
            index += 1
            start = stop
