"""The radius x sensitivity parameter sweep: FRC and decorrelation resolution, RSP and QnR.

Each setting reconstructs the even and the odd frames separately (the FRC of the two is the
resolution) and the whole stack (whose RSP against the widefield mean is the fidelity), as
NanoJ-eSRRF and NanoPyx do; for AVG the whole-stack image is the frame-weighted mean of the two
halves (exact), so each setting costs two reconstructions. QnR (:func:`._qnr.qnr_scores`) then
ranks the settings. The decorrelation resolution of the whole-stack image
(:func:`._decorr.decorrelation_resolution`, as NanoPyx's ``use_decorr``) is a third map beside
FRC and RSP: a resolution from one image where the FRC needs two; QnR stays FRC-based. One
job: every cell streams in as it is computed, and a stop keeps the cells done so far.

Modules: the result is :mod:`._sweep_result`, the run of the cells :mod:`._sweep_run`; this
module checks the grid and the input and starts the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError
from ..jobs import Job, blocking
from ..params import ParameterError
from ._drift import drift_blocks
from ._input import check_stack
from ._params import EsrrfParams
from ._sweep_params import MAX_SWEEP_VALUES, SweepParams, duplicates_text
from ._sweep_result import SweepResult
from ._sweep_run import _sweep

__all__ = ["SWEEP_OUTPUTS", "SweepResult", "iter_parameter_sweep", "iter_sweep", "parameter_sweep"]

SWEEP_OUTPUTS = ("frc_resolution", "rsp", "qnr", "decorr_resolution")
"""Keyed outputs of the sweep job: one ``(n_sensitivities, n_radii)`` grid each (NaN where not
computed yet); FRC, RSP and the decorrelation resolution stream cell by cell, QnR as a whole
(it depends on every cell)."""


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
    unit: str = "",
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
    unit : str
        The pixel size's unit (e.g. ``"µm"``), for the words of the updates and the result;
        empty: input pixels at ``pixel_size`` 1, else "x pixel size".
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
    return _sweep(
        stack, radii, sensitivities, base, frames, float(pixel_size), device, unit=str(unit)
    )


def iter_sweep(
    stack: ArrayLike,
    params: SweepParams | None = None,
    *,
    pixel_size: float = 1.0,
    unit: str = "",
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
    unit : str
        The pixel size's unit, for the words (as :func:`iter_parameter_sweep`'s).
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
        unit=unit,
        device=device,
    )


parameter_sweep = blocking(iter_parameter_sweep)
parameter_sweep.__doc__ = """Radius x sensitivity sweep; blocking version of
:func:`iter_parameter_sweep` (same parameters). Returns a :class:`SweepResult`."""
