"""The points of a live eSRRF's quality track (:class:`QualityPoint`, measured by
:mod:`._quality`) and its "acquire until good enough" rule: when the RSP error stops improving
(:class:`PlateauRule`), and what it says when it fires (:class:`GoodEnough`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["GoodEnough", "PlateauRule", "QualityPoint"]

@dataclass(frozen=True)
class QualityPoint:
    """One measurement of the running reconstruction.

    Attributes
    ----------
    frames : int
        Frames processed when it was measured (in rolling mode: frames of its time point).
    timepoint : int
        The time point measured (0 for a cumulative session).
    resolution_px : float
        Decorrelation resolution in output pixels (NaN when there is none: :attr:`finding`).
    finding : str
        ``""`` for a valid resolution; ``"limited by the pixel grid"`` or ``"no peak"``.
    rsp_error : float
        ``1 - RSP`` against the widefield mean of the same frames (NaN when it could not be
        fitted).
    seconds : float
        What the measurement took (the worker's time, not spent on frames).
    """

    frames: int
    timepoint: int
    resolution_px: float
    finding: str
    rsp_error: float
    seconds: float

    def resolution(self, pixel_size: float | None, magnification: int) -> float | None:
        """The resolution in the input's length unit (``pixel_size`` per input pixel); None
        without a pixel size or a valid resolution."""
        if pixel_size is None or not math.isfinite(self.resolution_px) or self.finding:
            return None
        return self.resolution_px * pixel_size / magnification


@dataclass(frozen=True)
class PlateauRule:
    """More frames stop helping: the RSP error improved by less than ``change`` over the last
    ``window`` measurements (``(e[i - window] - e[i]) / e[i - window] < change``).

    The defaults (8 % over 3 measurements, 30 frames at
    :data:`~._quality.DEFAULT_MEASURE_EVERY`) were chosen on simulated blinking filaments
    against the frame where the error against the truth improved by less than 5 % over the
    same 30 frames: the RSP error keeps improving longer than the true error (its floor is
    lower next to its noise), so its threshold is higher. The two frames agreed on 2 of 4
    simulated stacks and differed by up to 50 % on the others (``docs/live.md``): a hint,
    not a guarantee. An error that rose also fires (more frames made it worse: drift,
    bleaching), and :class:`GoodEnough` says so.

    Attributes
    ----------
    change : float
        Fraction (0.05: 5 %).
    window : int
        Measurements looked back over (at :data:`~._quality.DEFAULT_MEASURE_EVERY` frames each).

    Examples
    --------
    >>> rule = PlateauRule(change=0.05, window=2)
    >>> rule.fires([0.2, 0.1, 0.099]), rule.fires([0.2, 0.1, 0.099, 0.098])
    (False, True)
    >>> rule.describe()
    'the RSP error changed < 5 % over the last 2 measurements'
    """

    change: float = 0.08
    window: int = 3

    def __post_init__(self) -> None:
        if not 0 < self.change < 1:
            raise ValueError(f"PlateauRule.change is a fraction in (0, 1), got {self.change!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"PlateauRule.window must be an integer >= 1, got {self.window!r}")

    def fires(self, errors: list[float]) -> bool:
        """Whether the newest of ``errors`` (a track's RSP errors in order) is on the plateau."""
        if len(errors) <= self.window:
            return False
        before, now = errors[-1 - self.window], errors[-1]
        if not (math.isfinite(before) and math.isfinite(now)) or before <= 0:
            return False
        return (before - now) / before < self.change

    def describe(self) -> str:
        """The rule in words."""
        return (
            f"the RSP error changed < {self.change * 100:g} % over the last {self.window} "
            "measurements"
        )


@dataclass(frozen=True)
class GoodEnough:
    """The rule fired: at ``frames`` frames processed, with the measurement that made it."""

    frames: int
    rule: PlateauRule
    point: QualityPoint
    before: float = math.nan
    """The RSP error ``rule.window`` measurements before (NaN: not recorded)."""

    def describe(self) -> str:
        """E.g. ``"good enough at 60 frames (RSP error 0.046 changed < 5 % over the last 4
        measurements)"``; an error that rose is said so, never as a plateau.

        Examples
        --------
        >>> from napari_gpuscope.live import QualityPoint
        >>> point = QualityPoint(40, 0, 2.0, "", 0.10, 0.0)
        >>> GoodEnough(40, PlateauRule(), point, before=0.05).describe()[26:]
        'RSP error 0.1 rose by 100 % over the last 3 measurements: more frames made it worse)'
        """
        now, window = self.point.rsp_error, self.rule.window
        if math.isfinite(self.before) and self.before > 0 and now > self.before:
            rise = (now - self.before) / self.before * 100
            return (
                f"good enough at {self.frames} frames (RSP error {now:.3g} rose by {rise:.0f} % "
                f"over the last {window} measurements: more frames made it worse)"
            )
        return (
            f"good enough at {self.frames} frames (RSP error {now:.3g} changed "
            f"< {self.rule.change * 100:g} % over the last {window} measurements)"
        )

    def summary(self) -> dict[str, Any]:
        """JSON-able facts (for the result's provenance)."""
        return {
            "frames": self.frames,
            "rule": self.rule.describe(),
            "change": self.rule.change,
            "window": self.rule.window,
            "rsp_error": _number(self.point.rsp_error),
        }


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
