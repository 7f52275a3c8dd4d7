"""Input validation and host/device transfer.

Inputs may be NumPy arrays, dask arrays, zarr arrays or anything else that supports
``.shape``, ``.dtype`` and slicing to NumPy (napari's multiscale and lazy layers do). They are
read region by region, so a volume larger than device (or host) memory can be streamed, and
converted to float32 *without rescaling*: a uint16 image stays in ADU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

__all__ = [
    "InvalidInputError",
    "check_finite",
    "to_device",
    "to_host",
    "validate_image",
]

# Reading this many elements at a time bounds host memory while checking huge lazy inputs.
_CHECK_BLOCK_ELEMENTS = 1 << 24


class InvalidInputError(ValueError):
    """The input array cannot be processed; the message says why and what would be valid."""


def _dtype_of(data: Any) -> np.dtype:
    try:
        return np.dtype(data.dtype)
    except (AttributeError, TypeError) as exc:
        raise InvalidInputError(
            f"expected an array with a dtype, got {type(data).__name__}"
        ) from exc


def _leading_blocks(shape: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """Regions along axis 0 holding at most ~_CHECK_BLOCK_ELEMENTS elements each."""
    if not shape:
        yield ()
        return
    per_row = max(1, int(np.prod(shape[1:], dtype=np.int64)))
    step = max(1, _CHECK_BLOCK_ELEMENTS // per_row)
    for start in range(0, shape[0], step):
        yield (slice(start, min(shape[0], start + step)),)


def check_finite(data: Any, *, name: str = "image") -> None:
    """Raise if ``data`` contains NaN or infinity, saying how many and where the first one is.

    Parameters
    ----------
    data : array-like
        NumPy, dask or zarr-like array (read block by block).
    name : str
        How the input is called in the error message (e.g. the layer name).

    Raises
    ------
    InvalidInputError
        With the number of non-finite values and the index of the first one.
    """
    if not np.issubdtype(_dtype_of(data), np.floating):
        return  # integers cannot hold NaN or infinity
    shape = tuple(int(s) for s in data.shape)
    count = 0
    first: tuple[int, ...] | None = None
    nans = 0
    for region in _leading_blocks(shape):
        block = np.asarray(data[region])
        bad = ~np.isfinite(block)
        n_bad = int(bad.sum())
        if n_bad:
            count += n_bad
            nans += int(np.isnan(block).sum())
            if first is None:
                local = np.unravel_index(int(np.argmax(bad)), block.shape)
                offset = region[0].start if region else 0
                first = (int(local[0]) + offset, *map(int, local[1:]))
    if count:
        raise InvalidInputError(
            f"{name} contains {count} non-finite value(s) ({nans} NaN, {count - nans} infinite); "
            f"the first is at index {first}. Replace or mask them (e.g. numpy.nan_to_num) first."
        )


def validate_image(
    data: Any,
    *,
    name: str = "image",
    min_ndim: int = 2,
    max_ndim: int = 4,
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
        Accepted number of dimensions.
    check_values : bool
        Also scan the values for NaN/infinity (reads the whole array once).

    Raises
    ------
    InvalidInputError
        For complex, boolean, non-numeric or empty input, a wrong number of dimensions, or
        non-finite values.
    """
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
    if not min_ndim <= len(shape) <= max_ndim:
        raise InvalidInputError(
            f"{name} has {len(shape)} dimension(s) {shape}; expected {min_ndim} to {max_ndim} "
            "(e.g. (Y, X), (Z, Y, X), (T, Y, X) or (T, Z, Y, X))."
        )
    if 0 in shape:
        raise InvalidInputError(f"{name} is empty (shape {shape}).")
    if check_values:
        check_finite(data, name=name)


def to_device(
    data: Any,
    device: str | torch.device,
    *,
    region: tuple[slice, ...] | None = None,
) -> torch.Tensor:
    """Read (a region of) an array into a contiguous float32 tensor on ``device``.

    Parameters
    ----------
    data : array-like
        NumPy, dask, zarr-like array, or a torch tensor.
    device : str or torch.device
        Target device.
    region : tuple of slice, optional
        Part to read; only that part is loaded from lazy inputs.

    Returns
    -------
    torch.Tensor
        float32, contiguous, values unchanged (no rescaling of integers).
    """
    part = data if region is None else data[region]
    if isinstance(part, torch.Tensor):
        tensor = part.to(device=device, dtype=torch.float32).contiguous()
        # A tensor that is still the caller's memory must never be written to by a solver.
        return tensor.clone() if tensor.data_ptr() == part.data_ptr() else tensor
    host = np.ascontiguousarray(np.asarray(part), dtype=np.float32)  # computes dask/zarr regions
    tensor = torch.from_numpy(host)
    if torch.device(device).type == "cuda":
        return tensor.to(device)
    if isinstance(part, np.ndarray) and np.shares_memory(host, part):
        tensor = tensor.clone()
    return tensor


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """Copy a tensor to a float32 NumPy array (a new array, safe to hand to another thread)."""
    out = tensor.detach().to("cpu", dtype=torch.float32)
    array = out.numpy()
    if out.data_ptr() == tensor.data_ptr():
        array = array.copy()
    return array
