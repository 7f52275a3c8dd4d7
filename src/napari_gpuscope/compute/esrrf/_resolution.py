"""The decorrelation resolution of an eSRRF result, measured by the job itself.

With ``measure_resolution`` (:class:`~napari_gpuscope.compute.esrrf.EsrrfParams`), the eSRRF
job ends with the decorrelation analysis (Descloux et al. 2019,
:func:`~napari_gpuscope.compute.esrrf.decorrelation_resolution`, NanoPyx's algorithm) of the
first time point's eSRRF image and of that time point's widefield mean. The measurement is part
of the result (:attr:`EsrrfResult.decorrelation`), so the dock, a batch run and a script that
run one recipe record the same numbers (``summary()["decorrelation"]``, the provenance a batch
run writes into the position's attributes). Resolutions are in pixels (output pixels for the
eSRRF image, input pixels for the widefield mean): the job sees an array, not its physical
scale; the scale is beside the result (the layer's, the position's ``input.geometry``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._types import Device
from ._decorr import DecorrelationResult, decorrelation_resolution


class Reconstruction(Protocol):
    """What the measurement reads of a result (an :class:`EsrrfResult`; named by what it
    has, so that this module does not import the stream that imports it)."""

    image: np.ndarray
    widefield: np.ndarray


__all__ = ["DECORRELATION_SIDE", "ResolutionMeasurement", "measure_resolution"]

DECORRELATION_SIDE = 1024
"""The decorrelation analysis reads at most this many pixels per side (the image's centre,
said in the result): its time grows with the padded size (2-3 s at 1024^2 on one CPU thread,
10-12 s at 2048^2), and 1024 pixels hold enough structure."""


@dataclass(frozen=True)
class ResolutionMeasurement:
    """The decorrelation resolution of an eSRRF result's first time point.

    Attributes
    ----------
    esrrf, widefield : DecorrelationResult or None
        The analyses of the eSRRF image (output pixels) and of its widefield mean (input
        pixels); None when they could not be made (:attr:`note` says why).
    note : str
        Why the analysis is missing, when it is.
    region : str
        The part of the eSRRF image analysed when not all of it, e.g. ``"central 1024 x 1024
        px"`` (empty: the whole image).
    """

    esrrf: DecorrelationResult | None
    widefield: DecorrelationResult | None
    note: str = ""
    region: str = ""

    def summary(self) -> dict[str, Any]:
        """JSON-able facts: each analysis's (``resolution_px``...), the unit, note and region."""
        return {
            "esrrf": None if self.esrrf is None else self.esrrf.summary(),
            "widefield": None if self.widefield is None else self.widefield.summary(),
            "unit": "px",
            "note": self.note,
            "region": self.region or "whole image",
        }

    def describe(self) -> str:
        """``"decorrelation resolution 2.41 output px, widefield mean 3.10 input px"``."""
        if self.esrrf is None:
            return f"decorrelation resolution not measured ({self.note})"
        parts = [_words(self.esrrf, "output")]
        if self.widefield is not None:
            parts.append(f"widefield mean {_words(self.widefield, 'input')}")
        where = f" ({self.region})" if self.region else ""
        return f"decorrelation resolution{where} {', '.join(parts)}"


def _words(analysis: DecorrelationResult, pixels: str) -> str:
    if not math.isfinite(analysis.resolution):
        return "none (no correlation peak)"
    return f"{analysis.resolution:.2f} {pixels} px"


def _centre(image: np.ndarray) -> np.ndarray:
    rows, cols = image.shape
    top, left = max(0, (rows - DECORRELATION_SIDE) // 2), max(0, (cols - DECORRELATION_SIDE) // 2)
    return image[top : top + DECORRELATION_SIDE, left : left + DECORRELATION_SIDE]


def measure_resolution(result: Reconstruction, device: Device) -> ResolutionMeasurement:
    """The decorrelation analysis of ``result``'s first time point and its widefield mean.

    A failure of the analysis (e.g. no time point after an early stop) leaves the
    reconstruction standing: the measurement is then None with the reason as its note.
    """
    analyses: list[DecorrelationResult | None] = []
    note = ""
    try:
        for image in (result.image[0], result.widefield[0]):
            analyses.append(decorrelation_resolution(_centre(image), device=device))
    except Exception as exc:  # the reconstruction stands without it; the note says why
        text = str(exc).strip() or type(exc).__name__
        note = text if isinstance(exc, ValueError) else f"{text} ({type(exc).__name__})"
        analyses += [None] * (2 - len(analyses))
    region = ""
    if result.image.ndim == 3 and result.image.shape[0]:
        whole = tuple(result.image[0].shape)
        # what the analysis read (it keeps a strip's centre to 2:1), else what it was given
        shape = getattr(analyses[0], "analysed_shape", None) or _centre(result.image[0]).shape
        if tuple(shape) != whole:
            region = f"central {shape[0]} x {shape[1]} px"
    return ResolutionMeasurement(analyses[0], analyses[1], note, region)
