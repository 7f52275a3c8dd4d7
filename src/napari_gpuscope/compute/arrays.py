"""Input validation and host/device transfer.

Inputs may be NumPy arrays, dask arrays, zarr arrays, torch tensors or anything else that
supports ``.shape``, ``.dtype`` and slicing to NumPy (napari's multiscale and lazy layers do).
They are read region by region, so a volume larger than device (or host) memory can be streamed,
and converted to float32 *without rescaling*: a uint16 image stays in ADU.

Transfers to a GPU move the input's own dtype (a uint16 image moves half the bytes of its
float32 version) through small reusable pinned buffers, and convert on the device. Results come
back with :func:`download_into`, straight into the caller's array. The checks of an input
(:func:`validate_image`, :func:`check_finite`, :func:`value_range`, :func:`refuse_masked`,
:class:`InvalidInputError`, and :func:`layouts_text`, the accepted axis layouts in words) are
in :mod:`._input_checks`; this module is their public home.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._input_checks import (
    ANY_IMAGE,
    InvalidInputError,
    _dtype_of,
    check_finite,
    layouts_text,
    refuse_masked,
    validate_image,
    value_range,
)
from ._types import ArrayLike

__all__ = [
    "ANY_IMAGE",
    "InvalidInputError",
    "check_finite",
    "download_into",
    "layouts_text",
    "refuse_masked",
    "to_device",
    "to_host",
    "validate_image",
    "value_range",
]

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
