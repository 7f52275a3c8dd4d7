"""The result of a radius x sensitivity sweep (:func:`._sweep.iter_parameter_sweep`): the FRC,
RSP, QnR and decorrelation-resolution grids, the best setting, and the grids as image layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ._drift_result import DriftResult
from ._params import EsrrfParams
from ._resolution import PIXEL_LIMIT_PX

__all__ = ["SweepResult", "cell_words", "length_words"]


def length_words(value: float, pixel_size: float, unit: str) -> str:
    """A resolution of the sweep (in units of ``pixel_size``) with its unit: ``"0.183 µm"``,
    ``"1.83 input px"`` (``pixel_size`` 1 and no unit), ``"none"`` for NaN (no crossing).

    Examples
    --------
    >>> length_words(0.1834, 0.1, "µm"), length_words(1.834, 1.0, "")
    ('0.183 µm', '1.83 input px')
    """
    if not np.isfinite(value):
        return "none"
    if unit and unit != "px":
        return f"{value:.3g} {unit}"
    if pixel_size == 1:
        return f"{value:.3g} input px"
    return f"{value / pixel_size:.3g} input px"


def cell_words(
    frc: float, rsp: float, decorr: float, pixel_size: float, unit: str, magnification: int
) -> str:
    """One cell in words, each measure named once with its unit, e.g. ``"FRC 0.183 µm, RSP
    0.912, decorrelation 0.047 µm (limited by the pixel grid)"``."""
    words = f"FRC {length_words(frc, pixel_size, unit)}, RSP {rsp:.3f}"
    if np.isfinite(decorr):
        words += f", decorrelation {length_words(decorr, pixel_size, unit)}"
        if decorr / (pixel_size / magnification) < PIXEL_LIMIT_PX:
            words += " (limited by the pixel grid)"
    return words


@dataclass(frozen=True)
class SweepResult:
    """A radius x sensitivity sweep.

    Attributes
    ----------
    radii, sensitivities : tuple of float
        The grid (columns, rows).
    frc_resolution : numpy.ndarray
        ``(n_sensitivities, n_radii)`` FRC resolution in units of ``pixel_size`` (NaN: not
        computed, or no 1/7 crossing).
    rsp : numpy.ndarray
        Resolution-scaled Pearson correlation per setting.
    qnr : numpy.ndarray
        QnR per setting (NaN where not computed).
    params : EsrrfParams
        The other parameters (radius and sensitivity as swept).
    frames : int
        Frames used.
    pixel_size : float
        Input pixel size (the unit of ``frc_resolution`` and ``decorr_resolution``).
    stopped_early : bool
    decorr_resolution : numpy.ndarray
        ``(n_sensitivities, n_radii)`` decorrelation resolution of the whole-stack image, in
        units of ``pixel_size`` (NaN: not computed, no correlation peak, or the image is too
        small); all NaN when not given.
    drift : DriftResult or None
        The drift of the frames swept, with which every reconstruction was corrected (None
        without drift correction).
    unit : str
        The unit of ``pixel_size`` (e.g. ``"µm"``), for the words; empty when not known.
    """

    radii: tuple[float, ...]
    sensitivities: tuple[float, ...]
    frc_resolution: np.ndarray
    rsp: np.ndarray
    qnr: np.ndarray
    params: EsrrfParams
    frames: int
    pixel_size: float = 1.0
    stopped_early: bool = False
    decorr_resolution: np.ndarray | None = None
    drift: DriftResult | None = None
    unit: str = ""

    def __post_init__(self) -> None:
        if self.decorr_resolution is None:
            object.__setattr__(self, "decorr_resolution", np.full(self.qnr.shape, np.nan))

    @property
    def cells_done(self) -> int:
        """Settings computed."""
        return int(np.isfinite(self.rsp).sum())

    @property
    def best(self) -> tuple[float, float] | None:
        """``(radius, sensitivity)`` of the highest QnR (None when no cell has one)."""
        if not np.isfinite(self.qnr).any():
            return None
        i, j = np.unravel_index(np.nanargmax(self.qnr), self.qnr.shape)
        return self.radii[j], self.sensitivities[i]

    def best_params(self) -> EsrrfParams | None:
        """The swept parameters with the best setting applied."""
        best = self.best
        return None if best is None else self.params.replace(radius=best[0], sensitivity=best[1])

    def summary(self) -> dict[str, Any]:
        """JSON-able facts (NaN written as None)."""

        def grid(values: np.ndarray) -> list[list[float | None]]:
            return [[float(v) if np.isfinite(v) else None for v in row] for row in values]

        return {
            "params": self.params.to_dict(),
            "radii": list(self.radii),
            "sensitivities": list(self.sensitivities),
            "frc_resolution": grid(self.frc_resolution),
            "rsp": grid(self.rsp),
            "qnr": grid(self.qnr),
            "decorr_resolution": grid(self.decorr_resolution),
            "best": None if self.best is None else list(self.best),
            "frames": int(self.frames),
            "pixel_size": float(self.pixel_size),
            "stopped_early": bool(self.stopped_early),
            **({} if self.drift is None else {"drift": self.drift.summary()}),
        }

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """The QnR, RSP, FRC and decorrelation resolution grids as images (rows:
        sensitivities, columns: radii; NaN where a setting has no value). ``geometry`` is not
        used: the grid is not in the input's world coordinates."""
        del geometry
        meta = {
            **(metadata or {}),
            "radii": list(self.radii),
            "sensitivities": list(self.sensitivities),
            "nan": "not measured (stopped early, or no FRC crossing at 1/7)",
        }
        grid = Geometry(axis_labels=("sensitivity", "radius"))
        if self.unit and self.unit != "px":
            unit = self.unit
        else:
            unit = f"input pixels x {self.pixel_size:g}" if self.pixel_size != 1 else "input pixels"
        grids = (
            ("QnR", self.qnr, "higher is better", "viridis"),
            ("RSP", self.rsp, "higher is better", "viridis"),
            ("FRC resolution", self.frc_resolution, f"{unit}, lower is better", "magma_r"),
            (
                "Decorrelation resolution",
                self.decorr_resolution,
                f"{unit}, lower is better",
                "magma_r",
            ),
        )
        return [
            image_layer(
                values.astype(np.float32),
                result_name(f"{label} sweep", name),
                grid,
                metadata={**meta, "intensity_unit": meaning},
                colormap=colormap,
                visible=index == 0,
            )
            for index, (label, values, meaning, colormap) in enumerate(grids)
        ]

    def describe(self) -> str:
        """One line in plain words."""
        total = self.qnr.size
        done = (
            f"{self.cells_done} of {total} settings" if self.stopped_early else f"{total} settings"
        )
        best = self.best
        if self.cells_done == 0 and self.stopped_early:
            return f"sweep stopped before its first setting: none of {total} measured"
        if best is None:
            return f"sweep of {done}: no setting has a QnR (no FRC crossing at 1/7)"
        i, j = self.sensitivities.index(best[1]), self.radii.index(best[0])
        stopped = "stopped early; " if self.stopped_early else ""
        words = cell_words(
            self.frc_resolution[i, j],
            self.rsp[i, j],
            self.decorr_resolution[i, j],
            self.pixel_size,
            self.unit,
            self.params.magnification,
        )
        return (
            f"{stopped}best of {done}: radius {best[0]:g}, sensitivity {best[1]:g} (QnR "
            f"{self.qnr[i, j]:.3f}, {words})"
        )


def _empty(radii, sensitivities, params, frames, pixel_size, drift, unit="") -> SweepResult:
    """A sweep stopped before its first setting: every cell not measured (NaN)."""
    shape = (len(sensitivities), len(radii))
    return SweepResult(
        radii=radii,
        sensitivities=sensitivities,
        frc_resolution=np.full(shape, np.nan),
        rsp=np.full(shape, np.nan),
        qnr=np.full(shape, np.nan),
        params=params,
        frames=frames,
        pixel_size=pixel_size,
        stopped_early=True,
        decorr_resolution=np.full(shape, np.nan),
        drift=drift,
        unit=unit,
    )
