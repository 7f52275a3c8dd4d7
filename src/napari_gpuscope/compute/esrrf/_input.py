"""Input checks and the time points of an eSRRF run."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._types import ArrayLike
from ..arrays import InvalidInputError, validate_image
from ..params import ParameterError
from ._params import EsrrfParams

__all__ = ["check_frames_per_chunk", "check_stack", "time_points"]


def check_frames_per_chunk(frames_per_chunk: Any) -> None:
    """Refuse a ``frames_per_chunk`` that is not ``None`` or a positive integer."""
    if frames_per_chunk is not None and (
        isinstance(frames_per_chunk, bool)
        or int(frames_per_chunk) != frames_per_chunk
        or frames_per_chunk < 1
    ):
        raise ParameterError(
            f"frames_per_chunk must be a positive integer, got {frames_per_chunk!r}"
        )


def check_stack(
    stack: ArrayLike, params: EsrrfParams, *, name: str = "stack"
) -> tuple[int, int, int]:
    """``(T, H, W)`` of a valid input, or a clear error naming what would be valid.

    Values (NaN, infinity) are checked frame chunk by frame chunk while the job streams.
    """
    if not hasattr(stack, "shape") or not hasattr(stack, "dtype"):
        stack = np.asarray(stack)
    shape = tuple(int(s) for s in stack.shape)
    if len(shape) != 3:
        raise InvalidInputError(
            f"{name} has {len(shape)} dimension(s) {shape}; eSRRF needs a time series of "
            "blinking frames (T, Y, X) with at least 2 frames (a single image has no "
            "fluctuations to analyse)"
        )
    validate_image(stack, name=name, layouts=("TYX",), check_values=False)
    frames, height, width = shape
    if frames < 2:
        raise InvalidInputError(
            f"{name} has {frames} frame; eSRRF needs at least 2 frames (typically 50-500) of "
            "blinking fluorophores"
        )
    m = params.magnification
    margin = int(params.radius * m)
    if min(height, width) * m <= 2 * margin or min(height, width) < 4:
        raise InvalidInputError(
            f"{name} frames are {height} x {width} pixels: too small for radius "
            f"{params.radius:g} (eSRRF leaves a border of {params.radius:g} input pixels); "
            f"frames need at least {max(4, 2 * margin // m + 1)} pixels per side"
        )
    time_points(frames, params, name=name)  # raises for impossible groupings
    return frames, height, width


def time_points(frames: int, params: EsrrfParams, *, name: str = "stack") -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` frame ranges of the reconstructions.

    ``frame_gap == 0`` (NanoPyx): consecutive blocks of ``frames_per_timepoint`` frames (all
    frames when 0 or larger than T), the last one possibly shorter. ``frame_gap > 0`` (NanoJ's
    rolling analysis): blocks of ``frames_per_timepoint`` frames starting every ``frame_gap``
    frames; incomplete blocks are dropped.
    """
    per = params.frames_per_timepoint
    if per == 0 or per > frames:
        per = frames
    if params.frame_gap > 0:
        if params.frames_per_timepoint > frames:
            raise InvalidInputError(
                f"{name} has {frames} frames, fewer than frames_per_timepoint="
                f"{params.frames_per_timepoint} needed by one rolling time point"
            )
        starts = range(0, frames - per + 1, params.frame_gap)
        ranges = [(s, s + per) for s in starts]
    else:
        ranges = [(s, min(frames, s + per)) for s in range(0, frames, per)]
    if params.temporal in ("VAR", "TAC2"):
        short = [(a, b) for a, b in ranges if b - a < 2]
        if short:
            a, _b = short[0]
            raise InvalidInputError(
                f"{params.temporal} needs at least 2 frames per time point, but time point "
                f"{ranges.index(short[0]) + 1} of {len(ranges)} would hold frame {a} only "
                f"({frames} frames, frames_per_timepoint={params.frames_per_timepoint}); choose "
                "frames_per_timepoint so that no time point has a single frame, or AVG"
            )
    return ranges
