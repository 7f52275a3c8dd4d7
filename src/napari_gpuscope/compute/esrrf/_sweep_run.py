"""The sweep's run, once its input is checked (:func:`._sweep.iter_parameter_sweep`): the drift
estimated once, then each cell's even, odd and whole-stack reconstructions, their FRC, RSP,
decorrelation resolution and the grid's QnR, streamed cell by cell; a stop keeps the cells done.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from ..job_parts import mapped, stoppable_part
from ..jobs import Job, Output, Progress, is_stop
from ._decorr import decorrelation_resolution
from ._drift import iter_estimate_drift
from ._drift_correct import correct_drift
from ._job import iter_esrrf
from ._qnr import error_map, frc_resolution, qnr_scores
from ._sweep_result import SweepResult, _empty, cell_words
from ._temporal import macro_pixel_correct

# The decorrelation analysis needs this many pixels per side (after eSRRF's border is cut).
_DECORR_MIN_SIDE = 16


def _sweep(
    stack, radii, sensitivities, base, frames, pixel_size, device, unit=""
) -> Job[SweepResult]:
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
            return _empty(radii, sensitivities, asked, frames, pixel_size, trace, unit)
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
            done = yield from stoppable_part(job, start, start + span, f"{label}, ")
            if done is None:
                stopped = True
                break
            images.append(done.image[0])
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
            f"{sensitivities[i]:g}: "
            + cell_words(frc[i, j], rsp[i, j], decorr[i, j], pixel_size, unit, m),
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
        unit=unit,
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
