"""The radius x sensitivity parameter sweep: FRC and decorrelation resolution, RSP and QnR.

Each setting reconstructs the even and the odd frames separately (the FRC of the two is the
resolution) and the whole stack (whose RSP against the widefield mean is the fidelity), as
NanoJ-eSRRF and NanoPyx do; for AVG the whole-stack image is the frame-weighted mean of the two
halves (exact), so each setting costs two reconstructions. QnR (:func:`._qnr.qnr_scores`) then
ranks the settings. The decorrelation resolution of the whole-stack image
(:func:`._decorr.decorrelation_resolution`, as NanoPyx's ``use_decorr``) is a third map beside
FRC and RSP: a resolution from one image where the FRC needs two; QnR stays FRC-based. One
job: every cell streams in as it is computed, and a stop keeps the cells done so far.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError
from ..jobs import STOP, Job, Output, Progress, blocking, is_stop, mapped
from ..params import ParameterError
from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ._decorr import decorrelation_resolution
from ._drift import drift_blocks, iter_estimate_drift
from ._drift_correct import correct_drift
from ._drift_result import DriftResult
from ._input import check_stack
from ._job import iter_esrrf
from ._params import EsrrfParams
from ._qnr import error_map, frc_resolution, qnr_scores
from ._sweep_params import MAX_SWEEP_VALUES, SweepParams, duplicates_text
from ._temporal import macro_pixel_correct

__all__ = ["SWEEP_OUTPUTS", "SweepResult", "iter_parameter_sweep", "iter_sweep", "parameter_sweep"]

SWEEP_OUTPUTS = ("frc_resolution", "rsp", "qnr", "decorr_resolution")
"""Keyed outputs of the sweep job: one ``(n_sensitivities, n_radii)`` grid each (NaN where not
computed yet); FRC, RSP and the decorrelation resolution stream cell by cell, QnR as a whole
(it depends on every cell)."""

# The decorrelation analysis needs this many pixels per side (after eSRRF's border is cut).
_DECORR_MIN_SIDE = 16


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
        decorr = self.decorr_resolution[i, j]
        return (
            f"{stopped}best of {done}: radius {best[0]:g}, sensitivity {best[1]:g} (QnR "
            f"{self.qnr[i, j]:.3f}, RSP {self.rsp[i, j]:.3f}, FRC "
            f"{self.frc_resolution[i, j]:.3g}"
            + (f", decorrelation {decorr:.3g}" if np.isfinite(decorr) else "")
            + ")"
        )


def _values(name: str, values: Sequence[float], low: float, high: float) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if not out:
        raise ParameterError(f"{name} must hold at least one value")
    bad = [v for v in out if not (low <= v <= high)]
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise ParameterError(f"{name} must lie within [{low:g}, {high:g}], got {bad[:5]}{more}")
    if len(out) > MAX_SWEEP_VALUES:
        raise ParameterError(
            f"{name} holds {len(out)} values; a sweep takes at most {MAX_SWEEP_VALUES} per axis "
            "(each cell of the grid is one eSRRF reconstruction)"
        )
    if len(set(out)) != len(out):
        raise ParameterError(f"{name} holds duplicates: {duplicates_text(out)}")
    return out


def iter_parameter_sweep(
    stack: ArrayLike,
    radii: Sequence[float] = (1.0, 1.5, 2.0),
    sensitivities: Sequence[float] = (1.0, 2.0),
    *,
    params: EsrrfParams | None = None,
    frames: int | None = None,
    pixel_size: float = 1.0,
    device: str | torch.device | None = None,
) -> Job[SweepResult]:
    """Sweep radius x sensitivity; FRC and decorrelation resolution, RSP and QnR of every setting.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames (a crop of a few hundred pixels per side is plenty).
    radii, sensitivities : sequence of float
        The grid.
    params : EsrrfParams, optional
        The other parameters (magnification, temporal mode, weighting, correction, geometry);
        default: :class:`EsrrfParams` defaults. Time points are not used: all ``frames`` frames
        form one reconstruction. With ``drift_correction``, the drift of the ``frames`` frames
        is estimated once, first, and every reconstruction (the even and odd halves, all
        frames) and the widefield mean the RSP compares with are corrected with it.
    frames : int, optional
        Use the first ``frames`` frames (at least 4); default all.
    pixel_size : float
        Input pixel size; FRC and decorrelation resolutions are given in its units.
    device : str or torch.device, optional
        As :func:`iter_esrrf`.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` with the keyed outputs of
        :data:`SWEEP_OUTPUTS`; returns a :class:`SweepResult`. ``STOP`` keeps the cells done.

    Examples
    --------
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack
    >>> stack, _ = blinking_filaments_stack(12, (32, 32))
    >>> result = run_job(iter_parameter_sweep(stack, (1.0, 2.0), (1.0,), frames=12,
    ...                  params=EsrrfParams(magnification=2), device="cpu"))
    >>> result.qnr.shape
    (1, 2)
    """
    base = params if params is not None else EsrrfParams()
    if not isinstance(base, EsrrfParams):
        raise ParameterError(f"params must be an EsrrfParams, got {type(base).__name__}")
    info = {i.name: i for i in EsrrfParams.param_info()}
    radii = _values("radii", radii, info["radius"].minimum, info["radius"].maximum)
    sensitivities = _values(
        "sensitivities", sensitivities, info["sensitivity"].minimum, info["sensitivity"].maximum
    )
    base = base.replace(frames_per_timepoint=0, frame_gap=0)
    n_frames, _, _ = check_stack(stack, base)
    frames = n_frames if frames is None else int(frames)
    if n_frames < 4:
        raise InvalidInputError(
            f"the stack has {n_frames} frames; the sweep needs at least 4 (its even and odd "
            "frames are reconstructed separately, at least 2 each)"
        )
    if not 4 <= frames <= n_frames:
        raise InvalidInputError(
            f"the sweep needs 4 to {n_frames} frames (even and odd halves of at least 2), got "
            f"frames={frames}"
        )
    if not pixel_size > 0:
        raise ParameterError(f"pixel_size must be positive, got {pixel_size!r}")
    if base.drift_correction:
        drift_blocks(
            frames,
            base.drift_time_averaging,
            name="the sweep's frames (sweep_frames)",
            parameter="drift_time_averaging",
        )
    return _sweep(stack, radii, sensitivities, base, frames, float(pixel_size), device)


def iter_sweep(
    stack: ArrayLike,
    params: SweepParams | None = None,
    *,
    pixel_size: float = 1.0,
    device: str | torch.device | None = None,
) -> Job[SweepResult]:
    """The sweep as a job of the registry: its grid and fixed parameters in one model.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames.
    params : SweepParams, optional
        The grid (``radii``, ``sensitivities``), ``sweep_frames`` and the eSRRF parameters
        held fixed; default :class:`SweepParams` defaults.
    pixel_size : float
        Input pixel size; FRC resolutions are given in its units.
    device : str or torch.device, optional
        As :func:`iter_esrrf`.

    Returns
    -------
    generator
        As :func:`iter_parameter_sweep`.

    Examples
    --------
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack
    >>> stack, _ = blinking_filaments_stack(12, (32, 32))
    >>> p = SweepParams(radii=(1.0, 2.0), sensitivities=(1.0,), magnification=2)
    >>> run_job(iter_sweep(stack, p, device="cpu")).qnr.shape
    (1, 2)
    """
    params = params if params is not None else SweepParams()
    if not isinstance(params, SweepParams):
        raise ParameterError(f"params must be a SweepParams, got {type(params).__name__}")
    return iter_parameter_sweep(
        stack,
        params.radii,
        params.sensitivities,
        params=params.base(),
        frames=params.sweep_frames,
        pixel_size=pixel_size,
        device=device,
    )


parameter_sweep = blocking(iter_parameter_sweep)
parameter_sweep.__doc__ = """Radius x sensitivity sweep; blocking version of
:func:`iter_parameter_sweep` (same parameters). Returns a :class:`SweepResult`."""


def _sweep(stack, radii, sensitivities, base, frames, pixel_size, device) -> Job[SweepResult]:
    shape = (len(sensitivities), len(radii))
    frc = np.full(shape, np.nan)
    rsp = np.full(shape, np.nan)
    qnr = np.full(shape, np.nan)
    decorr = np.full(shape, np.nan)
    used = stack[:frames]
    halves = (used[0::2], used[1::2])
    counts = (len(range(0, frames, 2)), len(range(1, frames, 2)))
    asked = base  # what the result says (Use best keeps the drift correction)
    shifts: tuple[Any, ...] = (None, None, None)
    trace = None
    first = 0.0
    if base.drift_correction:  # once, on the frames swept; a tenth of the bar
        estimate = iter_estimate_drift(used, params=base.drift_params(), device=device)
        trace = yield from _scaled_updates(estimate, 0.0, 0.1, "drift: ")
        if trace.stopped_early:  # Stop & keep before any setting: nothing to keep
            return _empty(radii, sensitivities, asked, frames, pixel_size, trace)
        shifts = (trace.shifts[0::2], trace.shifts[1::2], trace.shifts)
        widefield = correct_drift(used, trace.shifts, device=device).astype(np.float64).mean(0)
        base = base.replace(drift_correction=False)
        first = 0.1
    else:
        widefield = np.asarray(used, dtype=np.float64).mean(axis=0)
    m = base.magnification
    cells = [(i, j) for i in range(len(sensitivities)) for j in range(len(radii))]
    runs_per_cell = 2 if base.temporal == "AVG" else 3
    stopped = False
    for number, (i, j) in enumerate(cells):
        # The sweep measures each cell's resolution itself (Use best keeps the option).
        cell = base.replace(radius=radii[j], sensitivity=sensitivities[i], measure_resolution=False)
        linear = cell.replace(macro_pixel_correction=False) if base.temporal == "AVG" else cell
        images = []
        inputs = [*halves, *([used] if runs_per_cell == 3 else [])]
        for k, part in enumerate(inputs):
            label = (
                f"radius {radii[j]:g}, sensitivity {sensitivities[i]:g}: "
                f"{('even frames', 'odd frames', 'all frames')[k]}"
            )
            share = (1 - first) / (len(cells) * runs_per_cell)  # of the bar, per run
            start, span = first + share * (number * runs_per_cell + k), share
            job = iter_esrrf(
                part, params=linear if k < 2 else cell, drift_shifts=shifts[k], device=device
            )
            image = yield from _until_stop(job, start, span, label)
            if image is None:
                stopped = True
                break
            images.append(image)
        if stopped:
            break
        if base.temporal == "AVG":
            whole = (counts[0] * images[0] + counts[1] * images[1]) / frames
            if base.macro_pixel_correction:
                images = [_mpc(x, m) for x in images]
                whole = _mpc(whole, m)
        else:
            whole = images[2]
        # Without eSRRF's zero border band, which both halves share (a correlated edge).
        cut = int(cell.radius * m) + m
        inner = (slice(cut, -cut), slice(cut, -cut))
        frc[i, j] = frc_resolution(
            images[0][inner], images[1][inner], pixel_size / m, max_frequency=1.0 / m
        )
        rsp[i, j] = error_map(whole, widefield, m).rsp
        _, qnr[...] = qnr_scores(frc, rsp)
        # On the same crop as the FRC: eSRRF's zero band would add an edge of its own.
        if min(whole[inner].shape) >= _DECORR_MIN_SIDE and np.isfinite(whole[inner]).all():
            analysis = decorrelation_resolution(whole[inner], device=device)
            decorr[i, j] = analysis.resolution * pixel_size / m
        command = yield Progress(
            first + (1 - first) * (number + 1) / len(cells),
            f"setting {number + 1}/{len(cells)}: radius {radii[j]:g}, sensitivity "
            f"{sensitivities[i]:g}: FRC {frc[i, j]:.3g}, RSP {rsp[i, j]:.3f}, "
            f"decorrelation {decorr[i, j]:.3g}",
            step=number + 1,
            metrics={"rsp": float(rsp[i, j])},
            outputs=_outputs(frc, rsp, qnr, decorr, (i, j)),
        )
        if is_stop(command):
            stopped = number + 1 < len(cells)
            break
    return SweepResult(
        radii=radii,
        sensitivities=sensitivities,
        frc_resolution=frc,
        rsp=rsp,
        qnr=qnr,
        params=asked,
        frames=frames,
        pixel_size=pixel_size,
        stopped_early=stopped,
        decorr_resolution=decorr,
        drift=trace,
    )


def _scaled_updates(job: Job[Any], start: float, stop: float, prefix: str) -> Job[Any]:
    """``job``'s updates in ``[start, stop]`` of the bar, without outputs (not the sweep's)."""
    return (
        yield from mapped(
            job,
            lambda u: dataclasses.replace(
                u,
                fraction=None if u.fraction is None else start + (stop - start) * u.fraction,
                message=prefix + u.message,
                outputs={},
            ),
        )
    )


def _empty(radii, sensitivities, params, frames, pixel_size, drift) -> SweepResult:
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
    )


def _mpc(image: np.ndarray, magnification: int) -> np.ndarray:
    return macro_pixel_correct(torch.from_numpy(np.ascontiguousarray(image)), magnification).numpy()


def _outputs(frc, rsp, qnr, decorr, cell) -> dict[str, Output]:
    i, j = cell
    region = (slice(i, i + 1), slice(j, j + 1))
    return {
        "frc_resolution": Output(frc[region].copy(), region=region, shape=frc.shape),
        "rsp": Output(rsp[region].copy(), region=region, shape=rsp.shape),
        "qnr": Output(qnr.copy()),
        "decorr_resolution": Output(decorr[region].copy(), region=region, shape=decorr.shape),
    }


def _until_stop(job, start: float, span: float, label: str) -> Job[np.ndarray | None]:
    """Run one reconstruction, re-yielding its progress; on STOP abandon it (None)."""
    command = None
    try:
        while True:
            try:
                update = job.send(command)
            except StopIteration as done:
                return done.value.image[0]
            fraction = None if update.fraction is None else start + span * update.fraction
            command = yield dataclasses.replace(
                update, fraction=fraction, message=f"{label}, {update.message}", outputs={}
            )
            if command is STOP:
                return None
    finally:
        job.close()
