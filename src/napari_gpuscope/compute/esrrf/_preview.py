"""eSRRF's live preview: the visible region, from a few frames around the shown one.

eSRRF needs many frames, but how radius and sensitivity shape the image shows after a few
dozen. A preview reconstructs at most :data:`PREVIEW_FRAMES` frames starting at the displayed
one, on the part of the frame the canvas shows (at most :data:`PREVIEW_MAX_SIDE` input pixels
per side, around the centre of the view), as one time point.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .._types import ArrayLike
from ..job_parts import mapped
from ..jobs import Job, Progress
from ..preview import PlaneView, PreviewResult
from ._job import OUTPUT, iter_esrrf
from ._params import EsrrfParams

__all__ = ["PREVIEW_FRAMES", "PREVIEW_MAX_SIDE", "PreviewRegion", "preview_job", "visible_region"]

PREVIEW_FRAMES = 20
PREVIEW_MAX_SIDE = 128
_MIN_SIDE = 16


@dataclass(frozen=True)
class PreviewRegion:
    """What a preview reconstructs: frames ``[first, stop)`` and rows/cols ``[r0, r1) x
    [c0, c1)`` of the input."""

    first: int
    stop: int
    rows: tuple[int, int]
    cols: tuple[int, int]

    @property
    def origin(self) -> tuple[int, int]:
        """Input pixel of the region's first row and column."""
        return self.rows[0], self.cols[0]

    def describe(self) -> str:
        """What was previewed, in words."""
        (r0, r1), (c0, c1) = self.rows, self.cols
        return (
            f"frames {self.first}-{self.stop - 1} of the visible region "
            f"({r1 - r0} x {c1 - c0} px at row {r0}, column {c0})"
        )


def _span(low: float, high: float, size: int) -> tuple[int, int]:
    """An integer span within ``[0, size)`` covering ``[low, high]``, clamped to at most
    :data:`PREVIEW_MAX_SIDE` around its centre and at least :data:`_MIN_SIDE`."""
    low, high = max(0, int(np.floor(low))), min(size, int(np.ceil(high)) + 1)
    side = min(size, max(_MIN_SIDE, min(PREVIEW_MAX_SIDE, high - low)))
    centre = (low + high) // 2 if high > low else size // 2
    start = int(np.clip(centre - side // 2, 0, size - side))
    return start, start + side


def visible_region(shape: tuple[int, ...], corners: np.ndarray, frame: int) -> PreviewRegion:
    """The preview region of a ``(T, Y, X)`` layer whose visible data corners are ``corners``
    (napari's ``layer.corner_pixels``) while frame ``frame`` is shown.

    Examples
    --------
    >>> visible_region((100, 512, 512), np.array([[0, 10, 20], [0, 60, 300]]), 95)
    PreviewRegion(first=80, stop=100, rows=(10, 61), cols=(96, 224))
    """
    frames = shape[0]
    count = min(PREVIEW_FRAMES, frames)
    first = int(np.clip(frame, 0, frames - count))
    corners = np.asarray(corners, dtype=float)
    if corners.shape[-1] < 2 or not np.any(corners[1, -2:] > corners[0, -2:]):
        corners = np.array([[0, 0], [shape[-2] - 1, shape[-1] - 1]], float)
    rows = _span(corners[0, -2], corners[1, -2], shape[-2])
    cols = _span(corners[0, -1], corners[1, -1], shape[-1])
    return PreviewRegion(first, first + count, rows, cols)


def preview_job(
    data: ArrayLike, params: EsrrfParams, device: str, view: PlaneView, region: PreviewRegion
) -> Job[PreviewResult]:
    """Reconstruct ``region`` of ``data`` as one time point; returns the plane to show."""
    (r0, r1), (c0, c1) = region.rows, region.cols
    crop = data[region.first : region.stop, r0:r1, c0:c1]
    # One time point; the preview measures no resolution (a run does).
    one_time_point = params.replace(frames_per_timepoint=0, frame_gap=0, measure_resolution=False)

    def without_outputs(update: Progress) -> Progress:
        return dataclasses.replace(update, outputs={})

    result = yield from mapped(
        iter_esrrf(crop, params=one_time_point, device=device, name="the preview region"),
        without_outputs,
    )
    return PreviewResult(result, {OUTPUT: result.image[0]}, note=region.describe())
