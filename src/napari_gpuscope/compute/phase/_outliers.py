"""Outlier tiles of a per-tile tilt map: found against the plane fitted to their neighbours.

Illumination tilt changes smoothly across a field of view (a tilted lamp, a meniscus near a
well wall), so a tile whose estimate disagrees with all its neighbours is an optimisation that
failed, typically on a tile with little structure, not a feature of the sample. Such a tile is
replaced by the value its neighbours predict, and the map says which tiles were replaced.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._tiles import TiltMap, canonical_tilt

__all__ = ["MIN_NEIGHBOURS", "OUTLIER_FLOOR", "OUTLIER_SIGMAS", "replace_outlier_tiles"]

OUTLIER_FLOOR = 0.03
"""A tile deviates when its tilt vector (zenith x direction, radians) is further than this from
its neighbours' plane, divided by ``sqrt(1 + leverage)`` ... (0.03 rad: about a sixth of a
typical 0.2 rad tilt)"""
OUTLIER_SIGMAS = 4.0
"""... and further than this many robust standard deviations of all tiles' deviations."""
MIN_NEIGHBOURS = 3
"""Tiles with fewer neighbours (as in 1 x N grids' ends) are never judged."""


def _neighbours(vectors: np.ndarray, row: int, col: int) -> list[tuple[int, int]]:
    rows, cols = vectors.shape[:2]
    return [
        (r, c)
        for r in range(max(0, row - 1), min(rows, row + 2))
        for c in range(max(0, col - 1), min(cols, col + 2))
        if (r, c) != (row, col) and np.isfinite(vectors[r, c]).all()
    ]


def _neighbour_prediction(vectors: np.ndarray, row: int, col: int) -> np.ndarray | None:
    """The tilt vector at ``(row, col)`` of the plane (least squares) through its 3 x 3
    neighbours' finite vectors, or ``None`` with fewer than :data:`MIN_NEIGHBOURS` of them."""
    points = _neighbours(vectors, row, col)
    if len(points) < MIN_NEIGHBOURS:
        return None
    design = np.array([[1.0, r - row, c - col] for r, c in points])
    values = np.array([vectors[r, c] for r, c in points])
    coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)  # min-norm in a 1-D row
    return coefficients[0]


def _leverage(vectors: np.ndarray, row: int, col: int) -> float:
    """How much noise the plane's value at the centre carries, relative to one tile's: ``h``
    of the least-squares prediction (1/8 amid 8 neighbours, 3 at a corner's 3)."""
    design = np.array([[1.0, r - row, c - col] for r, c in _neighbours(vectors, row, col)])
    return float(np.linalg.pinv(design.T @ design)[0, 0])


def _distances(vectors: np.ndarray) -> np.ndarray:
    """Each finite tile's distance from its neighbours' plane, in units of the distance's own
    noise (``sqrt(1 + h)``: extrapolating from a corner's 3 neighbours is 4x as noisy as
    interpolating amid 8), NaN where not judged."""
    distance = np.full(vectors.shape[:2], np.nan)
    for row, col in np.ndindex(*distance.shape):
        predicted = _neighbour_prediction(vectors, row, col)
        if predicted is not None and np.isfinite(vectors[row, col]).all():
            error = np.hypot(*(vectors[row, col] - predicted))
            distance[row, col] = error / np.sqrt(1.0 + _leverage(vectors, row, col))
    return distance


def _limit(distance: np.ndarray, candidate: tuple[int, ...]) -> float:
    """The largest distance a tile may have: :data:`OUTLIER_FLOOR`, or more where the tiles
    whose planes the candidate did not pull scatter more (a noisier map)."""
    rows, cols = np.indices(distance.shape)
    apart = (np.abs(rows - candidate[0]) > 1) | (np.abs(cols - candidate[1]) > 1)
    sample = distance[apart & np.isfinite(distance)]
    if sample.size < MIN_NEIGHBOURS:
        return OUTLIER_FLOOR
    median = float(np.median(sample))
    spread = 1.4826 * float(np.median(np.abs(sample - median)))
    return max(OUTLIER_FLOOR, median + OUTLIER_SIGMAS * spread)


def _ambiguous(
    distance: np.ndarray, worst: tuple[int, ...], replaced: np.ndarray, vectors: np.ndarray
) -> bool:
    """Whether a neighbour of ``worst`` deviates as much (up to float32 rounding of the
    vectors): the data cannot say which of them is wrong. In a 2 x 2 grid every tile's plane
    goes through the other three, so all four distances are the one non-planarity
    ``v00 - v01 - v10 + v11`` and the "worst" would be picked by rounding."""
    tie = 64 * float(np.finfo(np.float32).eps) * float(np.nanmax(np.abs(vectors)))
    for r, c in _neighbours(vectors, int(worst[0]), int(worst[1])):
        if not replaced[r, c] and distance[r, c] >= distance[worst] - tie:
            return True
    return False


def replace_outlier_tiles(tilt_map: TiltMap) -> TiltMap:
    """``tilt_map`` with tiles that disagree with their neighbours replaced by their prediction.

    Each tile's tilt vector ``zenith * (cos a, sin a)`` is compared with the plane fitted to its
    (up to 8) neighbours' vectors, so a smooth gradient across the field is predicted exactly,
    at the edges too. A tile deviates when the distance exceeds both :data:`OUTLIER_FLOOR` and
    :data:`OUTLIER_SIGMAS` robust standard deviations (1.4826 x the median absolute deviation)
    of the distances of the tiles the candidate is not a neighbour of (the median plus that),
    judged one tile at a time, the worst first; none is replaced when a neighbour of the worst
    deviates as much (as every tile of a 2 x 2 grid does). Deviating tiles get the zenith and
    azimuth of their prediction from the neighbours that do not deviate; focus and loss are
    kept.

    Parameters
    ----------
    tilt_map : TiltMap
        A per-tile estimate (``zenith``, ``azimuth`` in the forward-model convention).

    Returns
    -------
    TiltMap
        A new map whose ``replaced`` marks the replaced tiles (all False when none was); the
        input is returned unchanged for grids too small to judge.

    Examples
    --------
    >>> from napari_gpuscope.compute.phase._tiles import TileGrid
    >>> grid = TileGrid.covering((256, 256), (3, 3))
    >>> zenith = np.full((3, 3), 0.2); zenith[1, 1] = 0.45
    >>> flat = np.zeros((3, 3))
    >>> fixed = replace_outlier_tiles(TiltMap(grid, zenith, flat, flat, flat))
    >>> int(fixed.replaced.sum()), round(float(fixed.zenith[1, 1]), 3)
    (1, 0.2)
    """
    zenith, azimuth = tilt_map.zenith, tilt_map.azimuth
    vectors = np.stack([zenith * np.cos(azimuth), zenith * np.sin(azimuth)], axis=-1)
    distance = _distances(vectors)
    if np.isfinite(distance).sum() < MIN_NEIGHBOURS:
        return tilt_map
    replaced = np.zeros(zenith.shape, dtype=bool)
    kept = vectors.copy()
    # One tile at a time, the worst first: an outlier also pulls its neighbours' planes, which
    # must not condemn them too. More than a quarter of the tiles would not be a smooth map.
    for _ in range(zenith.size // 4):
        worst = np.unravel_index(np.nanargmax(np.where(replaced, np.nan, distance)), distance.shape)
        if not distance[worst] > _limit(distance, worst):
            break
        if _ambiguous(distance, worst, replaced, vectors):
            break
        replaced[worst] = True
        kept[worst] = np.nan
        distance = _distances(kept)
        if np.isnan(distance).all():
            break
    new_zenith, new_azimuth = zenith.copy(), azimuth.copy()
    for row, col in zip(*np.nonzero(replaced), strict=True):
        predicted = _neighbour_prediction(kept, int(row), int(col))
        if predicted is None:  # a corner that lost a neighbour: their mean
            predicted = np.mean([kept[p] for p in _neighbours(kept, int(row), int(col))], axis=0)
        new_zenith[row, col] = np.hypot(*predicted)
        new_azimuth[row, col] = np.arctan2(predicted[1], predicted[0])
    new_zenith, new_azimuth = canonical_tilt(new_zenith, new_azimuth)
    return dataclasses.replace(tilt_map, zenith=new_zenith, azimuth=new_azimuth, replaced=replaced)
