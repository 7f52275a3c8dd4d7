"""Drift correction: each frame moved back by its drift, by separable Catmull-Rom
resampling (exact for integer shifts), streamed in chunks planned from device memory.

The drift convention is :mod:`._drift`'s: frame ``t`` shows frame 0's content moved by
``+shifts[t]``, so frame ``t`` is moved by ``-shifts[t]``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._types import ArrayLike, Device
from ..arrays import InvalidInputError, download_into, to_device, validate_image
from ..devices import device_context
from ..jobs import Job, Progress, blocking
from ..memory import check_budget, plan_chunk, run_in_chunks
from ..params import ParameterError
from ._reader import FrameReader
from ._resample import catmull_rom_weights

__all__ = ["check_shifts", "correct_drift", "iter_correct_drift", "shift_frames"]

MIN_FRAME = 8
"""Smallest frame side a correlation is computed on."""

CPU_CHUNK = 8
GPU_CHUNK = 64


# ----------------------------------------------------------------------------- correction
def _shift_axis(frames: torch.Tensor, shift: np.ndarray, axis: int) -> torch.Tensor:
    """``out[b, ..., i, ...] = frames[b, ..., i + shift[b], ...]`` along ``axis`` (1 or 2)
    of ``(B, H, W)``, Catmull-Rom, edge pixels repeated outside the frame.

    The shift is one number per frame, so each tap is a slice of the edge-padded frames times
    one weight (no per-pixel index tensor: 8 bytes an element that a gather would read)."""
    n = frames.shape[axis]
    # Beyond the frame every tap reads the edge pixel, so larger shifts change nothing.
    base = np.clip(np.floor(shift), -(n + 1), n + 1).astype(np.int64)
    weights = catmull_rom_weights(torch.as_tensor(shift - np.floor(shift))).numpy()  # (B, 4)
    pad = int(np.abs(base).max()) + 2
    padding = (0, 0, pad, pad) if axis == 1 else (pad, pad, 0, 0)
    padded = torch.nn.functional.pad(frames[None], padding, mode="replicate")[0]
    out = torch.zeros_like(frames)
    for b in range(frames.shape[0]):
        for tap in range(4):
            weight = float(weights[b, tap])
            if weight == 0.0:
                continue  # integer shifts: three of the four taps are zero
            first = pad + int(base[b]) + tap - 1
            part = padded[b].narrow(axis - 1, first, n)
            out[b].add_(part, alpha=weight)
    return out


def shift_frames(frames: torch.Tensor, shifts: Any) -> torch.Tensor:
    """Frames moved back by their drift: ``out[b, y, x] = frames[b, y + dy_b, x + dx_b]``.

    Parameters
    ----------
    frames : torch.Tensor
        float32 ``(B, H, W)``.
    shifts : array-like
        ``(B, 2)`` ``(dy, dx)`` per frame, on the host (NumPy: the weights and slices are
        planned there, so a GPU never waits for a copy back).

    Returns
    -------
    torch.Tensor
        float32 ``(B, H, W)``; separable Catmull-Rom interpolation (rows, then columns),
        samples outside the frame take the nearest edge pixel; integer shifts are exact.

    Examples
    --------
    >>> f = torch.arange(16.0).reshape(1, 4, 4)
    >>> shift_frames(f, [[0.0, 1.0]])[0, 0].tolist()
    [1.0, 2.0, 3.0, 3.0]
    """
    shifts = np.asarray(shifts, dtype=np.float64).reshape(-1, 2)
    out = _shift_axis(frames, shifts[:, 0], 1)
    return _shift_axis(out, shifts[:, 1], 2)


def check_shifts(
    shifts: Any,
    n_frames: int,
    *,
    name: str = "shifts",
    frame_shape: tuple[int, int] | None = None,
) -> np.ndarray:
    """A drift trace as float64 ``(T, 2)``, or a ValueError saying what is valid: real,
    finite, unmasked numbers, one ``(dy, dx)`` per frame, each below ``frame_shape`` (when
    given) in size.

    Examples
    --------
    >>> check_shifts([[0, 0], [0.5, -1]], 2).dtype
    dtype('float64')
    """
    if np.ma.isMaskedArray(shifts) and np.ma.getmaskarray(shifts).any():
        raise ParameterError(
            f"{name} has masked values; a drift trace needs a (dy, dx) for every frame "
            "(fill or interpolate the masked frames first)"
        )
    try:
        raw = np.asarray(np.ma.getdata(shifts))
    except ValueError as error:  # ragged rows
        raise ParameterError(
            f"{name} is not a (T, 2) array of numbers ({error}); a drift trace is (dy, dx) "
            "per frame"
        ) from None
    if raw.dtype.kind not in "iuf":
        what = {"b": "True/False values", "c": "complex numbers"}.get(raw.dtype.kind, raw.dtype)
        raise ParameterError(
            f"{name} holds {what}; a drift trace is real numbers, (dy, dx) per frame in pixels"
        )
    array = raw.astype(np.float64)
    if array.ndim != 2 or array.shape[1] != 2:
        raise ParameterError(
            f"{name} has shape {array.shape}; a drift trace is (T, 2): (dy, dx) per frame"
        )
    if array.shape[0] != n_frames:
        raise ParameterError(
            f"{name} holds {array.shape[0]} frame(s) but the stack has {n_frames}; a drift "
            "trace needs one (dy, dx) per frame (was it estimated on another stack?)"
        )
    if not np.isfinite(array).all():
        bad = int(np.nonzero(~np.isfinite(array).all(axis=1))[0][0])
        raise ParameterError(f"{name}[{bad}] is not finite ({array[bad].tolist()})")
    if frame_shape is not None:
        too_far = np.abs(array) >= np.asarray(frame_shape, dtype=np.float64)
        if too_far.any():
            bad = int(np.nonzero(too_far.any(axis=1))[0][0])
            raise ParameterError(
                f"{name}[{bad}] = {array[bad].tolist()} moves the frame by its whole size "
                f"{tuple(frame_shape)} or more; a drift must stay below the frame size"
            )
    return array


def _check_stack(stack: ArrayLike, name: str) -> tuple[int, int, int]:
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)
    shape = tuple(int(s) for s in stack.shape)
    if len(shape) != 3:
        raise InvalidInputError(
            f"{name} has {len(shape)} dimension(s) {shape}; drift is estimated and corrected "
            "on a time series (T, Y, X)"
        )
    validate_image(stack, name=name, layouts=("TYX",), check_values=False)
    if min(shape[1:]) < MIN_FRAME:
        raise InvalidInputError(
            f"{name} frames are {shape[1]} x {shape[2]} pixels; drift needs at least "
            f"{MIN_FRAME} pixels per side"
        )
    return shape  # type: ignore[return-value]


def _frames_on_device(host: Any, device: torch.device, name: str, first: int) -> torch.Tensor:
    frames = to_device(host, device)
    if not bool(torch.isfinite(frames).all()):
        bad = int(torch.nonzero(~torch.isfinite(frames).flatten(1).all(1))[0, 0])
        if np.isfinite(
            np.asarray(host[bad] if not isinstance(host, torch.Tensor) else host[bad].cpu())
        ).all():
            raise InvalidInputError(
                f"{name} frame {first + bad} holds values beyond float32's range (|value| > "
                "3.4e38); drift is computed in float32: divide the stack by a constant first"
            )
        raise InvalidInputError(
            f"{name} frame {first + bad} holds NaN or infinite values; drift needs finite "
            "intensities (replace them, e.g. numpy.nan_to_num)"
        )
    return frames


def iter_correct_drift(
    stack: ArrayLike,
    shifts: Any,
    *,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    device: str | torch.device | None = None,
) -> Job[np.ndarray]:
    """Drift correction as a job: every frame moved back by its drift, chunk by chunk.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames, any real dtype (NumPy, dask, zarr, torch); never modified.
    shifts : array-like
        ``(T, 2)`` drift trace ``(dy, dx)`` in input pixels (frame ``t`` shows frame 0's
        content moved by ``+shifts[t]``), e.g. :attr:`DriftResult.shifts`.
    frames_per_chunk : int, optional
        At most this many frames per device chunk (default 64 on a GPU, 8 on the CPU; fewer
        when device memory is short).
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory.
    name : str
        How the input is called in error messages.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` runs on the CPU.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` per chunk; returns float32
        ``(T, Y, X)``.

    Notes
    -----
    Separable Catmull-Rom interpolation (the kernel eSRRF magnifies with): exact for integer
    shifts, reproduces quadratic intensity profiles, no ringing; a half-pixel shift slightly
    smooths the frame. Pixels whose source lies outside the frame repeat the nearest edge
    pixel (a band as wide as the drift along the edges holds no new information).
    """
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)  # a nested list: as NumPy reads it
    n, height, width = _check_stack(stack, name)
    shifts = check_shifts(shifts, n, frame_shape=(height, width))
    memory_budget = check_budget(memory_budget)
    return _correct(stack, shifts, frames_per_chunk, memory_budget, name, device)


def _correct(
    stack: ArrayLike,
    shifts: np.ndarray,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Device,
) -> Job[np.ndarray]:
    n, height, width = (int(s) for s in stack.shape)
    out = np.empty((n, height, width), np.float32)
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        per_frame = correction_bytes_per_frame(height, width, int(stack.dtype.itemsize))
        cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
        chunk = plan_chunk(
            min(n, cap), per_frame, dev, budget=memory_budget, what="drift correction"
        )

        def process(start: int, stop: int) -> Job[None]:
            frames = _frames_on_device(reader.read(start, stop, prefetch_until=n), dev, name, start)
            download_into(out[start:stop], shift_frames(frames, shifts[start:stop]))
            del frames
            if not np.isfinite(out[start:stop]).all():
                raise InvalidInputError(
                    f"{name} frames {start}-{stop - 1}: the interpolation overflowed float32 "
                    "(intensities near 3.4e38); divide the stack by a constant first"
                )
            yield Progress(1.0, f"drift correction: frames {start}-{stop - 1} of {n}")

        yield from run_in_chunks(
            n,
            chunk,
            process,
            device=dev,
            bytes_per_item=per_frame,
            budget=memory_budget,
            what="drift correction",
        )
    return out


def correction_bytes_per_frame(height: int, width: int, itemsize: int) -> int:
    """Device bytes one more frame costs in :func:`shift_frames`: the raw upload, the float32
    frame, its edge-padded copy (drifts up to a frame's side), the row pass and the output."""
    return height * width * (itemsize + 4 * 5)


correct_drift = blocking(iter_correct_drift)
correct_drift.__doc__ = """The stack with its drift removed; blocking version of
:func:`iter_correct_drift` (same parameters).

Returns
-------
numpy.ndarray
    float32 ``(T, Y, X)``.

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.esrrf import correct_drift
>>> stack = np.zeros((2, 8, 8), np.uint16); stack[0, 3, 3] = stack[1, 4, 5] = 100
>>> aligned = correct_drift(stack, [[0, 0], [1, 2]], device="cpu")
>>> float(aligned[1, 3, 3])
100.0
"""
