"""Tile grids, smooth blending of overlapping tiles, and the tilt map."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import Device

__all__ = ["TileGrid", "TiltMap", "blend_weights", "canonical_tilt", "radial_zenith_init"]


def _starts(length: int, tiles: int, size: int) -> tuple[int, ...]:
    if tiles == 1:
        return ((length - size) // 2,)
    return tuple(round(i * (length - size) / (tiles - 1)) for i in range(tiles))


@dataclass(frozen=True)
class TileGrid:
    """A grid of equal, overlapping tiles covering a ``(Y, X)`` image.

    Attributes
    ----------
    shape : tuple of int
        Image shape ``(Y, X)``.
    tiles : tuple of int
        Tile rows and columns ``(ty, tx)``.
    size : tuple of int
        Tile shape ``(h, w)``.
    starts_y, starts_x : tuple of int
        Top-left corners (row and column of each tile).

    Examples
    --------
    >>> grid = TileGrid.covering((100, 100), (2, 2), overlap=0.25)
    >>> grid.size, grid.starts_y
    ((58, 58), (0, 42))
    """

    shape: tuple[int, int]
    tiles: tuple[int, int]
    size: tuple[int, int]
    starts_y: tuple[int, ...]
    starts_x: tuple[int, ...]

    @classmethod
    def covering(
        cls, shape: tuple[int, int], tiles: tuple[int, int], overlap: float = 0.25
    ) -> TileGrid:
        """Tiles of one size that cover the image with at least ``overlap`` between neighbours."""
        size = []
        for length, n in zip(shape, tiles, strict=True):
            if n < 1 or n > length:
                raise ValueError(f"cannot cut {length} pixels into {n} tiles")
            s = length if n == 1 else math.ceil(length / (n - (n - 1) * overlap))
            size.append(min(length, s + (s % 2)))  # even sizes keep the FFT grid symmetric
        return cls(
            shape=(int(shape[0]), int(shape[1])),
            tiles=(int(tiles[0]), int(tiles[1])),
            size=(size[0], size[1]),
            starts_y=_starts(shape[0], tiles[0], size[0]),
            starts_x=_starts(shape[1], tiles[1], size[1]),
        )

    @classmethod
    def sampling(cls, shape: tuple[int, int], tile: int, max_tiles: int = 4) -> TileGrid:
        """Non-overlapping tiles of at most ``tile`` pixels spread over the image (for a global
        estimate: a few representative tiles share one set of parameters)."""
        h, w = min(tile, shape[0]), min(tile, shape[1])
        ty = max(1, min(max_tiles, shape[0] // h))
        tx = max(1, min(max_tiles, shape[1] // w))
        return cls(
            shape=(int(shape[0]), int(shape[1])),
            tiles=(ty, tx),
            size=(h, w),
            starts_y=_starts(shape[0], ty, h),
            starts_x=_starts(shape[1], tx, w),
        )

    @property
    def count(self) -> int:
        """Number of tiles."""
        return self.tiles[0] * self.tiles[1]

    def boxes(self) -> list[tuple[slice, slice]]:
        """The tiles' ``(rows, columns)`` slices, row by row."""
        h, w = self.size
        return [(slice(y, y + h), slice(x, x + w)) for y in self.starts_y for x in self.starts_x]

    def centers(self) -> np.ndarray:
        """Tile centres ``(count, 2)`` in pixels (row, column)."""
        h, w = self.size
        return np.array(
            [(y + (h - 1) / 2, x + (w - 1) / 2) for y in self.starts_y for x in self.starts_x],
            dtype=np.float64,
        )

    def central(self, size: int) -> TileGrid:
        """The same tile centres with tiles of at most ``size`` pixels (cheaper estimates)."""
        h, w = min(size, self.size[0]), min(size, self.size[1])
        dy, dx = (self.size[0] - h) // 2, (self.size[1] - w) // 2
        return TileGrid(
            self.shape,
            self.tiles,
            (h, w),
            tuple(y + dy for y in self.starts_y),
            tuple(x + dx for x in self.starts_x),
        )

    def cut(self, image: torch.Tensor) -> torch.Tensor:
        """Stack the tiles of ``image (..., Y, X)`` into ``(count, ..., h, w)``."""
        return torch.stack([image[..., ys, xs] for ys, xs in self.boxes()])


def _ramp(length: int, ramp: int, device: Device) -> torch.Tensor:
    """1 in the middle, a raised-cosine fall to a small floor over ``ramp`` pixels at each end."""
    t = torch.arange(length, device=device, dtype=torch.float32)
    distance = torch.minimum(t + 0.5, length - t - 0.5)
    if ramp <= 0:
        return torch.ones(length, device=device)
    x = torch.clamp(distance / ramp, 0.0, 1.0)
    return torch.clamp(torch.sin(0.5 * math.pi * x) ** 2, min=1e-3)


def blend_weights(grid: TileGrid, device: Device = "cpu") -> torch.Tensor:
    """Per-tile weights ``(h, w)`` that fall smoothly to ~0 across the overlaps.

    The ramp spans the overlap between neighbours, so every pixel is a convex combination of the
    tiles that cover it and the weights are continuous: no seams.
    """
    ramps = []
    for axis in (0, 1):
        starts = grid.starts_y if axis == 0 else grid.starts_x
        size = grid.size[axis]
        step = min((b - a for a, b in itertools.pairwise(starts)), default=size)
        ramps.append(_ramp(size, size - step, device))
    return ramps[0][:, None] * ramps[1][None, :]


def canonical_tilt(zenith: Any, azimuth: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(zenith >= 0, azimuth in [0, 2 pi))``: ``(z, a)`` and ``(-z, a + pi)`` are one tilt."""
    zenith = np.asarray(zenith, dtype=np.float64)
    azimuth = np.asarray(azimuth, dtype=np.float64)
    flip = zenith < 0
    return np.abs(zenith), np.mod(azimuth + np.where(flip, np.pi, 0.0), 2 * np.pi)


def radial_zenith_init(
    centers: np.ndarray,
    well_center: tuple[float, float],
    well_radius: float,
    *,
    zenith_center: float = 0.05,
    zenith_edge: float = 0.3,
    outward: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Start values of a per-tile tilt in a well: zenith grows toward the wall, azimuth radial.

    A meniscus tilts the illumination more the closer a field is to the well wall, pointing
    along the radius. ``zenith = w zenith_edge + (1 - w) zenith_center`` with ``w`` a
    smoothstep of ``r / well_radius``; azimuth points away from (``outward``) or toward the
    centre. Starting there keeps low-NA optimisations from drifting to a wrong focal plane.

    Parameters
    ----------
    centers : numpy.ndarray
        ``(N, 2)`` tile centres (row, column), in the same unit as the well.
    well_center : tuple of float
        Centre of the well (row, column).
    well_radius : float
        Radius of the well.
    zenith_center, zenith_edge : float
        Zenith (rad) at the centre and at the wall.
    outward : bool
        Azimuth pointing away from the centre (else toward it).

    Returns
    -------
    tuple of numpy.ndarray
        ``(zenith, azimuth)``, each ``(N,)``.

    Examples
    --------
    >>> z, a = radial_zenith_init(np.array([[0.0, 0.0], [0.0, 10.0]]), (0.0, 0.0), 10.0)
    >>> np.round(z, 3).tolist(), np.round(a, 3).tolist()
    ([0.05, 0.3], [0.0, 0.0])
    """
    dy = centers[:, 0] - well_center[0]
    dx = centers[:, 1] - well_center[1]
    r = np.clip(np.hypot(dy, dx) / well_radius, 0.0, 1.0)
    w = r * r * (3 - 2 * r)
    zenith = w * zenith_edge + (1 - w) * zenith_center
    azimuth = np.arctan2(dy, dx) + (0.0 if outward else np.pi)
    return zenith, np.mod(azimuth, 2 * np.pi)


@dataclass(frozen=True)
class TiltMap:
    """Illumination tilt per tile (one tile: a global tilt).

    Attributes
    ----------
    grid : TileGrid
        The tiles the values belong to.
    zenith, azimuth : numpy.ndarray
        ``(ty, tx)`` radians, canonical (zenith >= 0, azimuth in [0, 2 pi)), forward-model
        convention.
    focus : numpy.ndarray
        ``(ty, tx)`` focus offset in slices.
    loss : numpy.ndarray
        ``(ty, tx)`` final midband loss per tile (NaN when not estimated).
    replaced : numpy.ndarray or None
        ``(ty, tx)`` True where the estimate disagreed with the neighbouring tiles and was
        replaced by their prediction (:func:`~napari_gpuscope.compute.phase._outliers.
        replace_outlier_tiles`); ``None`` when not checked (global or manual tilt).
    """

    grid: TileGrid
    zenith: np.ndarray
    azimuth: np.ndarray
    focus: np.ndarray
    loss: np.ndarray
    replaced: np.ndarray | None = None

    @classmethod
    def uniform(cls, grid: TileGrid, zenith: float, azimuth: float, focus: float = 0.0) -> TiltMap:
        """The same tilt everywhere."""
        shape = grid.tiles
        z, a = canonical_tilt(np.full(shape, zenith), np.full(shape, azimuth))
        return cls(grid, z, a, np.full(shape, float(focus)), np.full(shape, np.nan))

    def vectors(self, pixels_per_radian: float | None = None) -> np.ndarray:
        """napari Vectors data ``(N, 2, 2)``: tile centre and tilt direction (row, column).

        The length is ``zenith x pixels_per_radian``, the direction the azimuth (from +x toward
        +y, i.e. rows grow with sin a). The default scale lets a 0.25 rad tilt, or the map's
        largest if larger, span half a tile: every arrow stays in its tile (an outlier tile's ran
        past the image edge), and lengths stay proportional across the map.

        Examples
        --------
        >>> grid = TileGrid.covering((64, 64), (1, 2), overlap=0.0)
        >>> arrows = TiltMap(grid, np.array([[0.1, 0.8]]), np.zeros((1, 2)), np.zeros((1, 2)),
        ...                  np.zeros((1, 2))).vectors()
        >>> np.hypot(*arrows[:, 1].T).round(1).tolist()  # half of the 32-pixel tile at most
        [2.0, 16.0]
        """
        if pixels_per_radian is None:
            largest = float(np.nanmax(self.zenith)) if self.zenith.size else 0.0
            pixels_per_radian = 0.5 * min(self.grid.size) / max(0.25, largest)
        centers = self.grid.centers()
        z = self.zenith.ravel() * pixels_per_radian
        a = self.azimuth.ravel()
        direction = np.stack([z * np.sin(a), z * np.cos(a)], axis=1)
        return np.stack([centers, direction], axis=1).astype(np.float32)

    def summary(self) -> dict[str, Any]:
        """JSON-able values (lists of lists) and the grid."""
        return {
            "tiles": list(self.grid.tiles),
            "tile_size": list(self.grid.size),
            "zenith_rad": np.round(self.zenith, 5).tolist(),
            "azimuth_rad": np.round(self.azimuth, 5).tolist(),
            "focus_slices": np.round(self.focus, 4).tolist(),
            **({} if self.replaced is None else {"replaced": self.replaced.tolist()}),
        }
