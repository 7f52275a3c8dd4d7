"""The drift estimate as a result: the trace, its blocks and uncertainty, its summary and
layers, and the CSV file it is saved to (written and read by :mod:`._drift_csv`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ._drift_choice import json_float, json_floats
from ._drift_correct import check_shifts
from ._drift_csv import load_drift_trace, trace_csv_text
from ._drift_params import DriftParams
from ._drift_tracks import tracks_data, tracks_layer

__all__ = ["DriftResult", "load_drift_trace"]


@dataclass(frozen=True)
class DriftResult:
    """A drift trace and how it was estimated.

    Attributes
    ----------
    shifts : numpy.ndarray
        float64 ``(T, 2)``: ``(dy, dx)`` of every frame relative to frame 0, in input pixels;
        frame ``t`` shows frame 0's content moved by ``+shifts[t]``; ``shifts[0]`` is exactly
        ``(0, 0)``.
    block_shifts : numpy.ndarray
        float64 ``(B, 2)``: the measured shift of each block (its frames' mean), relative to
        frame 0 as ``shifts`` (the value of the interpolated trace at frame 0 subtracted);
        for a block not measured (:attr:`measured` False) the trace's value at its centre.
    uncertainty : numpy.ndarray
        float64 ``(B, 2)``: each block shift's standard error (1 sigma, px) per axis, from
        the noise of the block's frames: the shift between its first and second half of
        frames, less the drift between them, pooled over the 5 nearest blocks (about 68 % of
        the blocks' errors fall within it on simulated stacks). Errors common to all blocks
        are not in it: frame 0's extrapolated position, which offsets the whole trace, a
        ``mean`` reference's blur, the accumulated steps of ``previous``. Its RMS over
        blocks is :attr:`rms_uncertainty`. NaN for blocks of one frame, for blocks not
        measured, and for a loaded trace.
    block_frames : list of (int, int)
        Frame range ``[start, stop)`` of each block.
    params : DriftParams or None
        None for a trace loaded from a file.
    aligned_mean : numpy.ndarray or None
        float32 ``(Y, X)``: the mean of all frames, each block moved back by its shift (in
        frame 0's coordinates); None for a loaded trace.
    frame_shape : tuple of int
        ``(Y, X)`` of the frames.
    stopped_early : bool
        Stop & keep ended the estimate: :attr:`shifts` covers only the frames of the blocks
        measured before the stop (fewer rows than the stack has frames).
    measured : numpy.ndarray or None
        bool ``(B,)``: whether each block's shift was measured. A block whose correlation
        with its reference has no peak above the noise (frames without sample: background,
        a constant) is not: its frames' drift is interpolated from the measured blocks
        between which it lies, or held at the nearest measured block's value beyond the
        first or last of them (:attr:`interpolated_frames`). None for a loaded trace.
    time_averaging_chosen : int or None
        Frames per block the estimate used: ``params.time_averaging``, or the automatic
        choice where that is None (the params keep None: "automatic"). None for a loaded
        trace.
    block_length_choice : dict or None
        How the automatic choice was made (:meth:`BlockLengthChoice.summary`: every
        candidate's estimated RMS error, its noise and bias); None for a fixed length.
    mean_refinement : dict or None
        ``reference="mean"``: how the blocks were re-measured against the mean of the other
        blocks aligned by their shifts: ``{"passes": 3, "converged": True,
        "largest_change_px": 0.004, "most_passes": 5, "stopped": False}`` (measuring passes
        made, whether the last one changed no block's shift by more than its uncertainty,
        its largest change beyond a common offset, None after one pass, the cap, whether a
        stop cut it short). None for the other references and a loaded trace.
    """

    shifts: np.ndarray
    block_shifts: np.ndarray
    uncertainty: np.ndarray
    block_frames: list[tuple[int, int]]
    params: DriftParams | None = None
    aligned_mean: np.ndarray | None = None
    frame_shape: tuple[int, int] | None = None
    stopped_early: bool = False
    kernel_paths: dict[str, str] = field(default_factory=dict)
    measured: np.ndarray | None = None
    time_averaging_chosen: int | None = None
    block_length_choice: dict[str, Any] | None = None
    mean_refinement: dict[str, Any] | None = None

    @property
    def automatic(self) -> bool:
        """Whether the block length was chosen automatically (``time_averaging=None``)."""
        return self.params is not None and self.params.time_averaging is None

    @property
    def unmeasured_blocks(self) -> list[int]:
        """Indices of the blocks whose drift was interpolated (or held), not measured."""
        if self.measured is None:
            return []
        return [int(k) for k in np.nonzero(~np.asarray(self.measured, bool))[0]]

    @property
    def interpolated_frames(self) -> np.ndarray:
        """bool ``(T,)``: frames whose drift was interpolated between measured blocks or held
        beyond them, because their block had no structure to measure.

        Examples
        --------
        >>> r = DriftResult.from_shifts([[0, 0], [0.5, 1.0]])
        >>> r.interpolated_frames.tolist()
        [False, False]
        """
        mask = np.zeros(self.shifts.shape[0], bool)
        for k in self.unmeasured_blocks:
            start, stop = self.block_frames[k]
            mask[start:stop] = True
        return mask

    def _unmeasured_text(self) -> str:
        """``"frames 0-19, 60-79"`` of the unmeasured blocks ('' when all were measured)."""
        merged: list[list[int]] = []
        for start, stop in (self.block_frames[k] for k in self.unmeasured_blocks):
            if merged and merged[-1][1] == start:
                merged[-1][1] = stop
            else:
                merged.append([start, stop])
        if not merged:
            return ""
        return "frames " + ", ".join(f"{a}-{b - 1}" if b - a > 1 else f"{a}" for a, b in merged)

    @property
    def rms_uncertainty(self) -> float:
        """RMS of :attr:`uncertainty` over blocks and axes (NaN when unknown)."""
        values = self.uncertainty[np.isfinite(self.uncertainty)]
        return float(np.sqrt(np.mean(values**2))) if values.size else float("nan")

    @property
    def max_drift(self) -> float:
        """Largest displacement from frame 0 (Euclidean, input pixels)."""
        return float(np.hypot(self.shifts[:, 0], self.shifts[:, 1]).max())

    @classmethod
    def from_shifts(cls, shifts: Any, frame_shape: tuple[int, int] | None = None) -> DriftResult:
        """A result holding a given (e.g. loaded) trace.

        Examples
        --------
        >>> DriftResult.from_shifts([[0, 0], [0.5, 1.0]]).max_drift
        1.118033988749895
        """
        try:
            frames = len(shifts)
        except TypeError:  # a scalar: check_shifts says what a trace is
            frames = -1
        array = check_shifts(shifts, frames, name="drift_shifts", frame_shape=frame_shape)
        n = array.shape[0]
        return cls(
            shifts=array,
            block_shifts=array.copy(),
            uncertainty=np.full_like(array, np.nan),
            block_frames=[(t, t + 1) for t in range(n)],
            frame_shape=frame_shape,
        )

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance, the trace included (per frame, in pixels)."""
        return {
            "params": None if self.params is None else self.params.to_dict(),
            "frames": int(self.shifts.shape[0]),
            "shifts_px": [[float(dy), float(dx)] for dy, dx in self.shifts],
            "block_frames": [list(r) for r in self.block_frames] if self.params else None,
            "block_shifts_px": self.block_shifts.tolist() if self.params else None,
            "uncertainty_px": json_floats(self.uncertainty) if self.params else None,
            "rms_uncertainty_px": json_float(self.rms_uncertainty),
            "max_drift_px": self.max_drift,
            "stopped_early": bool(self.stopped_early),
            "kernel_paths": dict(self.kernel_paths),
            "measured_blocks": (
                None if self.measured is None else [bool(v) for v in self.measured]
            ),
            "interpolated_blocks": self.unmeasured_blocks,
            "interpolated_frames": int(self.interpolated_frames.sum()),
            "time_averaging_chosen": self.time_averaging_chosen,
            "time_averaging_automatic": self.automatic,
            "block_length_choice": self.block_length_choice,
            "mean_refinement": self.mean_refinement,
            "automatic": self.automatic_choices(),
        }

    def automatic_choices(self) -> dict[str, str]:
        """``{"drift block length": "24 frames"}`` when chosen automatically, else empty."""
        if not self.automatic or self.time_averaging_chosen is None:
            return {}
        return {"drift block length": f"{self.time_averaging_chosen} frames"}

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> DriftResult:
        """The trace back from :meth:`summary` (e.g. a batch result's provenance).

        Examples
        --------
        >>> r = DriftResult.from_shifts([[0, 0], [0.25, -1.5]])
        >>> DriftResult.from_summary(r.summary()).shifts.tolist()
        [[0.0, 0.0], [0.25, -1.5]]
        """
        return cls.from_shifts(summary["shifts_px"])

    def describe(self) -> str:
        """One line in plain words."""
        last = self.shifts[-1]
        text = (
            f"drift over {self.shifts.shape[0]} frames: up to {self.max_drift:.2f} px from "
            f"frame 0 (last frame dy {last[0]:+.2f}, dx {last[1]:+.2f} px)"
        )
        if self.params is None:
            return text + ", loaded trace"
        p = self.params
        error = self.rms_uncertainty
        noise = f", block error ~{error:.3f} px RMS" if math.isfinite(error) else ""
        length = self.time_averaging_chosen or p.time_averaging
        how = " (chosen automatically)" if self.automatic else ""
        text = (
            f"{text}; {len(self.block_frames)} blocks of {length} frames{how} vs the "
            f"{p.reference} {'frames' if p.reference == 'mean' else 'block'}{noise}"
        )
        unmeasured = self.unmeasured_blocks
        if unmeasured:
            text += (
                f"; {len(unmeasured)} of {len(self.block_frames)} blocks not measured, with "
                f"no structure in common with their reference ({self._unmeasured_text()}): "
                "their drift is interpolated from the measured blocks, held at the ends"
            )
        refinement = self.mean_refinement
        if (
            refinement
            and refinement["passes"] >= refinement["most_passes"]
            and not refinement["converged"]
        ):
            text += (
                f"; the shifts against the aligned mean had not settled after "
                f"{refinement['passes']} passes (last change up to "
                f"{refinement['largest_change_px']:.3f} px, more than the blocks' uncertainty)"
            )
        if self.stopped_early:
            text += (
                f"; stopped early: frames 0-{self.shifts.shape[0] - 1} only (the blocks "
                "measured before the stop)"
            )
        return text

    def tracks_data(self, anchor: tuple[float, float] | None = None) -> np.ndarray:
        """napari Tracks data ``(T, 4)``: ``[track 0, frame, y, x]``, the path of frame 0's
        content at ``anchor`` (input pixels; default the frame's centre)."""
        return tracks_data(self.shifts, self.frame_shape, anchor)

    def layers(
        self,
        name: str = "stack",
        geometry: Geometry | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """The aligned mean (``"drift-corrected mean · <name>"``, when estimated) and the
        trace as a Tracks layer (``"drift · <name>"``).

        The track is the path of the content that frame 0 shows at the frame's centre, drawn
        at true size in the input's coordinates (its ``t`` axis is the frame index, at the
        input's time scale), so it sits over the middle of the widefield image and a drift
        of a few pixels is a short path there.
        """
        metadata = dict(metadata or {})
        layers: list[LayerDataTuple] = []
        if self.aligned_mean is not None:
            layers.append(
                image_layer(
                    self.aligned_mean,
                    result_name("drift-corrected mean", name),
                    geometry,
                    metadata=metadata,
                )
            )
        layers.append(self.tracks_layer(name, geometry, metadata))
        return layers

    def tracks_layer(
        self,
        name: str = "stack",
        geometry: Geometry | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> LayerDataTuple:
        """The Tracks layer of :meth:`layers` (:func:`._drift_tracks.tracks_layer`)."""
        return tracks_layer(self.shifts, self.frame_shape, name, geometry, metadata)

    # ------------------------------------------------------------------ CSV
    def to_csv(
        self, path: str | Path, *, pixel_size: float | None = None, unit: str = "µm"
    ) -> Path:
        """Write the trace (:meth:`csv_text`) to ``path``; returns the path.

        Examples
        --------
        >>> import tempfile, os
        >>> r = DriftResult.from_shifts([[0, 0], [0.5, -0.25]])
        >>> p = r.to_csv(os.path.join(tempfile.mkdtemp(), "drift.csv"), pixel_size=0.1)
        >>> DriftResult.from_csv(p).shifts.tolist()
        [[0.0, 0.0], [0.5, -0.25]]
        """
        path = Path(path)
        path.write_text(self.csv_text(pixel_size=pixel_size, unit=unit), encoding="utf-8")
        return path

    def files(self, geometry: Geometry | None = None) -> dict[str, str]:
        """Text files a batch run writes beside the position's images: the trace as
        ``"drift.csv"`` (:meth:`csv_text`), with the physical unit of the input's last axis
        when it has one.

        Examples
        --------
        >>> r = DriftResult.from_shifts([[0, 0], [0.5, -0.25]])
        >>> text = r.files(Geometry(scale=(1.0, 0.1, 0.1), units=("s", "um", "um")))["drift.csv"]
        >>> text.splitlines()[-1]
        '1,0.5,-0.25,0.05,-0.025'
        """
        pixel, unit = None, "px"
        if geometry is not None and geometry.scale and geometry.units:
            pixel, unit = abs(float(geometry.scale[-1])), str(geometry.units[-1] or "px")
        if unit in ("px", "pixel", "") or not (pixel and math.isfinite(pixel)):
            return {"drift.csv": self.csv_text()}
        return {"drift.csv": self.csv_text(pixel_size=pixel, unit=unit)}

    def csv_text(self, *, pixel_size: float | None = None, unit: str = "µm") -> str:
        """The trace as CSV: ``frame, dy_px, dx_px`` (and ``dy_<unit>, dx_<unit>`` with a
        pixel size), after ``#`` header lines naming the convention and units.

        Examples
        --------
        >>> print(DriftResult.from_shifts([[0, 0], [0.5, -0.25]]).csv_text().splitlines()[-1])
        1,0.5,-0.25
        """
        how = "chosen automatically" if self.automatic else "as set"
        chosen = self.time_averaging_chosen
        return trace_csv_text(
            self.shifts,
            estimated_with=None if self.params is None else self.params.to_json(indent=None),
            block_note=None if chosen is None else f"{chosen} ({how})",
            unmeasured=self._unmeasured_text() if self.unmeasured_blocks else None,
            pixel_size=pixel_size,
            unit=unit,
        )

    @classmethod
    def from_csv(cls, path: str | Path) -> DriftResult:
        """Read a trace written by :meth:`to_csv` (or any CSV with ``dy_px, dx_px`` columns,
        or ``dy_<unit>, dx_<unit>`` and a ``# pixel_size: <value> <unit>`` line)."""
        return cls.from_shifts(load_drift_trace(path))
