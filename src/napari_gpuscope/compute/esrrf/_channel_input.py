"""The channels of a multi-channel ``(C, T, Y, X)`` eSRRF input, read lazily.

Which axis holds the channels (:func:`guess_channel_axis`), whether their number is valid
(:func:`check_channels`), and one channel as a ``(T, Y, X)`` stack that reads only its own
frames, frame chunk by frame chunk, whatever axis holds the channels (:class:`ChannelView`,
:func:`channel_stack`), or several layers as one ``(C, ...)`` array (:class:`StackedChannels`).
The multi-channel job itself is :mod:`._channels`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError

__all__ = [
    "CHANNEL_COLORMAPS",
    "MAX_CHANNELS",
    "ChannelView",
    "StackedChannels",
    "channel_stack",
    "check_channels",
    "first_frames",
    "guess_channel_axis",
]

CHANNEL_COLORMAPS = ("magenta", "green", "cyan", "yellow", "red", "blue", "orange", "gray")
"""Each channel's colormap (additive blending: the channels overlay)."""
MAX_CHANNELS = len(CHANNEL_COLORMAPS)


class ChannelView:
    """One channel of a 4D array as a lazy ``(T, Y, X)`` array: indexing reads only the frames
    asked for (a Zarr array's ``data[:, c]`` would read the whole channel at once).

    Examples
    --------
    >>> data = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)  # (T, C, Y, X)
    >>> view = ChannelView(data, axis=1, index=2)
    >>> view.shape, np.array_equal(view[0:2], data[0:2, 2])
    ((2, 4, 5), True)
    >>> np.array_equal(view[..., 1], data[:, 2, :, 1])
    True
    """

    def __init__(self, data: ArrayLike, axis: int, index: int) -> None:
        self.data, self.axis, self.index = data, int(axis), int(index)
        shape = tuple(int(s) for s in data.shape)
        self.shape = shape[: self.axis] + shape[self.axis + 1 :]
        self.dtype = data.dtype
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        key = key if isinstance(key, tuple) else (key,)
        at = next((i for i, k in enumerate(key) if k is Ellipsis), None)
        if at is not None:
            fill = (slice(None),) * (self.ndim - len(key) + 1)
            key = key[:at] + fill + key[at + 1 :]
        key += (slice(None),) * (self.ndim - len(key))
        return self.data[(*key[: self.axis], self.index, *key[self.axis :])]

    def __array__(
        self, dtype: np.dtype | type | str | None = None, copy: bool | None = None
    ) -> np.ndarray:
        return np.asarray(self[:], dtype=dtype)


class StackedChannels:
    """Arrays of one shape (e.g. napari layers, one per channel) as a lazy ``(C, ...)`` array:
    reading channel ``c`` reads ``arrays[c]`` only, frame chunk by frame chunk.

    Examples
    --------
    >>> a, b = np.zeros((4, 8, 8), np.uint16), np.ones((4, 8, 8), np.float32)
    >>> both = StackedChannels([a, b])
    >>> both.shape, both.dtype, float(both[1, 2:4].mean())
    ((2, 4, 8, 8), dtype('float32'), 1.0)
    """

    def __init__(self, arrays: list[ArrayLike]) -> None:
        shapes = {tuple(int(n) for n in array.shape) for array in arrays}
        if len(shapes) != 1:
            raise InvalidInputError(
                f"channels must all have one shape (T, Y, X), got {sorted(shapes)}"
            )
        self.arrays = list(arrays)
        self.shape = (len(arrays), *shapes.pop())
        self.dtype = np.result_type(*(array.dtype for array in arrays))
        self.ndim = len(self.shape)

    def __getitem__(self, key: Any) -> Any:
        key = key if isinstance(key, tuple) else (key,)
        first, rest = (key[0], key[1:]) if key else (slice(None), ())
        if isinstance(first, slice):
            return np.stack([np.asarray(a[rest] if rest else a) for a in self.arrays[first]])
        array = self.arrays[range(len(self.arrays))[first]]
        return array[rest] if rest else array


def channel_stack(data: ArrayLike, axis: int, index: int) -> ArrayLike:
    """Channel ``index`` of ``data`` along ``axis``: a view of a NumPy array or torch tensor
    (basic indexing), a :class:`ChannelView` of anything else."""
    if isinstance(data, np.ndarray | torch.Tensor):
        key = (slice(None),) * axis + (index,)
        return data[key]
    return ChannelView(data, axis, index)


class _FirstFrames:
    """The first ``count`` frames of a lazy ``(T, Y, X)`` stack (a :class:`ChannelView`),
    still lazy."""

    def __init__(self, stack: ArrayLike, count: int) -> None:
        self.stack, self.count = stack, int(count)
        self.shape = (self.count, *(int(s) for s in stack.shape[1:]))
        self.dtype = stack.dtype
        self.ndim = len(self.shape)

    def __getitem__(self, key: Any) -> Any:
        key = key if isinstance(key, tuple) else (key,)
        first = key[0] if key else slice(None)
        if isinstance(first, slice):
            first = slice(*first.indices(self.count))
        else:
            first = range(self.count)[first]  # an integer, bounds-checked
        return self.stack[(first, *key[1:])]


def first_frames(stack: ArrayLike, count: int) -> Any:
    """``stack[:count]`` without reading it: a view, or a lazy :class:`_FirstFrames`."""
    if isinstance(stack, np.ndarray | torch.Tensor):
        return stack[:count]
    return _FirstFrames(stack, count)


def guess_channel_axis(shape: tuple[int, ...], axis_labels: Any = None) -> int:
    """The channel axis of a 4D input: where its axis labels put ``"c"``, else 1 when the first
    axis is too long to be channels and the second is not (``(T, C, Y, X)``, an ImageJ
    hyperstack as napari opens it), else 0 (``(C, T, Y, X)``).

    Examples
    --------
    >>> guess_channel_axis((300, 2, 64, 64)), guess_channel_axis((2, 300, 64, 64))
    (1, 0)
    >>> guess_channel_axis((3, 4, 64, 64), axis_labels=("t", "c", "y", "x"))
    1
    """
    labels = [str(label).lower() for label in (axis_labels or ())]
    if len(labels) == len(shape) and labels.count("c") == 1 and labels.index("c") in (0, 1):
        return labels.index("c")
    if len(shape) == 4 and shape[0] > MAX_CHANNELS and 2 <= shape[1] <= MAX_CHANNELS:
        return 1
    return 0


def check_channels(data: ArrayLike, channel_axis: int, *, name: str = "stack") -> int:
    """The number of channels of a 4D input, or a clear error naming what is valid."""
    shape = tuple(int(s) for s in data.shape)
    if not -len(shape) <= channel_axis < len(shape) or channel_axis not in (0, 1, -4, -3):
        raise InvalidInputError(
            f"channel_axis is {channel_axis} for {name} of shape {shape}: the channels of a "
            "4D eSRRF input are axis 0 (C, T, Y, X) or axis 1 (T, C, Y, X)"
        )
    channels = shape[channel_axis]
    if not 2 <= channels <= MAX_CHANNELS:
        raise InvalidInputError(
            f"{name} is 4D {shape} with {channels} channel(s) on axis {channel_axis % 4}: eSRRF "
            f"reads 2 to {MAX_CHANNELS} channels of blinking frames; a single channel is a "
            "(T, Y, X) stack (or name the channel axis with channel_axis)"
        )
    return channels
