"""Input checks and the working-size stack, read frame chunk by frame chunk.

Only ``chunk`` frames of the full-size input are in memory at a time, so NumPy memmaps, zarr
and dask arrays larger than RAM are shrunk without being loaded whole (BaSiCPy #127).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._types import ArrayLike
from ..arrays import InvalidInputError, refuse_masked, to_device

FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest value the fit computes with (float32)."""

__all__ = ["StackLayout", "check_images", "frames", "resize_frames", "working_shape"]

FRAME_BYTES_PER_READ = 64 * 2**20
"""Host bytes of full-size frames read (and resized) at once."""


@dataclass(frozen=True)
class StackLayout:
    """Where the images, the independent problems and the frames are in the input."""

    shape: tuple[int, ...]
    batch_axis: int | None
    """Axis of independent problems (channels, z-planes) of a 4D input, normalised."""

    @property
    def problems(self) -> int:
        return 1 if self.batch_axis is None else self.shape[self.batch_axis]

    @property
    def frame_shape(self) -> tuple[int, int]:
        return self.shape[-2], self.shape[-1]

    @property
    def n_frames(self) -> int:
        axes = [s for i, s in enumerate(self.shape[:-2]) if i != self.batch_axis]
        return axes[0]


def check_images(images: ArrayLike, batch_axis: int | None, name: str = "images") -> StackLayout:
    """Check shape and dtype (values are checked while reading). Raise a clear error."""
    refuse_masked(images, name)
    shape = getattr(images, "shape", None)
    dtype = getattr(images, "dtype", None)
    if shape is None or dtype is None:
        raise InvalidInputError(f"{name} must be an array (NumPy, dask, zarr or torch)")
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(str(dtype).replace("torch.", ""))
    if dtype.kind not in "uif":
        raise InvalidInputError(
            f"{name} must hold real numbers (integers or floats), got dtype {dtype}"
        )
    if len(shape) == 4:
        if batch_axis is None:
            raise InvalidInputError(
                f"{name} is 4D {shape}: say which axis holds independent problems (channels "
                "or z-planes), e.g. batch_axis=0 for (C, T, Y, X) or batch_axis=1 for "
                "(T, Z, Y, X); each is fitted on its own"
            )
        if not -4 <= batch_axis <= 1 and batch_axis not in (2, 3):
            raise InvalidInputError(f"batch_axis must be in [-4, 3], got {batch_axis}")
        batch_axis %= 4
        if batch_axis >= 2:
            raise InvalidInputError(
                f"batch_axis={batch_axis} is an image axis; independent problems must be axis "
                "0 or 1 of a 4D (T, Z, Y, X) or (C, T, Y, X) input"
            )
    elif len(shape) == 3:
        if batch_axis is not None:
            raise InvalidInputError(
                f"batch_axis is only for 4D inputs; {name} is 3D {shape} (T, Y, X)"
            )
    else:
        raise InvalidInputError(
            f"{name} must be a stack of images (T, Y, X), or 4D with a batch_axis; got "
            f"{len(shape)}D shape {shape}"
        )
    layout = StackLayout(shape, batch_axis)
    if layout.n_frames < 2:
        raise InvalidInputError(
            f"{name} holds {layout.n_frames} image per problem: BaSiC needs a stack of several "
            "tiles or frames (at least 2; dozens or more for a good estimate)"
        )
    if min(layout.frame_shape) < 2:
        raise InvalidInputError(f"{name} images must be at least 2 x 2 pixels, got {shape[-2:]}")
    return layout


def working_shape(frame_shape: tuple[int, int], working_size: int) -> tuple[int, int]:
    """The fit's image shape: the longer side at ``working_size``, aspect ratio kept, never
    enlarged.

    BaSiCPy stretched every image to a square, distorting the shading of non-square tiles, and
    enlarged small images (which adds cost, not information).

    Examples
    --------
    >>> [working_shape(s, 128) for s in ((512, 1024), (300, 300), (64, 64))]
    [(64, 128), (128, 128), (64, 64)]
    """
    y, x = frame_shape
    scale = min(1.0, working_size / max(y, x))
    return max(4, round(y * scale)), max(4, round(x * scale))


def frames(images: ArrayLike, layout: StackLayout, problem: int, start: int, stop: int) -> Any:
    """Frames ``start:stop`` of one problem, still lazy for dask/zarr/memmap inputs."""
    if layout.batch_axis is None:
        return images[start:stop]
    if layout.batch_axis == 0:
        return images[problem, start:stop]
    return images[start:stop, problem]


def resize_frames(
    block: torch.Tensor, shape: tuple[int, int], mode: str = "bilinear"
) -> torch.Tensor:
    """Resize ``(N, Y, X)`` frames as BaSiCPy does (bilinear, corners aligned, antialiased)."""
    if tuple(block.shape[-2:]) == tuple(shape):
        return block
    if mode == "nearest":
        return F.interpolate(block[:, None], size=shape, mode="nearest")[:, 0]
    return F.interpolate(
        block[:, None], size=shape, mode="bilinear", align_corners=True, antialias=True
    )[:, 0]


def read_block(
    images: ArrayLike,
    layout: StackLayout,
    problem: int,
    start: int,
    stop: int,
    device: torch.device,
    name: str = "images",
) -> torch.Tensor:
    """Frames ``start:stop`` of one problem as float32 on ``device``; refuses NaN and infinity."""
    raw = frames(images, layout, problem, start, stop)
    block = to_device(raw, device)
    # Integers are finite in float32 (the largest, 2**64, is far below its maximum): no pass.
    integer = (
        not (raw.dtype.is_floating_point or raw.dtype.is_complex)
        if isinstance(raw.dtype, torch.dtype)
        else np.dtype(raw.dtype).kind in "uib"
    )
    if not integer and not bool(torch.isfinite(block).all()):
        bad = (~torch.isfinite(block)).flatten(1).any(dim=1).nonzero().flatten()
        where = f"frame {start + int(bad[0])}"
        if layout.batch_axis is not None:
            where += f" of problem {problem} (batch axis {layout.batch_axis})"
        source = raw[int(bad[0])]
        source = source.cpu().numpy() if isinstance(source, torch.Tensor) else np.asarray(source)
        if np.isfinite(source).all():  # finite, beyond float32 (the fit's precision)
            largest = float(np.abs(source).max())
            raise InvalidInputError(
                f"{name} hold values up to {largest:.3g} ({where}), beyond float32's range "
                f"(+-{FLOAT32_MAX:.3g}) the fit computes in; rescale them (the "
                "flatfield does not depend on their scale)"
            )
        raise InvalidInputError(
            f"{name} contain NaN or infinite values ({where}); replace or mask them first"
        )
    return block


def frames_per_read(layout: StackLayout) -> int:
    """Frames read at once: about :data:`FRAME_BYTES_PER_READ` of float32."""
    y, x = layout.frame_shape
    return max(1, min(layout.n_frames, FRAME_BYTES_PER_READ // (4 * y * x)))
