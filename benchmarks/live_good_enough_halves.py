"""Split halves made again from what a live session's halves were given
(``benchmarks/live_good_enough.py``'s ``--halves-block`` and ``--halves-gap``).

:func:`with_halves_block` gives a track's points the noise parts of halves of ``block``-frame
blocks, :func:`with_halves_gap` those of 10-frame blocks less a guard gap; each first checks
that the halves made again as the session makes them give the session's own noise parts.
"""

from __future__ import annotations

import dataclasses
import math

import live_good_enough_track  # noqa: F401  (puts src/ on sys.path first)
import numpy as np

from napari_gpuscope import live
from napari_gpuscope.live import _split_half


def _noise_part(
    sums: list[np.ndarray], counts: list[int], total: int, sigma: float, border: int
) -> float:
    """The noise part of two halves' sums of ``counts`` frames for a reconstruction of
    ``total`` frames: their correlation blurred by ``sigma`` inside ``border`` (NaN when a half
    is empty or sigma is not a blur)."""
    from scipy import ndimage

    if not sums or min(counts) == 0 or not (math.isfinite(sigma) and sigma >= 0):
        return math.nan
    shape = sums[0].shape
    inner = (slice(border, shape[0] - border), slice(border, shape[1] - border))
    a, b = (ndimage.gaussian_filter(half, sigma)[inner] for half in sums)
    r = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
    return _split_half.noise_part(r, counts[0], counts[1], total)


def noise_parts(halves: list[tuple[np.ndarray, int, float, int]], block: int) -> list[float]:
    """The noise parts of the split halves made again from what the session's halves were
    given, each block of frames between two measurements going to half ``start // block % 2``
    (``block`` 0: to the half with fewer frames, as :class:`SplitHalves` does)."""

    sums: list[np.ndarray] = []
    counts, previous, before, parts = [0, 0], None, 0, []
    for image, frames, sigma, border in halves:
        added = frames * image - (before * previous if previous is not None else 0)
        side = before // block % 2 if block else int(counts[0] > counts[1])
        sums = sums or [np.zeros_like(image), np.zeros_like(image)]
        sums[side] = sums[side] + added
        counts[side] += frames - before
        previous, before = image, frames
        parts.append(_noise_part(sums, counts, sum(counts), sigma, border))
    return parts


def with_halves_block(tracked: dict[str, object], block: int) -> list[live.QualityPoint]:
    """The track's points with their noise parts from halves of ``block``-frame blocks (the
    halves made again as the session makes them must give the session's noise parts)."""
    points, halves = tracked["points"], tracked["halves"]
    again = noise_parts(halves, 0)
    if not np.allclose(again, [p.noise for p in points], rtol=1e-9, equal_nan=True):
        raise RuntimeError("the split halves made again differ from the session's")
    return [
        dataclasses.replace(p, noise=n)
        for p, n in zip(points, noise_parts(halves, block), strict=True)
    ]


def gap_noise_parts(tracked: dict[str, object], gap: int, block: int = 10) -> list[float]:
    """The noise parts at the track's points (multiples of ``block`` frames) of split halves of
    ``block``-frame blocks (block ``j`` to half ``j % 2``) that leave out the first ``gap``
    frames of every block (a guard gap: blinking across a block's border no longer shared);
    the full reconstruction still has all ``n`` frames (Spearman-Brown to ``n``)."""

    images, parts = tracked["images"], []
    for image, frames, sigma, border in tracked["halves"]:  # as the session's halves were given
        if image.shape != images[frames].shape or frames % block:
            raise RuntimeError("the halves' crop is not the whole image, or off the grid")
        sums, counts = [np.zeros_like(image), np.zeros_like(image)], [0, 0]
        for j in range(frames // block):
            first, end = j * block + gap, (j + 1) * block
            before = first * np.asarray(images[first], np.float64) if first else 0.0
            sums[j % 2] += end * np.asarray(images[end], np.float64) - before
            counts[j % 2] += end - first
        parts.append(_noise_part(sums, counts, frames, sigma, border))
    return parts


def with_halves_gap(tracked: dict[str, object], gap: int) -> list[live.QualityPoint]:
    """The track's points with their noise parts from halves with a guard gap of ``gap``
    frames (with 0 they must be the session's, measured every 10 frames)."""
    points = tracked["points"]
    if not np.allclose(
        gap_noise_parts(tracked, 0), [p.noise for p in points], rtol=1e-9, equal_nan=True
    ):
        raise RuntimeError("the split halves made again differ from the session's")
    return [
        dataclasses.replace(p, noise=n)
        for p, n in zip(points, gap_noise_parts(tracked, gap), strict=True)
    ]
