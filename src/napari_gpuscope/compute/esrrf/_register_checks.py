"""What channel registration refuses: its input (a pair or a stack of channels of one shape, at
least two, at least :data:`MIN_SIDE` pixels a side, values float32 holds after resampling), its
options, and a channel whose correlation with the reference has no peak above the noise or one
at the edge of ``max_shift`` (:func:`_check_channels`). The registration is :mod:`._register`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..arrays import InvalidInputError, validate_image
from ..params import ParameterError

__all__ = ["MIN_SIDE"]

MIN_SIDE = 16
"""Smallest image (or block) side a correlation is computed on."""


def _as_channel_array(channels: Any) -> np.ndarray:
    if isinstance(channels, (tuple, list)):
        if len(channels) != 2:
            raise InvalidInputError(
                f"channels as a sequence must be a pair (moving, reference), got {len(channels)}"
            )
        moving, reference = channels
        for name, item in (("moving", moving), ("reference", reference)):
            validate_image(item, name=f"the {name} channel", layouts=("YX", "TYX"))
        if tuple(np.shape(moving)) != tuple(np.shape(reference)):
            raise InvalidInputError(
                f"channels of different shapes: moving {tuple(np.shape(moving))}, reference "
                f"{tuple(np.shape(reference))}; register channels of one shape (crop or "
                "resample one first)"
            )
        return np.stack([np.asarray(moving), np.asarray(reference)])
    validate_image(channels, name="channels", layouts=("CYX", "CTYX"))
    return np.asarray(channels)


def _channel_images(channels: Any, reference_channel: int) -> tuple[np.ndarray, int]:
    pair = isinstance(channels, (tuple, list))
    data = _as_channel_array(channels)
    if pair:
        reference_channel = 1
    if data.shape[0] < 2:
        raise InvalidInputError(
            f"channels has {data.shape[0]} channel(s) {data.shape}; registration needs at "
            "least two (axis 0 is the channel axis)"
        )
    if isinstance(reference_channel, bool) or not isinstance(reference_channel, (int, np.integer)):
        raise ParameterError(f"reference_channel must be an integer, got {reference_channel!r}")
    if not 0 <= reference_channel < data.shape[0]:
        raise ParameterError(
            f"reference_channel must lie within [0, {data.shape[0] - 1}] (the channels), got "
            f"{reference_channel}"
        )
    # (The mean accumulates in float64 without a float64 copy of the stack.)
    images = data.astype(np.float64) if data.ndim == 3 else data.mean(axis=1, dtype=np.float64)
    # Each channel scaled by a power of two to a largest magnitude in [0.5, 1): shifts do not
    # depend on scale, and values near float32's limits would overflow the spectra.
    for c in range(images.shape[0]):
        largest = float(np.abs(images[c]).max())
        if largest > 0:
            images[c] = np.ldexp(images[c], -math.frexp(largest)[1])
    if min(images.shape[1:]) < MIN_SIDE:
        raise InvalidInputError(
            f"channels are {images.shape[1:]} pixels; registration needs at least "
            f"{MIN_SIDE} x {MIN_SIDE}"
        )
    return images.astype(np.float32), int(reference_channel)


def _check_options(
    elastic: bool,
    block_size: int,
    min_similarity: float,
    max_shift: float | None,
    shape: tuple[int, int],
) -> None:
    if max_shift is not None and not (
        isinstance(max_shift, (int, float)) and math.isfinite(max_shift) and max_shift > 0
    ):
        raise ParameterError(f"max_shift must be a positive number of pixels, got {max_shift!r}")
    if not elastic:
        return
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise ParameterError(f"block_size must be an integer number of pixels, got {block_size!r}")
    if not MIN_SIDE <= block_size <= min(shape):
        raise ParameterError(
            f"block_size must lie within [{MIN_SIDE}, {min(shape)}] (the image's smaller "
            f"side), got {block_size}"
        )
    if not (isinstance(min_similarity, (int, float)) and 0.0 <= min_similarity < 1.0):
        raise ParameterError(f"min_similarity must lie within [0, 1), got {min_similarity!r}")


_FLOAT32_HEADROOM = float(np.finfo(np.float32).max) / 2
"""Largest magnitude resampled: the float32 result holds up to 3.4e38, and Catmull-Rom's
overshoot (at most 1/4 of a step between neighbours) stays within twice the input's."""


def _check_float32_range(values: np.ndarray, channel: int, start: int) -> None:
    """Refuse values the float32 resampling would turn into infinity (e.g. float64 near
    1e300): a clear error, not a result of +-inf."""
    if values.dtype.kind not in "fiu" or values.size == 0:
        return
    peak = float(np.abs(values).max())
    if peak > _FLOAT32_HEADROOM:
        raise InvalidInputError(
            f"channel {channel} (frames from {start}) holds values up to {peak:.3g}; the "
            f"registered channels are float32 (at most {_FLOAT32_HEADROOM:.3g} after "
            "resampling): divide the data by a power of two first"
        )


def _check_channels(
    shifts: np.ndarray,
    similarity: np.ndarray,
    on_edge: np.ndarray,
    significance: np.ndarray,
    reference_channel: int,
    limit: float | None,
) -> None:
    """Refuse a channel whose correlation with the reference has no peak above the noise, or
    whose peak lies on the edge of the ``max_shift`` window or beyond it (the true shift is
    larger: a shift within the window would be a wrong one)."""
    for c in range(len(shifts)):
        if c == reference_channel:
            continue
        where = f"dy {shifts[c, 0]:+.2f}, dx {shifts[c, 1]:+.2f} px"
        if limit is not None and (on_edge[c] or np.abs(shifts[c]).max() > limit):
            raise InvalidInputError(
                f"channel {c} correlates best with channel {reference_channel} at the edge "
                f"of max_shift={limit:g} px or beyond it ({where}, similarity "
                f"{similarity[c]:.2f}): its shift is larger; raise max_shift (or None)"
            )
        if not significance[c] >= 1.0:
            raise InvalidInputError(
                f"channel {c} has no structure in common with channel {reference_channel}"
                + (f" within max_shift={limit:g} px" if limit is not None else "")
                + f": its correlation peak ({where}, similarity {similarity[c]:.2f}) is "
                f"{significance[c]:.2f} x the height noise alone reaches (needs >= 1); "
                "there is no shift to measure"
            )
