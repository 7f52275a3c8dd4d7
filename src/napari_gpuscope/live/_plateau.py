"""The points of a live eSRRF's quality track (:class:`QualityPoint`, measured by
:mod:`._quality`) and its "acquire until good enough" rule: when the estimated error against
the truth (or the RSP error) stops improving (:class:`PlateauRule`), and what it says when it
fires (:class:`GoodEnough`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ESTIMATED",
    "FLOOR_PER_RSP",
    "MEASURES",
    "RSP",
    "GoodEnough",
    "PlateauRule",
    "QualityPoint",
]

ESTIMATED = "estimated error"
RSP = "RSP error"
MEASURES = (ESTIMATED, RSP)
"""What a :class:`PlateauRule` reads."""

FLOOR_PER_RSP = 7.0
"""The estimated error's floor (what more frames never remove) per unit of the newest RSP error.
On simulated blinking filaments the error against the truth levels off at 5-18 (median 9)
times the RSP error's floor; the newest RSP error still holds some noise, hence a smaller
factor. Chosen with :data:`~._split_half.SPLIT_SIGMA_PER_RSP` on ten development stacks
(``benchmarks/live_good_enough.py --set dev``); 6.5 or 7.5 agree with the truth on fewer of
them (the rule is that sensitive to it: the floor sets how small the noise must get). Their
RSP errors were 0.03-0.07; from an RSP error of 1 / 7 on the floor would be the whole error,
and no estimate is made (:meth:`PlateauRule.estimates`)."""


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
    noise : float
        The reconstruction's noise part, ``1 - sqrt(rho)`` from its split halves
        (:mod:`._split_half`): how much of its correlation with anything noiseless its noise
        costs, which more frames remove (NaN before two halves, and for VAR and TAC2).
    """

    frames: int
    timepoint: int
    resolution_px: float
    finding: str
    rsp_error: float
    seconds: float
    noise: float = math.nan

    def resolution(self, pixel_size: float | None, magnification: int) -> float | None:
        """The resolution in the input's length unit (``pixel_size`` per input pixel); None
        without a pixel size or a valid resolution."""
        if pixel_size is None or not math.isfinite(self.resolution_px) or self.finding:
            return None
        return self.resolution_px * pixel_size / magnification


@dataclass(frozen=True)
class PlateauRule:
    """More frames stop helping: the measure improved by less than ``change`` over the last
    ``window`` measurements (``(e[i - window] - e[i]) / e[i - window] < change``).

    The default measure is the **estimated error** against the truth (:meth:`estimates`),
    with the same threshold as the truth's own plateau in the tests (5 % over 3
    measurements, 30 frames at :data:`~._quality.DEFAULT_MEASURE_EVERY`): the error of a
    reconstruction of ``n`` frames is ``1 - (1 - floor) sqrt(rho_n)``, where ``rho_n`` is its
    reliability from its split halves (:attr:`QualityPoint.noise` is ``1 - sqrt(rho_n)``) and
    the floor is what more frames never remove, estimated as :data:`FLOOR_PER_RSP` times the
    newest RSP error. Both ends of the window use the newest floor: only the noise part
    changes, so the rule asks whether the noise that more frames remove is still 5 % of the
    error. Within 10 % of the truth's frame: on 5 of the 10 development stacks (the RSP error's
    rule: 2) and 5 of 16 fresh ones (the RSP error's rule: 3), 15 frames off on average on the
    fresh ones (the RSP error's rule: 21; ``docs/live.md``): a hint, not a guarantee.

    ``measure="RSP error"`` (:meth:`rsp`: 8 % over 3) reads the RSP error itself: it keeps
    improving longer than the true error (its floor is lower next to its noise, much of it
    the widefield mean's), and it is the rule for VAR and TAC2, whose reconstructions have
    no split halves. An error that rose also fires (more frames made it worse: drift,
    bleaching), and :class:`GoodEnough` says so.

    Attributes
    ----------
    change : float
        Fraction (0.05: 5 %).
    window : int
        Measurements looked back over (at :data:`~._quality.DEFAULT_MEASURE_EVERY` frames each).
    measure : {"estimated error", "RSP error"}
        What the rule reads.

    Examples
    --------
    >>> rule = PlateauRule(change=0.05, window=2)
    >>> rule.fires([0.2, 0.1, 0.099]), rule.fires([0.2, 0.1, 0.099, 0.098])
    (False, True)
    >>> rule.describe()
    'the estimated error changed < 5 % over the last 2 measurements'
    >>> PlateauRule.rsp().describe()
    'the RSP error changed < 8 % over the last 3 measurements'
    """

    change: float = 0.05
    window: int = 3
    measure: str = ESTIMATED

    def __post_init__(self) -> None:
        if not 0 < self.change < 1:
            raise ValueError(f"PlateauRule.change is a fraction in (0, 1), got {self.change!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"PlateauRule.window must be an integer >= 1, got {self.window!r}")
        if self.measure not in MEASURES:
            raise ValueError(f"PlateauRule.measure must be one of {MEASURES}, got {self.measure!r}")

    @classmethod
    def rsp(cls, change: float = 0.08, window: int = 3) -> PlateauRule:
        """The rule on the RSP error itself (the default before the estimated error; the one
        for VAR and TAC2)."""
        return cls(change, window, RSP)

    def fires(self, errors: list[float]) -> bool:
        """Whether the newest of ``errors`` (a measure's values in order) is on the plateau."""
        if len(errors) <= self.window:
            return False
        before, now = errors[-1 - self.window], errors[-1]
        if not (math.isfinite(before) and math.isfinite(now)) or before <= 0:
            return False
        return (before - now) / before < self.change

    def values(self, points: list[QualityPoint]) -> list[float]:
        """What the rule reads of ``points`` (one time point's, in order)."""
        if self.measure == RSP:
            return [p.rsp_error for p in points]
        return self.estimates(points)

    @staticmethod
    def estimates(points: list[QualityPoint]) -> list[float]:
        """The estimated error against the truth of each point's reconstruction, all with the
        newest point's floor (``FLOOR_PER_RSP`` times its RSP error): ``1 - (1 - floor)
        (1 - noise)``. NaN where a point has no noise part, and all NaN when the floor would
        reach 1 (an RSP error of 1 / :data:`FLOOR_PER_RSP` or more, far beyond the 0.03-0.07
        the factor was chosen on): every estimate would be 1 and the rule would fire at once
        however fast the noise part still falls; it does not fire then
        (:meth:`PlateauRule.rsp` reads the RSP error itself).

        Examples
        --------
        >>> points = [QualityPoint(n, 0, 2.0, "", 0.04, 0.0, noise) for n, noise in
        ...           [(10, math.nan), (20, 0.2), (30, 0.1)]]
        >>> [round(e, 3) for e in PlateauRule.estimates(points)[1:]]
        [0.424, 0.352]
        """
        if not points:
            return []
        floor = FLOOR_PER_RSP * points[-1].rsp_error
        if not floor < 1:
            return [math.nan] * len(points)
        return [1 - (1 - floor) * (1 - p.noise) for p in points]

    def describe(self) -> str:
        """The rule in words."""
        return (
            f"the {self.measure} changed < {self.change * 100:g} % over the last {self.window} "
            "measurements"
        )


@dataclass(frozen=True)
class GoodEnough:
    """The rule fired: at ``frames`` frames processed, with the measurement that made it."""

    frames: int
    rule: PlateauRule
    point: QualityPoint
    before: float = math.nan
    """The rule's measure ``rule.window`` measurements before (NaN: not recorded)."""
    now: float = math.nan
    """The rule's measure at :attr:`point` (NaN: its RSP error is said)."""

    def describe(self) -> str:
        """E.g. ``"good enough at 60 frames (RSP error 0.046 changed < 5 % over the last 4
        measurements)"``; an error that rose is said so, never as a plateau.

        Examples
        --------
        >>> from napari_gpuscope.live import QualityPoint
        >>> point = QualityPoint(40, 0, 2.0, "", 0.10, 0.0)
        >>> GoodEnough(40, PlateauRule.rsp(), point, before=0.05).describe()[26:]
        'RSP error 0.1 rose by 100 % over the last 3 measurements: more frames made it worse)'
        """
        now, window, what = self.now, self.rule.window, self.rule.measure
        if not math.isfinite(now):
            now, what = self.point.rsp_error, RSP
        if math.isfinite(self.before) and self.before > 0 and now > self.before:
            rise = (now - self.before) / self.before * 100
            return (
                f"good enough at {self.frames} frames ({what} {now:.3g} rose by {rise:.0f} % "
                f"over the last {window} measurements: more frames made it worse)"
            )
        return (
            f"good enough at {self.frames} frames ({what} {now:.3g} changed "
            f"< {self.rule.change * 100:g} % over the last {window} measurements)"
        )

    def summary(self) -> dict[str, Any]:
        """JSON-able facts (for the result's provenance)."""
        return {
            "frames": self.frames,
            "rule": self.rule.describe(),
            "change": self.rule.change,
            "window": self.rule.window,
            "measure": self.rule.measure,
            "value": _number(self.now),
            "rsp_error": _number(self.point.rsp_error),
            "noise": _number(self.point.noise),
        }


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
