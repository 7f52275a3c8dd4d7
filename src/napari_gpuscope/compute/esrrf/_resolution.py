"""The resolution of an eSRRF result, measured by the job itself, and when it is valid.

With ``measure_resolution`` (:class:`~napari_gpuscope.compute.esrrf.EsrrfParams`), the eSRRF
job ends with two measures of the first time point:

- the **FRC resolution** (:func:`~napari_gpuscope.compute.esrrf.frc_resolution` at 1/7) of
  the reconstructions of its even and of its odd frames, two independent halves of the data
  (:mod:`._resolution_frc`): the headline, when the time point holds at least
  :data:`MIN_FRC_FRAMES` frames;
- the **decorrelation resolution** (Descloux et al. 2019,
  :func:`~napari_gpuscope.compute.esrrf.decorrelation_resolution`, NanoPyx's algorithm) of the
  eSRRF image and of the widefield mean. On an eSRRF image it mostly measures the output pixel
  grid: the same data give about 2.1 output px at M 2 and 2.35 at M 5 (0.104 and 0.047 µm), as
  the magnified image carries sharp detail at every scale down to its own Nyquist frequency.
  A value below :data:`PIXEL_LIMIT_PX` output pixels (a peak in the top fifth of the
  frequencies) is therefore reported as *limited by the pixel grid*, not as a resolution.

The measurement is part of the result (:attr:`EsrrfResult.decorrelation`), so the dock, a batch
run and a script that run one recipe record the same numbers (``summary()["decorrelation"]``).
Resolutions are kept in pixels (output pixels for the eSRRF image, input pixels for the
widefield mean): the job sees an array, not its physical scale. :meth:`ResolutionMeasurement.
in_units` adds the input's pixel size for the words (the dock gives its layer's).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._types import Device
from ._decorr import DecorrelationResult, decorrelation_resolution
from ._params import EsrrfParams


class Reconstruction(Protocol):
    """What the measurement reads of a result (an :class:`EsrrfResult`; named by what it
    has, so that this module does not import the stream that imports it)."""

    image: np.ndarray
    widefield: np.ndarray
    params: EsrrfParams


__all__ = [
    "DECORRELATION_SIDE",
    "MIN_FRC_FRAMES",
    "PIXEL_LIMIT_PX",
    "ResolutionMeasurement",
    "format_length",
    "measure_resolution",
]

DECORRELATION_SIDE = 1024
"""The decorrelation analysis reads at most this many pixels per side (the image's centre,
said in the result): its time grows with the padded size (2-3 s at 1024^2 on one CPU thread,
10-12 s at 2048^2), and 1024 pixels hold enough structure."""

PIXEL_LIMIT_PX = 2.5
"""A decorrelation resolution below this many pixels (``k_c > 0.8`` of Nyquist) sits at the
pixel grid's limit: the analysis cannot see finer than 2 pixels, and on an eSRRF image a peak
that high comes from the magnified grid, whatever M (2.08 output px at M 2, 2.35 at M 5 on the
sample, whose PSF is 3 input px wide)."""

MIN_FRC_FRAMES = 20
"""The FRC needs two halves of at least 10 frames each: fewer blinking frames reconstruct too
few emitters per half for the halves to share structure (the FRC then measures shot noise)."""

_MICRO = ("µm", "um", "μm", "micron", "microns", "micrometer", "micrometre")


def format_length(value_px: float, pixel_size: float | None, unit: str, pixels: str) -> str:
    """``value_px`` pixels as a length: nm or µm when the pixel size is in µm, the layer's
    unit otherwise, ``"<value> <pixels> px"`` without a pixel size.

    Examples
    --------
    >>> format_length(1.63, 0.1, "µm", "input")
    '163 nm'
    >>> format_length(2.35, None, "", "output")
    '2.35 output px'
    """
    if pixel_size is None or not unit or unit == "px":
        return f"{value_px:.3g} {pixels} px"
    length = value_px * pixel_size
    if unit in _MICRO and length < 1:
        return f"{length * 1000:.3g} nm"
    return f"{length:.3g} {'µm' if unit in _MICRO else unit}"


@dataclass(frozen=True)
class ResolutionMeasurement:
    """The resolution of an eSRRF result's first time point: FRC and decorrelation.

    Attributes
    ----------
    esrrf, widefield : DecorrelationResult or None
        The decorrelation analyses of the eSRRF image (output pixels) and of its widefield
        mean (input pixels); None when they could not be made (:attr:`note` says why).
    note : str
        Why the decorrelation analysis is missing, when it is.
    region : str
        The part of the eSRRF image analysed when not all of it, e.g. ``"central 1024 x 1024
        px"`` (empty: the whole image).
    frc : float or None
        FRC resolution of the even against the odd frames, in output pixels; NaN when there
        is no crossing to report (the halves do not correlate, one is constant, or they agree
        up to one input pixel); None when not measured (:attr:`frc_note` says why).
    frc_note : str
        Why the FRC is not measured (None) or not a number (NaN), in words.
    frc_floor_limited : bool
        Whether the FRC crossed the 3-sigma noise floor of rings too small for 1/7
        (:func:`._resolution_frc.frc_with_noise_floor`): :attr:`frc` is then an upper bound,
        the frame too small to show finer.
    magnification : int
        Output pixels per input pixel (to say output pixels in input pixels).
    pixel_size, unit : float or None, str
        The input's pixel size and unit, for the words only (:meth:`in_units`); not in
        :meth:`summary`, which stays in pixels as the job measured.
    """

    esrrf: DecorrelationResult | None
    widefield: DecorrelationResult | None
    note: str = ""
    region: str = ""
    frc: float | None = None
    frc_note: str = ""
    frc_floor_limited: bool = False
    magnification: int = 1
    pixel_size: float | None = None
    unit: str = ""

    @property
    def pixel_limited(self) -> bool:
        """Whether the eSRRF image's decorrelation resolution sits at the pixel grid's limit
        (below :data:`PIXEL_LIMIT_PX` output pixels): then it is no resolution."""
        value = None if self.esrrf is None else self.esrrf.resolution
        return value is not None and math.isfinite(value) and value < PIXEL_LIMIT_PX

    @property
    def frc_informative(self) -> bool:
        """Whether the FRC says something: measured, and, when only its noise-floor bound is
        known, finer than the widefield mean's decorrelation (a bound coarser than the
        widefield image's own detail tells nothing about the reconstruction)."""
        if self.frc is None or not math.isfinite(self.frc):
            return False
        wf = None if self.widefield is None else self.widefield.resolution
        if self.frc_floor_limited and wf is not None and math.isfinite(wf):
            return self.frc / self.magnification < wf
        return True

    @property
    def headline_px(self) -> tuple[str, float] | None:
        """``(measure, output pixels)`` of the resolution to report: the FRC when it is
        informative (:attr:`frc_informative`), else the decorrelation when not pixel-limited;
        None when neither is valid."""
        if self.frc_informative:
            return "FRC", float(self.frc)
        value = None if self.esrrf is None else self.esrrf.resolution
        if value is not None and math.isfinite(value) and not self.pixel_limited:
            return "decorrelation", float(value)
        return None

    def in_units(self, pixel_size: float | None, unit: str) -> ResolutionMeasurement:
        """The same measurement said in the input's physical unit (``pixel_size`` per input
        pixel); ``None`` or ``"px"`` keeps pixels."""
        valid = pixel_size is not None and math.isfinite(pixel_size) and pixel_size > 0
        return dataclasses.replace(
            self, pixel_size=float(pixel_size) if valid else None, unit=unit if valid else ""
        )

    def _out(self, value_px: float) -> str:
        """Output pixels as a length (input px x ... without a unit: output px)."""
        m = self.magnification
        if self.pixel_size is None:
            return format_length(value_px, None, "", "output")
        return format_length(value_px, self.pixel_size / m, self.unit, "output")

    def _frc_words(self) -> str:
        if self.frc is None:
            return f"FRC not measured ({self.frc_note})" if self.frc_note else ""
        if not math.isfinite(self.frc):
            return f"FRC: {self.frc_note or 'no crossing'}"
        if self.frc_floor_limited:
            return f"FRC ≤ {self._out(self.frc)} (the frame is too small to show finer)"
        return f"FRC {self._out(self.frc)}"

    def _decorrelation_words(self) -> str:
        if self.esrrf is None:
            return f"decorrelation not measured ({self.note})"
        value = self.esrrf.resolution
        if not math.isfinite(value):
            return "decorrelation: no peak"
        if self.pixel_limited:
            return f"decorrelation {value:.3g} output px: limited by the pixel grid"
        return f"decorrelation {self._out(value)}"

    def _widefield_words(self) -> str:
        wf = self.widefield
        if wf is None or not math.isfinite(wf.resolution):
            return ""
        return format_length(wf.resolution, self.pixel_size, self.unit, "input")

    def short(self) -> str:
        """The headline alone, e.g. ``"163 nm (FRC)"``, or ``"no valid resolution"``."""
        head = self.headline_px
        if head is None:
            return "no valid resolution"
        bound = "≤ " if head[0] == "FRC" and self.frc_floor_limited else ""
        return f"{bound}{self._out(head[1])} ({head[0]})"

    def describe(self) -> str:
        """One short line: the headline, then the other measure named, and the widefield's,
        e.g. ``"resolution 163 nm (FRC, even/odd frames; widefield 310 nm); decorrelation
        2.35 output px: limited by the pixel grid"``."""
        head = self.headline_px
        widefield = self._widefield_words()
        beside = f"widefield {widefield}" if widefield else ""
        if head is None:
            start = "no valid resolution measure"
            others = [self._frc_words(), self._decorrelation_words(), beside]
        elif head[0] == "FRC":
            bound = "≤ " if self.frc_floor_limited else ""
            start = f"resolution {bound}{self._out(head[1])} (FRC"
            start += f"; {beside})" if beside else ")"
            others = [self._decorrelation_words()]
        else:
            start = f"resolution {self._out(head[1])} (decorrelation"
            start += f"; {beside})" if beside else ")"
            others = [self._frc_words()]
        return "; ".join([start, *(o for o in others if o)])

    def details(self) -> str:
        """Several lines for a tooltip: each measure, what it compares, the region analysed."""
        frc = self._frc_words().removeprefix("FRC").lstrip(": ") or "not measured"
        lines = [
            "FRC (even against odd frames of the first time point, at 1/7 or the 3-sigma "
            f"noise floor of rings too small for it): {frc}.",
            "Decorrelation (one image, Descloux et al. 2019): eSRRF "
            + self._decorrelation_words().removeprefix("decorrelation ")
            + (f" ({self.region})" if self.region else "")
            + (f"; widefield mean {self._widefield_words()}" if self._widefield_words() else "")
            + ".",
            f"A decorrelation below {PIXEL_LIMIT_PX:g} output px measures the pixel grid, not "
            "the sample.",
        ]
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """JSON-able facts in pixels: each decorrelation analysis's (``resolution_px``...),
        the FRC (output px), whether the decorrelation is pixel-limited, note and region."""
        head = self.headline_px
        return {
            "esrrf": None if self.esrrf is None else self.esrrf.summary(),
            "widefield": None if self.widefield is None else self.widefield.summary(),
            "unit": "px",
            "note": self.note,
            "region": self.region or "whole image",
            "frc_px": None if self.frc is None or not math.isfinite(self.frc) else self.frc,
            "frc_note": self.frc_note,
            "frc_floor_limited": self.frc_floor_limited,
            "pixel_limited": self.pixel_limited,
            "headline": None if head is None else {"measure": head[0], "output_px": head[1]},
        }


def _centre(image: np.ndarray) -> np.ndarray:
    rows, cols = image.shape
    top, left = max(0, (rows - DECORRELATION_SIDE) // 2), max(0, (cols - DECORRELATION_SIDE) // 2)
    return image[top : top + DECORRELATION_SIDE, left : left + DECORRELATION_SIDE]


def measure_resolution(result: Reconstruction, device: Device) -> ResolutionMeasurement:
    """The decorrelation analysis of ``result``'s first time point and its widefield mean
    (the FRC is added by :func:`._resolution_frc.with_frc`, which reads the frames again).

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
    return ResolutionMeasurement(
        analyses[0], analyses[1], note, region, magnification=result.params.magnification
    )
