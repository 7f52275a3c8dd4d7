"""The result of eSRRF of one stack (:class:`EsrrfResult`: the super-resolved time points, the
widefield means and the facts to trust and reproduce them) and where its layers lie
(:func:`output_geometry`). The streaming that makes it is :mod:`._stream`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ._drift_result import DriftResult
from ._params import EsrrfParams
from ._resolution import ResolutionMeasurement

__all__ = ["EsrrfResult", "output_geometry"]


def output_geometry(
    geometry: Geometry | None,
    magnification: int,
    time_points: list[tuple[int, int]] | None = None,
    *,
    super_resolved: bool = True,
) -> Geometry:
    """The geometry of a ``(n_timepoints, H M, W M)`` result of a ``(T, H, W)`` input.

    The last two axes get ``scale / M`` and a translate that keeps pixel centres aligned:
    output pixel ``i`` is centred at input pixel ``(i + 0.5) / M - 0.5``, so the output's first
    pixel sits ``(M - 1) / (2 M)`` input pixels before the input's (``super_resolved=False``
    keeps them, for the widefield mean). With ``time_points``, time point ``k`` is placed at the
    centre of its frames, one step (frames between time point starts) apart, so that napari
    shows it on every frame it was made from.

    Examples
    --------
    >>> g = output_geometry(Geometry(scale=(1.0, 0.1, 0.1)), 5, [(0, 100)])
    >>> g.scale, g.translate
    ((100.0, 0.02, 0.02), (49.5, -0.04, -0.04))
    """
    if geometry is None or geometry.scale is None:
        geometry = Geometry(
            scale=(1.0, 1.0, 1.0),
            translate=None if geometry is None else geometry.translate,
            units=None if geometry is None else geometry.units,
            axis_labels=None if geometry is None else geometry.axis_labels,
        )
    geometry = geometry.trailing(3)
    m = magnification
    scale = list(geometry.scale)
    translate = list(geometry.translate) if geometry.translate else [0.0] * len(scale)
    if super_resolved:
        for axis in (-2, -1):
            translate[axis] = translate[axis] - scale[axis] * (m - 1) / (2 * m)
            scale[axis] = scale[axis] / m
    if time_points and len(scale) == 3:
        (first, stop) = time_points[0]
        step = time_points[1][0] - first if len(time_points) > 1 else stop - first
        translate[0] = translate[0] + scale[0] * (first + stop - 1) / 2
        scale[0] = scale[0] * max(1, step)
    return Geometry(
        scale=tuple(scale),
        translate=tuple(translate),
        units=geometry.units,
        axis_labels=geometry.axis_labels,
    )


@dataclass(frozen=True)
class EsrrfResult:
    """Super-resolved time points and the facts needed to trust and reproduce them.

    Attributes
    ----------
    image : numpy.ndarray
        float32 ``(n_timepoints, H M, W M)``. With macro-pixel correction the values are
        dimensionless (each sub-pixel phase has mean 1); without, RGC x input intensity (AVG),
        its variance (VAR) or lag-1 autocovariance (TAC2).
    widefield : numpy.ndarray
        float32 ``(n_timepoints, H, W)``: the mean of each time point's frames, for comparison.
    params : EsrrfParams
    time_points : list of (int, int)
        Frame range ``[start, stop)`` of each time point (those computed; a stopped run's last
        one holds the frames analysed before the stop).
    frames_analysed : int
        Frames that went through the pipeline (frames of overlapping rolling time points count
        once per time point).
    chunks : int
        Frame chunks processed.
    stopped_early : bool
    kernel_paths : dict of str to str
        Which implementation ran, and why.
    drift : DriftResult or None
        The drift trace the frames were corrected with (estimated over the whole stack, or
        the one passed as ``drift_shifts``); None without drift correction.
    decorrelation : ResolutionMeasurement or None
        The resolution of the first time point measured by the job with
        ``measure_resolution`` (None without): the FRC of its even and odd frames, the
        decorrelation of the eSRRF image (named as pixel-limited when it is) and of the
        widefield mean.
    """

    image: np.ndarray
    widefield: np.ndarray
    params: EsrrfParams
    time_points: list[tuple[int, int]]
    frames_analysed: int
    chunks: int
    stopped_early: bool = False
    total_time_points: int = 1
    kernel_paths: dict[str, str] = field(default_factory=dict)
    drift: DriftResult | None = None
    decorrelation: ResolutionMeasurement | None = None

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance (everything but the images; the drift trace, per
        frame, under ``"drift"`` when the frames were corrected)."""
        facts = {
            "params": self.params.to_dict(),
            "output_shape": list(self.image.shape),
            "time_points": [list(r) for r in self.time_points],
            "total_time_points": int(self.total_time_points),
            "frames_analysed": int(self.frames_analysed),
            "chunks": int(self.chunks),
            "stopped_early": bool(self.stopped_early),
            "kernel_paths": dict(self.kernel_paths),
        }
        if self.drift is not None:
            facts["drift"] = self.drift.summary()
        if self.decorrelation is not None:
            facts["decorrelation"] = self.decorrelation.summary()
        return facts

    def _facts(self) -> str:
        p = self.params
        grid = "NanoPyx grid" if p.geometry == "nanopyx" else "pixel-centred grid"
        return (
            f"{p.temporal} of {self.frames_analysed} frames, M={p.magnification}, "
            f"R={p.radius:g} px, S={p.sensitivity:g}, {grid}"
        )

    def describe(self) -> str:
        """A short line for a status: the time points, the frames and the resolution (the
        parameters are in the layer's name; :meth:`details` says everything)."""
        n = len(self.time_points)
        drift = ""
        if self.drift is not None:
            drift = f", drift-corrected (up to {self.drift.max_drift:.2f} px"
            if self.drift.automatic and self.drift.time_averaging_chosen:
                drift += (
                    f"; blocks of {self.drift.time_averaging_chosen} frames, chosen automatically"
                )
            if self.drift.stopped_early:
                drift += f"; its estimate stopped after frame {self.drift.shifts.shape[0] - 1}"
            drift += ")"
        resolution = "" if self.decorrelation is None else f"; {self.decorrelation.describe()}"
        if self.stopped_early:
            return (
                f"stopped early by request: {n} of {self.total_time_points} time point(s), "
                f"the last from frames {self.time_points[-1][0]}-{self.time_points[-1][1] - 1} "
                f"only{drift}{resolution}"
            )
        return (
            f"{n} super-resolved time point(s) from {self.frames_analysed} frames{drift}"
            f"{resolution}"
        )

    def details(self) -> str:
        """Several lines (a tooltip): the parameters, then the resolution measures."""
        lines = [f"{self._facts()}."]
        if self.decorrelation is not None:
            lines.append(self.decorrelation.details())
        return "\n".join(lines)

    def in_units(self, pixel_size: float | None, unit: str) -> EsrrfResult:
        """The same result whose resolution is said in the input's unit (``pixel_size`` per
        input pixel; :meth:`ResolutionMeasurement.in_units`); pixels and facts unchanged."""
        if self.decorrelation is None:
            return self
        return replace(self, decorrelation=self.decorrelation.in_units(pixel_size, unit))

    def files(self, geometry: Geometry | None = None) -> dict[str, str]:
        """Text files a batch run writes beside the position's images: the drift trace as
        ``"drift.csv"`` (:meth:`DriftResult.csv_text`, with the physical unit of the input's
        last axis when it has one); nothing without drift correction."""
        return {} if self.drift is None else self.drift.files(geometry)

    def layers(
        self,
        name: str = "stack",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """The eSRRF image (``"eSRRF · <name> [M5 R1.5 S1]"``) at ``scale / M`` with pixel
        centres aligned to the input's, and the widefield mean (``"widefield mean · <name>"``);
        each time point spans the frames it was made from (:func:`output_geometry`).
        """
        metadata = dict(metadata or {})
        sr_meta = dict(metadata)
        if self.params.macro_pixel_correction:
            sr_meta["intensity_unit"] = "a.u."
        sr_meta["quantity"] = "eSRRF"
        low, high = _display_range(self.image)
        m, placed = self.params.magnification, self.time_points
        sr = image_layer(
            self.image,
            result_name("eSRRF", name, self.params.label),
            output_geometry(geometry, m, placed),
            metadata=sr_meta,
            colormap="magma",
            contrast_limits=(low, high),
        )
        wf_geometry = output_geometry(geometry, m, placed, super_resolved=False)
        wf_name = result_name("widefield mean", name)
        wf = image_layer(self.widefield, wf_name, wf_geometry, metadata=metadata)
        if self.drift is None:
            return [sr, wf]
        # The trace over the widefield image, in the input's coordinates (DriftResult.layers).
        return [sr, wf, self.drift.tracks_layer(name, geometry, metadata)]


def _display_range(image: np.ndarray) -> tuple[float, float]:
    """0 (or the minimum, for a TAC2 that goes negative) to the 99.9th percentile."""
    if image.size == 0:
        return 0.0, 1.0
    high = float(np.percentile(image, 99.9))
    low = min(0.0, float(image.min()))
    return low, high if high > low else low + 1.0
