"""Input validation and host/device transfer.

Inputs may be NumPy arrays, dask arrays, zarr arrays, torch tensors or anything else that
supports ``.shape``, ``.dtype`` and slicing to NumPy (napari's multiscale and lazy layers do).
They are read region by region, so a volume larger than device (or host) memory can be streamed,
and converted to float32 *without rescaling*: a uint16 image stays in ADU.

Transfers to a GPU move the input's own dtype (a uint16 image moves half the bytes of its
float32 version) through small reusable pinned buffers, and convert on the device. Results come
back with :func:`download_into`, straight into the caller's array. :func:`check_finite` and
:func:`value_range` read an input block by block, so a lazy array is never loaded whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from ._types import ArrayLike

__all__ = [
    "InvalidInputError",
    "check_finite",
    "download_into",
    "refuse_masked",
    "to_device",
    "to_host",
    "validate_image",
    "value_range",
]

# Reading this many elements at a time bounds host memory while checking huge lazy inputs.
_CHECK_BLOCK_ELEMENTS = 1 << 24
# Integer dtypes whose value range is their dtype's (see value_range): no read needed.
_DTYPE_BOUNDS = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)}
# Host-to-device copies go through two pinned buffers of this size, so the host copy of one
# piece overlaps the DMA of the previous one and the pinned memory held stays small.
_STAGING_BYTES = 1 << 24
# Dtypes the device converts to float32 itself (others are converted on the host first).
_DEVICE_DTYPES = {
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
}
# Unsigned types without full torch support move as their signed bit pattern and are widened on
# the device: uint16 -> int16 -> int32 & 0xFFFF, uint32 -> int32 -> int64 & 0xFFFFFFFF.
_UNSIGNED_AS_SIGNED = {
    np.dtype(np.uint16): (np.int16, torch.int16, torch.int32, 0xFFFF),
    np.dtype(np.uint32): (np.int32, torch.int32, torch.int64, 0xFFFFFFFF),
}


class InvalidInputError(ValueError):
    """The input array cannot be processed; the message says why and what would be valid."""


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
    if not min_ndim <= len(shape) <= max_ndim:
        raise InvalidInputError(
            f"{name} has {len(shape)} dimension(s) {shape}; expected {min_ndim} to {max_ndim} "
            "(e.g. (Y, X), (Z, Y, X), (T, Y, X) or (T, Z, Y, X))."
        )
    if 0 in shape:
        raise InvalidInputError(f"{name} is empty (shape {shape}).")
    if check_values:
        check_finite(data, name=name)


def _stage_to_device(host: np.ndarray, device: torch.device) -> torch.Tensor:
    """Copy a host array to ``device`` in its own dtype, through two pinned staging buffers.

    Works for read-only and strided arrays alike (NumPy copies into the pinned buffer; no torch
    view of the caller's memory is ever made).
    """
    dtype = torch.from_numpy(np.empty(0, dtype=host.dtype)).dtype
    out = torch.empty(host.shape, dtype=dtype, device=device)
    if host.size == 0:
        return out
    source = host.reshape(-1) if host.flags.c_contiguous else None
    flat_out = out.view(-1)
    piece = max(1, _STAGING_BYTES // host.itemsize)
    if source is None:  # strided region: copy it whole-rows at a time along axis 0
        rows = max(1, piece // max(1, math.prod(host.shape[1:])))
        pieces = [(r, min(host.shape[0], r + rows)) for r in range(0, host.shape[0], rows)]
        row_size = math.prod(host.shape[1:])
        spans = [(a * row_size, b * row_size) for a, b in pieces]
        piece = rows * row_size
    else:
        spans = [(a, min(host.size, a + piece)) for a in range(0, host.size, piece)]
    stream = torch.cuda.current_stream(device)
    count = min(2, len(spans))
    buffers = [torch.empty(piece, dtype=dtype, pin_memory=True) for _ in range(count)]
    events: list[torch.cuda.Event | None] = [None] * count
    for k, (start, stop) in enumerate(spans):
        slot = k % count
        if events[slot] is not None:
            events[slot].synchronize()  # its previous DMA has finished: the buffer is free
        staged = buffers[slot][: stop - start]
        if source is not None:
            np.copyto(staged.numpy(), source[start:stop], casting="no")
        else:
            rows = host[pieces[k][0] : pieces[k][1]]
            np.copyto(staged.numpy().reshape(rows.shape), rows, casting="no")
        flat_out[start:stop].copy_(staged, non_blocking=True)
        event = torch.cuda.Event()
        event.record(stream)
        events[slot] = event
    return out


def _converted(raw: torch.Tensor, host_dtype: np.dtype) -> torch.Tensor:
    """float32 version of a raw upload (a new tensor unless ``raw`` is float32 already)."""
    if host_dtype in _UNSIGNED_AS_SIGNED:
        _, _, wide, mask = _UNSIGNED_AS_SIGNED[host_dtype]
        return raw.to(wide).bitwise_and_(mask).to(torch.float32)
    return raw.to(torch.float32)


def to_device(
    data: ArrayLike,
    device: str | torch.device,
    *,
    region: tuple[slice, ...] | None = None,
) -> torch.Tensor:
    """Read (a region of) an array into a contiguous float32 tensor on ``device``.

    Parameters
    ----------
    data : array-like
        NumPy, dask, zarr-like array, or a torch tensor (on any device; never modified).
    device : str or torch.device
        Target device.
    region : tuple of slice, optional
        Part to read; only that part is loaded from lazy inputs.

    Returns
    -------
    torch.Tensor
        float32, contiguous, values unchanged (no rescaling of integers; values beyond
        float32's range become infinite, so check them first, e.g. with
        :func:`value_range`), never sharing memory with ``data``.

    Examples
    --------
    >>> import numpy as np
    >>> to_device(np.arange(4, dtype=np.uint16).reshape(2, 2), "cpu")
    tensor([[0., 1.],
            [2., 3.]])
    """
    target = torch.device(device)
    part = data if region is None else data[region]
    if isinstance(part, torch.Tensor):
        _dtype_of(part)  # a clear error for dtypes NumPy cannot represent
        tensor = part.detach().to(target).to(torch.float32).contiguous()
        if tensor.data_ptr() == part.data_ptr():
            # Still the caller's memory: a solver must never write to it.
            tensor = tensor.clone()
    elif target.type == "cuda":
        host = np.asarray(part)  # computes dask/zarr regions
        host_dtype = host.dtype
        if host_dtype in _UNSIGNED_AS_SIGNED:
            host = host.view(_UNSIGNED_AS_SIGNED[host_dtype][0])
        elif host_dtype not in _DEVICE_DTYPES:
            host = host.astype(np.float32)
            host_dtype = host.dtype
        tensor = _converted(_stage_to_device(host, target), host_dtype)
    else:
        # A float32 copy on the host: writable (no torch warning for read-only inputs) and
        # independent of the caller's array.
        with np.errstate(over="ignore"):  # beyond float32 -> inf, as on the device
            converted = np.array(np.asarray(part), dtype=np.float32, order="C")
        tensor = torch.from_numpy(converted)
    return tensor


def download_into(out: np.ndarray, tensor: torch.Tensor) -> None:
    """Copy a tensor into a NumPy array (or a view of one), with no intermediate host array.

    From a GPU the data comes through two small pinned buffers (the DMA of one piece overlaps
    the host copy of the previous one), which is several times faster than a pageable copy into
    freshly allocated memory.

    Parameters
    ----------
    out : numpy.ndarray
        Writable float32 array (e.g. ``result[region]``) of the tensor's shape.
    tensor : torch.Tensor
        On any device; converted to float32.

    Examples
    --------
    >>> import numpy as np, torch
    >>> out = np.zeros((2, 3), np.float32)
    >>> download_into(out[:, 1:], torch.ones(2, 2))
    >>> out
    array([[0., 1., 1.],
           [0., 1., 1.]], dtype=float32)
    """
    if tuple(out.shape) != tuple(tensor.shape):
        raise ValueError(f"shapes differ: out {out.shape}, tensor {tuple(tensor.shape)}")
    tensor = tensor.detach()
    if tensor.device.type != "cuda" or out.size == 0:
        torch.from_numpy(out).copy_(tensor)
        return
    source = tensor.to(torch.float32).contiguous().view(-1)
    rows = out.reshape(-1) if out.flags.c_contiguous else None
    if rows is None:  # a strided view: piece by piece along axis 0
        row_size = math.prod(out.shape[1:])
        per_piece = max(1, (_STAGING_BYTES // 4) // max(1, row_size))
        spans = [(r, min(out.shape[0], r + per_piece)) for r in range(0, out.shape[0], per_piece)]
        pieces = [(a * row_size, b * row_size) for a, b in spans]
    else:
        step = _STAGING_BYTES // 4
        pieces = [(a, min(out.size, a + step)) for a in range(0, out.size, step)]
    size = max(b - a for a, b in pieces)
    count = min(2, len(pieces))
    buffers = [torch.empty(size, dtype=torch.float32, pin_memory=True) for _ in range(count)]
    events = [torch.cuda.Event() for _ in range(count)]
    stream = torch.cuda.current_stream(tensor.device)

    def start(k: int) -> None:
        a, b = pieces[k]
        buffers[k % count][: b - a].copy_(source[a:b], non_blocking=True)
        events[k % count].record(stream)

    start(0)
    for k, (a, b) in enumerate(pieces):
        if k + 1 < len(pieces):
            start(k + 1)  # its slot held piece k - 1, already copied out below

        events[k % count].synchronize()
        staged = buffers[k % count][: b - a].numpy()
        if rows is not None:
            rows[a:b] = staged
        else:
            first, last = spans[k]
            out[first:last] = staged.reshape((last - first, *out.shape[1:]))


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """Copy a tensor to a float32 NumPy array (a new array, safe to hand to another thread)."""
    out = tensor.detach().to("cpu", dtype=torch.float32)
    array = out.numpy()
    if out.data_ptr() == tensor.data_ptr():
        array = array.copy()
    return array
