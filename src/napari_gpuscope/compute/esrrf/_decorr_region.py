"""What a decorrelation analysis reads of an image and how it prepares it, as NanoPyx does: the
central region analysed (:func:`analysed_region`, bounded by :data:`ANALYSED_SIDE` and
:data:`MAX_ASPECT`), the raised-cosine edge taper (:func:`_apodise`) and the padding to a
power-of-two square (:func:`_padded_side`, :func:`_pad`). The analysis is :mod:`._decorr`.
"""

from __future__ import annotations

import math

import torch

__all__ = ["ANALYSED_SIDE", "APODISATION_PIXELS", "MAX_ASPECT", "analysed_region"]


APODISATION_PIXELS = 20
"""Width of NanoPyx's raised-cosine edge taper, in pixels."""

ANALYSED_SIDE = 1024
"""The longest side analysed: larger images are analysed on their central region (the
resolution is a property of the optics and the sample, not of the field's extent), so memory
and time are bounded whatever the image's size."""
MAX_ASPECT = 2
"""The long side analysed is at most this many times the short one: the analysis pads to a
power-of-two square of the long side, so a 16 x 5,000 strip would be a 8,192^2 square of
padding (456 s and 6.1 GB) whose spectrum says nothing of the strip's resolution."""


def analysed_region(shape: tuple[int, int]) -> tuple[slice, slice]:
    """The central region :func:`decorrelation_resolution` analyses of an image of ``shape``:
    each side at most :data:`ANALYSED_SIDE`, the long side at most :data:`MAX_ASPECT` times
    the short one.

    Examples
    --------
    >>> analysed_region((16, 5000))
    (slice(0, 16, None), slice(2484, 2516, None))
    >>> analysed_region((300, 400))
    (slice(0, 300, None), slice(0, 400, None))
    """
    rows, cols = (int(n) for n in shape)
    short = min(rows, cols)
    keep = [min(n, ANALYSED_SIDE, MAX_ASPECT * short) for n in (rows, cols)]
    return tuple(
        slice((n - k) // 2, (n - k) // 2 + k) for n, k in zip((rows, cols), keep, strict=True)
    )  # type: ignore[return-value]


def _padded_side(shape: tuple[int, ...]) -> int:
    # NanoPyx's expression, kept so that sizes round as they do there.
    return int(2 ** math.ceil(math.log(max(shape)) / math.log(2.0)))


def _apodise(image: torch.Tensor) -> torch.Tensor:
    """NanoPyx's ``_apodize_edges``: taper the edges towards the mean of the outer pixels."""
    height, width = image.shape
    offset = APODISATION_PIXELS
    dev = image.device
    y = torch.arange(height, device=dev, dtype=torch.float64)[:, None]
    x = torch.arange(width, device=dev, dtype=torch.float64)[None, :]
    # NanoPyx uses the width for the circle's radius on both axes (and squares it, so a
    # negative radius for narrow images still selects an outer ring).
    radius = width / 2 - offset
    outside = ((y - height / 2) ** 2 + (x - width / 2) ** 2) > radius**2
    edge_mean = image.to(torch.float64)[outside].mean()
    from_x = ((x - width / 2).abs() - width / 2).abs()
    from_y = ((y - height / 2).abs() - height / 2).abs()
    band = (from_x <= offset) | (from_y <= offset)
    distance = torch.minimum(from_x.expand(height, width), from_y.expand(height, width))
    taper = (torch.cos(distance * math.pi / offset - math.pi) + 1) / 2
    tapered = taper * (image.to(torch.float64) - edge_mean) + edge_mean
    return torch.where(band, tapered, image.to(torch.float64)).to(torch.float32)


def _pad(image: torch.Tensor, side: int) -> torch.Tensor:
    """NanoPyx's ``_get_preprocessed_image``: a ``side`` square filled with the first pixel,
    the image centred horizontally and placed in the top rows."""
    height, width = image.shape
    out = torch.full((side, side), float(image[0, 0]), dtype=torch.float32, device=image.device)
    left = (side - width) // 2
    out[:height, left : left + width] = image
    return out
