"""The fit's checks of what it is given: the dark frame, the fitting weight, and whether the
(dark-subtracted) images hold a signal the fit can work with."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..arrays import InvalidInputError, to_device
from ._params import BasicParams
from ._stack import StackLayout

__all__ = ["MAX_INTENSITY", "MIN_SIGNAL_FRACTION", "broadcast_weight"]


def _dark_frame(dark_frame: Any, layout: StackLayout, device: torch.device) -> torch.Tensor:
    dark = to_device(dark_frame, device)
    frame = layout.frame_shape
    if tuple(dark.shape[-2:]) != frame or dark.ndim not in (2, 3):
        raise InvalidInputError(
            f"dark_frame must be (Y, X) = {frame} like the images (or (P, Y, X)), got "
            f"{tuple(dark.shape)}"
        )
    if dark.ndim == 3 and dark.shape[0] != layout.problems:
        raise InvalidInputError(
            f"dark_frame has {dark.shape[0]} planes for {layout.problems} problems"
        )
    if not bool(torch.isfinite(dark).all()):
        raise InvalidInputError("dark_frame contains NaN or infinite values")
    return (
        dark.expand(layout.problems, *frame)
        if dark.ndim == 3
        else dark[None].expand(layout.problems, *frame)
    )


MIN_SIGNAL_FRACTION = 0.05
"""A fit needs a positive mean and at least this fraction of its (dark-subtracted) pixels above
0: data below the dark level, or all zero, has no shading to fit, and the ALM still
"converged" on it to a flatfield of ~1 or NaN. Sparse fluorescence whose background sits at the
camera offset has about half its pixels at or below it, so the rule only catches images (nearly)
entirely below the dark level."""


MAX_INTENSITY = 1e15
"""Largest intensity magnitude the fit accepts: its float32 norms sum squares over the whole
working stack, which overflow from ~1e17 (a 3e38 or 2**61 stack gave a NaN profile). Camera
data stay below 1e7."""


def _check_signal(stack: torch.Tensor, source: str, params: BasicParams) -> None:
    """Refuse problems whose images are (nearly) all at or below the dark level (or zero), and
    intensities beyond :data:`MAX_INTENSITY`."""
    flat = stack.flatten(1)
    positive = (flat > 0).float().mean(dim=1)
    # One read of the device for every criterion: the worst problem's fraction (-1 when a
    # problem's mean is not positive) and the largest magnitude.
    worst = torch.where(flat.mean(dim=1) > 0, positive, torch.full_like(positive, -1.0))
    low, high = torch.aminmax(flat)
    fraction, largest = torch.stack((worst.min(), torch.maximum(-low, high))).tolist()
    if not largest <= MAX_INTENSITY:
        if not math.isfinite(largest):
            raise InvalidInputError(
                "images hold values beyond float32's range; divide them by a constant first"
            )
        divisor = 10 ** math.ceil(math.log10(largest / 1e6))
        raise InvalidInputError(
            f"images hold values up to {largest:.3g}; the fit accepts intensities up to "
            f"{MAX_INTENSITY:.0e} in magnitude (float32 sums of their squares overflow beyond). "
            f"Divide the images by a constant (e.g. {divisor:.0e}) first: the flatfield does not "
            "depend on it"
        )
    if fraction >= MIN_SIGNAL_FRACTION:
        return
    problem = int(worst.argmin())
    where = f" (problem {problem})" if stack.shape[0] > 1 else ""
    percent = f"{100 * float(positive[problem]):.0f} %"
    if source == "none":
        raise InvalidInputError(
            f"images{where}: {percent} of the pixels are above 0 and their mean is not "
            "positive (all zero, or negative); there is no signal to fit a shading profile to"
            if fraction < 0
            else f"images{where}: only {percent} of the pixels are above 0 (all zero, or "
            "negative); there is no signal to fit a shading profile to"
        )
    dark = "the dark_frame" if source == "frame" else f"camera_offset={params.camera_offset:g}"
    raise InvalidInputError(
        f"images{where}: {percent} of the pixels are above the dark level of {dark}"
        f"{', and their mean is below it' if fraction < 0 else ''}; the images must be "
        "brighter than the dark level. Check the offset (it is in the images' units, e.g. ADU) "
        "or the dark frame"
    )


def _check_weight(mask: torch.Tensor) -> None:
    """Refuse a fitting weight that marks no background pixel in some problem."""
    empty = ~mask.flatten(1).any(dim=1)
    if bool(empty.any()):
        problem = int(torch.nonzero(empty)[0, 0])
        where = f" for problem {problem}" if mask.shape[0] > 1 else ""
        raise InvalidInputError(
            f"fitting_weight has no pixel > 0{where}: pixels > 0 mark the background the fit "
            "uses, so an all-zero or negative weight would fit nothing (omit it to use every "
            "pixel)"
        )


def broadcast_weight(weight: Any, shape: tuple[int, ...], name: str = "fitting_weight") -> Any:
    """``weight`` at the images' ``shape``: as given, or a ``(Y, X)`` mask broadcast to every
    image (napari-basicpy's ``np.broadcast_to`` of a 2D mask); anything else is refused with a
    message naming ``name`` and the shapes that would do.

    Examples
    --------
    >>> import numpy as np
    >>> broadcast_weight(np.ones((4, 5)), (3, 4, 5)).shape
    (3, 4, 5)
    >>> broadcast_weight(np.ones((4, 4)), (3, 4, 5), name="fitting_weight 'cells'")
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.arrays.InvalidInputError: fitting_weight 'cells' has shape (4, 4); ...
    """
    got = tuple(int(n) for n in weight.shape)
    shape = tuple(int(n) for n in shape)
    if got == shape:
        return weight
    if got == shape[-2:]:
        if isinstance(weight, torch.Tensor):
            return weight.expand(shape)
        return np.broadcast_to(np.asarray(weight), shape)
    raise InvalidInputError(
        f"{name} has shape {got}; a mask must be (Y, X) = {shape[-2:]} (one mask for every "
        f"image) or the images' shape {shape}"
    )
