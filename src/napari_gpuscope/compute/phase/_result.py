"""The result of a phase reconstruction: phase, absorption, the tilt used, and their facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..results import Geometry, LayerDataTuple, image_layer, result_name, vectors_layer
from ._auto_tv import TVStrengthChoice
from ._estimate import TiltResult
from ._params import PhaseParams
from ._tiles import TiltMap

__all__ = ["PhaseResult"]


@dataclass(frozen=True)
class PhaseResult:
    """Phase and absorption of a thin sample, and the tilt they were reconstructed with.

    Attributes
    ----------
    phase : numpy.ndarray
        ``(Y, X)`` float32, radians (mean ~0: a through-focus stack cannot tell the mean).
    absorption : numpy.ndarray
        ``(Y, X)`` float32, the absorption coefficient of the model (dimensionless).
    params : PhaseParams
        The parameters used.
    tilt_map : TiltMap
        The tilt used (one tile: one tilt for the field).
    estimate : TiltResult or None
        How the tilt was estimated (None for a manual or no tilt).
    stopped_early : bool
        The tilt estimate was stopped by the user (the best values so far were used).
    kernel_paths : dict
        Which implementation of the fused passes ran.
    chunks : int
        Slice chunks the device memory allowed (1: all slices at once; per tile for a map).
    regularization_chosen : float or None
        The Tikhonov strength the automatic regularization chose (``params.regularization``
        None, "auto"); None when the params fixed it.
    tv_choice : TVStrengthChoice or None
        The TV strength the automatic choice made (``regularizer="tv"`` with ``tv_strength``
        None, "auto") and the search behind it; None when the params fixed it or for Tikhonov.
    """

    phase: np.ndarray
    absorption: np.ndarray
    params: PhaseParams
    tilt_map: TiltMap
    estimate: TiltResult | None = None
    stopped_early: bool = False
    kernel_paths: dict[str, str] = field(default_factory=dict)
    chunks: int = 1
    regularization_chosen: float | None = None
    tv_choice: TVStrengthChoice | None = None

    @property
    def regularization(self) -> float:
        """The Tikhonov strength used: the chosen one, or the params' fixed one."""
        if self.regularization_chosen is not None:
            return self.regularization_chosen
        fixed = self.params.regularization
        if fixed is None:
            raise ValueError("an automatic regularization without the chosen value")
        return fixed

    def regularization_text(self) -> str:
        """``"auto → 3.2e-03"`` or ``"1e-03"``: what the dock and :meth:`describe` show."""
        if self.params.regularization is None and self.regularization_chosen is not None:
            return f"auto → {self.regularization_chosen:.2g}"
        return f"{self.regularization:.2g}"

    @property
    def tv_strength(self) -> float | None:
        """The TV strength used: the chosen one, or the params' fixed one (None: Tikhonov)."""
        if self.params.regularizer != "tv":
            return None
        return self.tv_choice.strength if self.tv_choice is not None else self.params.tv_strength

    def tv_strength_text(self) -> str:
        """``"auto → 5.6e-03"`` or ``"0.002"``: the TV strength as :meth:`describe` shows it."""
        if self.params.tv_strength is None and self.tv_choice is not None:
            return f"auto → {self.tv_choice.strength:.2g}"
        return f"{self.tv_strength:.2g}"

    def automatic_choices(self) -> dict[str, str]:
        """Every value chosen from the data, by name (:mod:`napari_gpuscope.provenance`).

        Examples
        --------
        >>> import numpy as np
        >>> from napari_gpuscope.compute import phase
        >>> grid = phase.TileGrid.covering((8, 8), (1, 1), 0.0)
        >>> result = PhaseResult(np.zeros((8, 8)), np.zeros((8, 8)), phase.PhaseParams(),
        ...                      phase.TiltMap.uniform(grid, 0.0, 0.0), regularization_chosen=3e-3)
        >>> result.automatic_choices()
        {'regularization': '0.003'}
        """
        out = {}
        if self.params.regularization is None and self.regularization_chosen is not None:
            out["regularization"] = f"{self.regularization_chosen:.2g}"
        if self.params.tv_strength is None and self.tv_choice is not None:
            out["TV strength"] = f"{self.tv_choice.strength:.2g}"
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance."""
        return {
            "params": self.params.to_dict(),
            "chunks": int(self.chunks),
            "regularization": (
                "auto" if self.params.regularization is None else self.params.regularization
            ),
            "regularization_chosen": (
                None if self.regularization_chosen is None else float(self.regularization_chosen)
            ),
            "tv_strength_chosen": (
                None if self.tv_choice is None else float(self.tv_choice.strength)
            ),
            "tv_strength_search": None if self.tv_choice is None else self.tv_choice.summary(),
            "automatic": self.automatic_choices(),
            "tilt_map": self.tilt_map.summary(),
            "tilt_convention": "forward model; waveorder azimuth = ours + pi",
            "estimate": None if self.estimate is None else self.estimate.summary(),
            "stopped_early": bool(self.stopped_early),
            "effective_na_illumination": float(self.params.effective_na_illumination),
            "phase_range_rad": [float(self.phase.min()), float(self.phase.max())],
            "kernel_paths": dict(self.kernel_paths),
        }

    def describe(self) -> str:
        """One line: the regularization, the tilt and how it was found."""
        p = self.params
        reg = (
            f"TV {self.tv_strength_text()}, Tikhonov {self.regularization_text()}"
            if p.regularizer == "tv"
            else f"Tikhonov {self.regularization_text()}"
        )
        if self.estimate is not None:
            tilt = self.estimate.describe()
        elif self.tilt_map.grid.count > 1:
            tilt = f"{self.tilt_map.grid.tiles[0]}x{self.tilt_map.grid.tiles[1]} tilt map given"
        elif self.tilt_map.zenith.item() == 0:
            tilt = "no tilt"
        else:
            tilt = (
                f"tilt zenith {self.tilt_map.zenith.item():.3f} rad, azimuth "
                f"{self.tilt_map.azimuth.item():.2f} rad"
            )
        lo, hi = float(self.phase.min()), float(self.phase.max())
        return f"phase {lo:.2f} to {hi:.2f} rad ({reg}; {tilt})"

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """Phase (radians), absorption, and the tilt vectors (tile centres, direction x zenith):
        ``"phase · <name> [<settings>]"``, ``"absorption · <name> [<settings>]"``,
        ``"tilt · <name>"``."""
        label = self.params.label
        if self.params.regularizer == "tv" and self.tv_choice is not None:
            label = f"TV=auto {self.tv_choice.strength:.2g}"
        elif self.params.regularization is None and self.regularization_chosen is not None:
            # The number chosen, in the name: two runs on two stacks are told apart.
            label = f"reg=auto {self.regularization_chosen:.2g}"
        meta = dict(metadata or {})
        out = [
            image_layer(
                self.phase,
                result_name("phase", name, label),
                geometry,
                metadata={**meta, "intensity_unit": "rad", "quantity": "phase"},
                colormap="gray",
                contrast_limits=_robust_limits(self.phase),
            ),
            image_layer(
                self.absorption,
                result_name("absorption", name, label),
                geometry,
                metadata={**meta, "intensity_unit": "a.u.", "quantity": "absorption"},
                colormap="gray",
                contrast_limits=_robust_limits(self.absorption),
                visible=False,
            ),
        ]
        vectors = self.tilt_map.vectors()
        if self.estimate is not None or self.tilt_map.zenith.max() > 0:
            out.append(
                vectors_layer(
                    vectors,
                    result_name("tilt", name),
                    geometry,
                    metadata={**meta, "tilt_map": self.tilt_map.summary()},
                    edge_color="yellow",
                    edge_width=2.0,
                    vector_style="arrow",
                )
            )
        return out


def _robust_limits(image: np.ndarray) -> tuple[float, float]:
    """0.1 and 99.9 percentiles (a few ringing pixels must not flatten the display)."""
    low, high = (float(v) for v in np.percentile(image, (0.1, 99.9)))
    return (low, high) if high > low else (low, low + 1.0)
