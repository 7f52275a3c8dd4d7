"""What the eSRRF dock adds to a run's result: the decorrelation resolution.

After the reconstruction, still in the job's worker thread (the GUI stays responsive), the
decorrelation analysis (Descloux et al. 2019,
:func:`~napari_gpuscope.compute.esrrf.decorrelation_resolution`, NanoPyx's algorithm) of the
first time point's eSRRF image and of its widefield mean is measured;
:class:`ResolvedResult` carries it into the status line (``describe()``) and the provenance
(``summary()``), in pixels and, with a physical scale, in the layer's unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_gpuscope.compute.jobs import Job, Progress
from napari_gpuscope.widgets._messages import plain_error_message

if TYPE_CHECKING:
    from napari_gpuscope.compute.esrrf import DecorrelationResult, EsrrfResult
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["DECORRELATION_SIDE", "ResolvedResult", "with_resolution"]

DECORRELATION_SIDE = 1024
"""The decorrelation analysis reads at most this many pixels per side (the image's centre,
said in the status): its time grows with the padded size (2-3 s at 1024^2 on one CPU
thread, 10-12 s at 2048^2), and 1024 pixels hold enough structure."""


@dataclass(frozen=True)
class ResolvedResult:
    """An :class:`~napari_gpuscope.compute.esrrf.EsrrfResult` with the decorrelation
    resolution of its first time point and of that time point's widefield mean.

    Everything else is the eSRRF result's (attributes, ``layers()``); ``summary()`` adds
    ``"decorrelation"`` and ``describe()`` the resolutions.

    Attributes
    ----------
    result : EsrrfResult
    esrrf, widefield : DecorrelationResult or None
        The analyses (output pixels, input pixels); None when they could not be made.
    unit : str
        The unit of the physical resolutions (``"px"`` without a physical scale).
    note : str
        Why the analysis is missing, when it is.
    region : str
        The part of the eSRRF image analysed when not all of it, e.g. ``"central 1024 x 1024
        px"`` (empty: the whole image).
    """

    result: EsrrfResult
    esrrf: DecorrelationResult | None
    widefield: DecorrelationResult | None
    unit: str = "px"
    note: str = ""
    region: str = ""

    def __getattr__(self, name: str) -> Any:
        if name == "result":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.result, name)  # the eSRRF result's attributes (image, drift...)

    def summary(self) -> dict[str, Any]:
        """The eSRRF result's facts and ``"decorrelation"`` (resolutions, unit)."""
        facts = self.result.summary()
        facts["decorrelation"] = {
            "esrrf": None if self.esrrf is None else self.esrrf.summary(),
            "widefield": None if self.widefield is None else self.widefield.summary(),
            "unit": self.unit,
            "note": self.note,
            "region": self.region or "whole image",
        }
        return facts

    def describe(self) -> str:
        """The eSRRF line, then the decorrelation resolutions."""
        text = self.result.describe()
        if self.esrrf is None:
            return f"{text}; decorrelation resolution not measured ({self.note})"
        parts = [_resolution_words(self.esrrf, "output", self.unit)]
        if self.widefield is not None:
            parts.append(f"widefield mean {_resolution_words(self.widefield, 'input', self.unit)}")
        where = f" ({self.region})" if self.region else ""
        return f"{text}; decorrelation resolution{where} {', '.join(parts)}"

    def layers(
        self, name: str = "stack", geometry: Any = None, metadata: dict[str, Any] | None = None
    ) -> list[LayerDataTuple]:
        """The eSRRF result's layers (its drift track styled and with the input's units by
        :meth:`~napari_gpuscope.compute.esrrf.DriftResult.layers`)."""
        return self.result.layers(name, geometry, metadata)


def _resolution_words(analysis: DecorrelationResult, pixels: str, unit: str) -> str:
    if not math.isfinite(analysis.resolution):
        return "none (no correlation peak)"
    text = f"{analysis.resolution:.2f} {pixels} px"
    physical = analysis.resolution_physical
    if physical is not None and math.isfinite(physical):
        text += f" ({physical:.3g} {unit})"
    return text


def _centre(image: np.ndarray) -> np.ndarray:
    rows, cols = image.shape
    top, left = max(0, (rows - DECORRELATION_SIDE) // 2), max(0, (cols - DECORRELATION_SIDE) // 2)
    return image[top : top + DECORRELATION_SIDE, left : left + DECORRELATION_SIDE]


def with_resolution(
    job: Job[EsrrfResult], device: str, pixel: tuple[float, str] | None
) -> Job[ResolvedResult]:
    """``job``, then the decorrelation analysis of its result's first time point (in the
    worker thread: the GUI stays responsive). Commands (Stop & keep) and a cancel reach
    ``job``; ``pixel`` = (input pixel size, unit), None without a physical scale."""
    from napari_gpuscope.compute.esrrf import decorrelation_resolution

    result = yield from job
    yield Progress(1.0, "Measuring the decorrelation resolution of the result...")
    magnification = result.params.magnification
    analyses: list[DecorrelationResult | None] = []
    note = ""
    try:
        for image, size in (
            (result.image[0], None if pixel is None else pixel[0] / magnification),
            (result.widefield[0], None if pixel is None else pixel[0]),
        ):
            analyses.append(
                decorrelation_resolution(_centre(image), pixel_size=size, device=device)
            )
    except Exception as exc:  # the reconstruction stands without it; the status says why
        note = plain_error_message(exc)
        analyses += [None] * (2 - len(analyses))
    unit = "px" if pixel is None else pixel[1]
    rows, cols = result.image[0].shape
    region = ""
    if max(rows, cols) > DECORRELATION_SIDE:
        region = f"central {min(rows, DECORRELATION_SIDE)} x {min(cols, DECORRELATION_SIDE)} px"
    return ResolvedResult(result, analyses[0], analyses[1], unit, note, region)
