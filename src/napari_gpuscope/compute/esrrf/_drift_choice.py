"""The automatic choice of a drift estimate's block length as a result: the length chosen,
each candidate's estimated error and how it was made."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RULE", "BlockLengthChoice", "json_float", "json_floats"]

RULE = "pooled bias"
"""The automatic block length's bias estimate (:mod:`._drift_pooled_bias`), named in the
provenance so that a recorded choice says which rule made it."""


def json_float(value: float) -> float | None:
    """A float for a JSON summary: None where it is not finite (JSON has no NaN)."""
    return float(value) if math.isfinite(value) else None


def json_floats(values: np.ndarray) -> list[list[float | None]]:
    """Rows of :func:`json_float`."""
    return [[json_float(v) for v in row] for row in values]


@dataclass(frozen=True)
class BlockLengthChoice:
    """The automatic choice of a drift estimate's block length (``time_averaging=None``).

    Attributes
    ----------
    length : int
        Frames per block chosen.
    scores : dict of int to float
        Each candidate length's estimated RMS error of the trace (px, over frames and
        axes); NaN for a length that could not be used (fewer than two measured blocks, a
        block without a noise estimate, frames left unmeasured) or whose trace disagreed
        with the others' by far more than their noise (a wrong correlation peak).
    reference : int or None
        The finest length compared, the first every longer candidate's trace is compared
        with in the bias estimate (None: none was usable).
    parts : dict of int to (float, float)
        Each usable candidate's ``(noise, bias)`` RMS (px): ``score**2 = noise**2 + bias**2``.
    stopped : bool
        Stop & keep during the pilot: the choice saw only the frames read before the stop.
    """

    length: int
    scores: dict[int, float]
    reference: int | None
    parts: dict[int, tuple[float, float]] = field(default_factory=dict)
    stopped: bool = False

    def summary(self) -> dict[str, Any]:
        """JSON-able: ``{"time_averaging": 25, "candidates": [[4, 0.31, 0.30, 0.02], ...],
        "reference": 4, "rule": "pooled bias"}``, each candidate ``[length, estimated RMS,
        noise, bias]`` (px; None where unusable); ``rule`` names the bias estimate (the rule
        changed on 2026-11-30: a provenance without it was made by Goldenshluger-Lepski's)."""
        rows = []
        for length, score in sorted(self.scores.items()):
            noise, bias = self.parts.get(length, (math.nan, math.nan))
            rows.append([int(length), json_float(score), json_float(noise), json_float(bias)])
        return {
            "time_averaging": int(self.length),
            "candidates": rows,
            "reference": self.reference,
            "stopped": bool(self.stopped),
            "rule": RULE,
        }
