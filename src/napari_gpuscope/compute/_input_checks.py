"""What makes an input array unusable, found before any work starts: its dtype, its
dimensions (against the axis layouts a method accepts, e.g. ``("TYX", "CTYX")``), masked values,
NaN and infinity (read block by block, so a lazy array is never loaded whole), and the
:class:`InvalidInputError` that says so.

:mod:`.arrays` is the public home of these names (and adds the host/device transfer).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ._types import ArrayLike

# Reading this many elements at a time bounds host memory while checking huge lazy inputs.
_CHECK_BLOCK_ELEMENTS = 1 << 24
# Integer dtypes whose value range is their dtype's (see value_range): no read needed.
_DTYPE_BOUNDS = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)}


# What each axis letter of a layout stands for, in the words a message uses.
AXIS_NAMES = {
    "T": "time (frames)",
    "Z": "z-slices",
    "C": "channels",
    "N": "tiles",
    "Y": "rows",
    "X": "columns",
}
ANY_IMAGE = ("YX", "ZYX", "TYX", "TZYX")
"""The layouts a method accepts when it says nothing else: an image, a volume, a time-lapse."""


def layout_text(layout: str) -> str:
    """One axis layout in the usual notation.

    Examples
    --------
    >>> layout_text("CTYX")
    '(C, T, Y, X)'
    """
    return f"({', '.join(layout)})"


def layouts_text(layouts: Sequence[str]) -> str:
    """Accepted layouts in words, with what their axis letters mean (Y and X go without
    saying).

    Examples
    --------
    >>> layouts_text(("TYX", "CTYX"))
    '(T, Y, X) or (C, T, Y, X), with T = time (frames), C = channels'
    >>> layouts_text(("ZYX",))
    '(Z, Y, X), with Z = z-slices'
    """
    shown = [layout_text(layout) for layout in layouts]
    text = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
    letters = [a for a in dict.fromkeys("".join(layouts)) if a not in "YX" and a in AXIS_NAMES]
    if letters:
        text += ", with " + ", ".join(f"{a} = {AXIS_NAMES[a]}" for a in letters)
    return text


class InvalidInputError(ValueError):
    """The input array cannot be processed; the message says why and what would be valid."""

    __module__ = "napari_gpuscope.compute.arrays"  # its public home (tracebacks, pickles)


def _dtype_of(data: ArrayLike) -> np.dtype:
    if isinstance(data, torch.Tensor):
        try:
            return np.dtype(torch.empty((), dtype=data.dtype).numpy().dtype)
        except TypeError as exc:
            raise InvalidInputError(
                f"a torch tensor of dtype {data.dtype} has no NumPy equivalent; convert it with "
                ".float() first"
            ) from exc
    try:
        return np.dtype(data.dtype)
    except (AttributeError, TypeError) as exc:
        raise InvalidInputError(
            f"expected an array with a dtype (NumPy, dask, zarr or a torch tensor), got "
            f"{type(data).__name__}"
        ) from exc


def _non_finite_error(
    name: str, count: int, nans: int, first: tuple[int, ...] | None
) -> InvalidInputError:
    return InvalidInputError(
        f"{name} contains {count} non-finite value(s) ({nans} NaN, {count - nans} infinite); "
        f"the first is at index {first}. Replace or mask them (e.g. numpy.nan_to_num) first."
    )


def _leading_blocks(shape: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """Regions along axis 0 holding at most ~_CHECK_BLOCK_ELEMENTS elements each."""
    if not shape:
        yield ()
        return
    per_row = max(1, int(np.prod(shape[1:], dtype=np.int64)))
    step = max(1, _CHECK_BLOCK_ELEMENTS // per_row)
    for start in range(0, shape[0], step):
        yield (slice(start, min(shape[0], start + step)),)


def _blocks(data: ArrayLike) -> Iterator[tuple[int, np.ndarray | torch.Tensor]]:
    """``data`` read along axis 0 in blocks of bounded size, each with its first index (a
    tensor is one block: it is in memory already)."""
    if isinstance(data, torch.Tensor):
        yield 0, data.detach()
        return
    for region in _leading_blocks(tuple(int(s) for s in data.shape)):
        yield (region[0].start if region else 0), np.asarray(data[region])


def _non_finite(block: np.ndarray | torch.Tensor) -> tuple[int, int, tuple[int, ...] | None]:
    """How many values of a NumPy array or tensor are non-finite, how many of them are NaN, and
    the index of the first one."""
    if isinstance(block, torch.Tensor):
        bad = ~torch.isfinite(block)
        count = int(bad.sum())
        if not count:
            return 0, 0, None
        nans = int(torch.isnan(block).sum())
        flat = int(torch.argmax(bad.reshape(-1).to(torch.uint8)))
    else:
        bad = ~np.isfinite(block)
        count = int(bad.sum())
        if not count:
            return 0, 0, None
        nans = int(np.isnan(block).sum())
        flat = int(np.argmax(bad))
    return count, nans, tuple(int(i) for i in np.unravel_index(flat, tuple(block.shape)))


def check_finite(data: ArrayLike, *, name: str = "image") -> None:
    """Raise if ``data`` contains NaN or infinity, saying how many and where the first one is.

    Parameters
    ----------
    data : array-like
        NumPy, dask or zarr-like array (read block by block), or a torch tensor.
    name : str
        How the input is called in the error message (e.g. the layer name).

    Raises
    ------
    InvalidInputError
        With the number of non-finite values and the index of the first one.

    Examples
    --------
    >>> check_finite(np.array([[0.0, np.inf], [np.nan, 1.0]]), name="layer 'cells'")
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.arrays.InvalidInputError: layer 'cells' contains 2 non-finite ...
    """
    if not np.issubdtype(_dtype_of(data), np.floating):
        return  # integers cannot hold NaN or infinity
    count = nans = 0
    first: tuple[int, ...] | None = None
    for start, block in _blocks(data):
        n_bad, n_nan, local = _non_finite(block)
        if n_bad:
            count += n_bad
            nans += n_nan
            if first is None and local is not None:
                first = (local[0] + start, *local[1:]) if local else local
    if count:
        raise _non_finite_error(name, count, nans, first)


def value_range(data: ArrayLike, *, name: str = "image") -> tuple[float, float]:
    """Bounds of the values of ``data`` in one blockwise pass, refusing NaN and infinity.

    Integer dtypes up to 32 bits are not read: every value lies within the bounds of the dtype,
    which are returned (a whole pass over a lazy array only to tighten them is not worth it for
    scaling). Other data is read block by block (a tensor at once); NaN or infinity raise the
    detailed error of :func:`check_finite`.

    Parameters
    ----------
    data : array-like
        NumPy, dask or zarr-like array, or a torch tensor.
    name : str
        How the input is called in the error message.

    Returns
    -------
    tuple of float
        ``(low, high)`` with ``low <= data <= high``.

    Examples
    --------
    >>> value_range(np.array([[0.5, -2.0], [3.0, 1.0]]))
    (-2.0, 3.0)
    >>> value_range(np.zeros((2, 2), np.uint16))
    (0.0, 65535.0)
    """
    dtype = _dtype_of(data)
    if dtype in _DTYPE_BOUNDS:
        info = np.iinfo(dtype)
        return float(info.min), float(info.max)
    low, high = math.inf, -math.inf
    for _, block in _blocks(data):
        if isinstance(block, torch.Tensor):
            block_low, block_high = (float(v) for v in torch.aminmax(block))
        else:
            block_low, block_high = float(block.min()), float(block.max())
        if not (math.isfinite(block_low) and math.isfinite(block_high)):
            check_finite(data, name=name)  # raises with the count and the first location
        low, high = min(low, block_low), max(high, block_high)
    return low, high


def refuse_masked(data: ArrayLike, name: str = "image") -> None:
    """Refuse a NumPy masked array with masked values: the methods read the values under the
    mask, so the mask would be silently ignored (nothing masked: nothing to ignore).

    Examples
    --------
    >>> refuse_masked(np.ma.masked_less(np.arange(4.0), 1), "stack")
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.arrays.InvalidInputError: stack is a masked array (1 masked ...
    """
    masked = int(np.ma.count_masked(data)) if isinstance(data, np.ma.MaskedArray) else 0
    if masked:
        raise InvalidInputError(
            f"{name} is a masked array ({masked} masked values); the methods would read the "
            "values under the mask. Fill them first (e.g. data.filled(background)), or pass "
            "data.data to use them as they are"
        )


def validate_image(
    data: ArrayLike,
    *,
    name: str = "image",
    min_ndim: int = 2,
    max_ndim: int = 4,
    layouts: Sequence[str] | None = None,
    check_values: bool = True,
) -> None:
    """Check that ``data`` is a real, non-empty, finite array of an accepted dimensionality.

    Parameters
    ----------
    data : array-like
        NumPy, dask or zarr-like array.
    name : str
        How the input is called in error messages (e.g. ``"layer 'cells'"``).
    min_ndim, max_ndim : int
        Accepted number of dimensions (ignored when ``layouts`` is given).
    layouts : sequence of str, optional
        The axis layouts the method accepts, one letter an axis (``("TYX", "CTYX")``): their
        lengths are the accepted numbers of dimensions, and a refusal names them.
    check_values : bool
        Also scan the values for NaN/infinity (reads the whole array once).

    Raises
    ------
    InvalidInputError
        For complex, boolean, non-numeric or empty input, a wrong number of dimensions, or
        non-finite values.

    Examples
    --------
    >>> validate_image(np.ones((64, 64)), name="layer 'bf'", layouts=("ZYX",))
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.arrays.InvalidInputError: layer 'bf' has shape (64, 64), 2 dimen...
    """
    refuse_masked(data, name)
    dtype = _dtype_of(data)
    if dtype == np.bool_:
        raise InvalidInputError(
            f"{name} is boolean (a mask); expected intensities (integer or float). "
            "Convert it with .astype(numpy.float32) if you really mean 0/1 intensities."
        )
    if np.issubdtype(dtype, np.complexfloating):
        raise InvalidInputError(
            f"{name} is complex ({dtype}); expected real intensities. "
            "Pass numpy.abs(data) or data.real explicitly."
        )
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise InvalidInputError(f"{name} has dtype {dtype}; expected an integer or float dtype.")
    shape = tuple(int(s) for s in data.shape)
    if layouts is not None:
        accepted, expected = {len(layout) for layout in layouts}, layouts_text(layouts)
    else:
        accepted = set(range(min_ndim, max_ndim + 1))
        expected = f"{min_ndim} to {max_ndim} dimensions"
    if len(shape) not in accepted:
        ndim = f"{len(shape)} dimension{'s' if len(shape) != 1 else ''}"
        raise InvalidInputError(f"{name} has shape {shape}, {ndim}; expected {expected}.")
    if 0 in shape:
        raise InvalidInputError(f"{name} is empty (shape {shape}).")
    if check_values:
        check_finite(data, name=name)
