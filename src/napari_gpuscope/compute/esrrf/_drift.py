"""Drift of a time series, estimated by block cross-correlation (see :mod:`._drift_correct`).

Conventions (the whole plugin uses them): a drift trace is a float64 ``(T, 2)`` array of
``(dy, dx)`` in input pixels; frame ``t`` shows frame 0's content moved by ``+shifts[t]``, so
``shifts[0]`` is ``(0, 0)`` and :func:`correct_drift` moves frame ``t`` by ``-shifts[t]``.

Estimation streams the stack once (``reference="mean"``: 3 to 6 times, below): frames are
summed into blocks of ``time_averaging`` frames on the device; each finished block is
correlated with the reference at once (FFTs), so device and host memory are O(frame),
whatever the number of frames. The correlation peak is refined by an upsampled DFT around
the integer peak (Guizar-Sicairos et al., Opt. Lett. 2008; 1/20 px grid) and a parabola
through the finest grid's 3 x 3 maximum. Block shifts are placed at the blocks' centre
frames and interpolated to every frame by a cubic spline (a parabola for 3 blocks, a line
for 2); before the first and after the last centre the trace goes on straight, with the
slope at that centre of a least-squares parabola through the nearest blocks (3 to 5 of
them), or of a line through them where the parabola's curvature is within their noise. Each
block's uncertainty comes from the difference between its first and second half of frames
(:func:`_block_uncertainty`).

A block whose correlation with its reference has no peak above the height noise alone
reaches (:func:`_peak_significance`: frames without sample, camera background, a constant)
is not measured (issue 26 item 1): its drift is interpolated from the measured blocks, by the
same spline, and beyond the first and last measured blocks' frames the trace is held at its
value there (never extrapolated over frames without sample). :attr:`DriftResult.measured`
marks which blocks were measured, and the summary, the description and the CSV say which
frames were interpolated. Fewer than two measured blocks is an error, and so is a trace that
moves a frame by its whole size (``reference="previous"`` adds its steps up).

``reference="mean"`` (issue 26): one pass sums every frame; each block is then measured
against the mean of the *other* blocks (the block's own part, which correlates with it at lag
0 and pulled every shift towards 0, taken off), and the blocks' positions solved from these
shifts (each block's reference is a different mean: :func:`_mean_positions`). The plain mean
of a drifting stack is blurred along the drift's path, so the blocks are measured again
against the mean of the others *aligned* by their last shifts, until no block's position
changes by more than its uncertainty (:data:`MEAN_REFINEMENTS` passes at most;
:attr:`DriftResult.mean_refinement` says how many were made and whether they settled). As
with every reference, the trace is relative to frame 0.

``time_averaging=None`` (or ``"auto"``; the default since 2026-11-30, 50 before) chooses the
block length per stack (issue 27 item 3): a pilot pass measures every candidate length at
once (one block sum per candidate on the device), :func:`choose_block_length` estimates each
one's trace error, noise (the blocks' uncertainty propagated) plus bias (how far its trace
departs from the shorter candidates' beyond their noise, fitted over all of them as a bias
growing as the square of the length: :mod:`._drift_pooled_bias`), and the estimate is made
with the length of least error, named in :attr:`DriftResult.time_averaging_chosen`.

This module is the job (checks, the automatic length, then the estimate); the parts:
:mod:`._drift_blocks` (frame ranges, block sums, a block's noise), :mod:`._drift_correlate`
(spectra, sub-pixel peak, significance), :mod:`._drift_measure` (the passes with blocks of
one length), :mod:`._drift_mean` (the mean reference), :mod:`._drift_trace` (interpolation,
ends, block uncertainty), :mod:`._drift_checks` (what is refused), :mod:`._drift_auto` (the
pilot and :func:`choose_block_length`), :mod:`._drift_result`, :mod:`._drift_choice` and
:mod:`._drift_csv` (the results and the trace's file).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from ..job_parts import scaled
from ..jobs import Job, blocking
from ..memory import check_budget
from ..params import ParameterError
from ..signatures import takes_params
from ._drift_auto import _pilot
from ._drift_blocks import (
    auto_lengths,
    drift_blocks,
)
from ._drift_choice import BlockLengthChoice
from ._drift_correct import (
    _check_stack,
)
from ._drift_measure import _measure
from ._drift_params import DriftParams
from ._drift_result import DriftResult
from ._input import check_frames_per_chunk

__all__ = ["drift_blocks", "estimate_drift", "iter_estimate_drift"]


@takes_params(DriftParams)
def iter_estimate_drift(
    stack: Any,
    params: DriftParams,
    *,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    device: str | torch.device | None = None,
) -> Job[DriftResult]:
    """Estimate the drift of a time series as a job.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames (NumPy, dask, zarr, memory-mapped TIFF, torch), any real dtype,
        read chunk by chunk; never modified.
    {params}
    params : DriftParams, optional
        All parameters at once (keywords given as well override its fields).
    frames_per_chunk : int, optional
        At most this many frames per device chunk (default 64 on a GPU, 8 on the CPU).
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory.
    name : str
        How the input is called in error messages.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` runs on the CPU.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` after every chunk, with the
        metrics ``dy`` and ``dx`` (px) of each finished block at its centre frame (``step``);
        returns a :class:`DriftResult`. Sending ``STOP`` finishes the block being measured
        (and more until two are measured, a trace needs two) and returns the trace of the
        frames those blocks cover, marked ``stopped_early`` (with ``reference="mean"``, a
        stop during the reference's pass ends it there: the reference is the mean of the
        frames read; a stop during a later pass, one against the aligned mean, keeps the
        whole trace of the pass before it). With ``reference="mean"`` the blocks' metrics
        are those of the first pass, against the plain mean; the passes that follow refine
        them (:attr:`DriftResult.mean_refinement`). Blocks with no structure in common with
        their reference (no sample) are not measured: :attr:`DriftResult.measured` marks
        them, their drift is interpolated from the measured blocks and held beyond the first
        and last of them.
        With ``reference="previous"`` each block is correlated with the last measured one.
        With ``time_averaging=None`` the stack is read once more first, to choose the block
        length (:func:`choose_block_length`; progress 0-50 %): the result's
        ``time_averaging_chosen`` and ``block_length_choice`` say what was chosen and why.

    Raises
    ------
    InvalidInputError
        For a stack that is not ``(T, Y, X)``, frames smaller than 8 pixels, fewer than
        ``2 * time_averaging`` frames, or NaN/infinite values; fewer than two blocks with
        structure in common with their reference (naming the others; with
        ``reference="first"``, a first block without sample); a trace that moves a frame by
        its whole size or more (naming the frame: ``"previous"`` adds its steps up).
    ParameterError
        For invalid parameters, or a drift beyond ``max_drift`` (naming the block).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.esrrf import estimate_drift
    >>> y, x = np.mgrid[:64, :64]
    >>> blob = lambda cy, cx: 1000 * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / 8)
    >>> stack = np.stack([blob(30, 30)] * 4 + [blob(31, 32.5)] * 4)
    >>> r = estimate_drift(stack, time_averaging=4, device="cpu")
    >>> np.round(r.block_shifts[-1] - r.block_shifts[0], 2).tolist()
    [1.0, 2.5]
    """
    check_frames_per_chunk(frames_per_chunk)
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)
    n, height, width = _check_stack(stack, name)
    drift_blocks(n, params.time_averaging, name=name)
    if params.max_drift is not None and params.max_drift >= min(height, width) / 2:
        raise ParameterError(
            f"DriftParams.max_drift is {params.max_drift:g} px but the frames are {height} x "
            f"{width}: the correlation can only measure up to half a frame "
            f"({min(height, width) // 2 - 1} px); lower max_drift or use None"
        )
    memory_budget = check_budget(memory_budget)
    return _estimate(stack, params, frames_per_chunk, memory_budget, name, device)


def _estimate(
    stack: Any,
    params: DriftParams,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
) -> Job[DriftResult]:
    n = int(stack.shape[0])
    choice: BlockLengthChoice | None = None
    stopping = {"requested": False}  # Stop & keep: finish the block, return the blocks
    if params.time_averaging is None:
        lengths = auto_lengths(n)
        if len(lengths) == 1:
            choice = BlockLengthChoice(lengths[0], {lengths[0]: math.nan}, None)
        else:
            pilot = _pilot(stack, params, lengths, frames_per_chunk, memory_budget, name, device)
            choice = yield from scaled(pilot, 0.0, 0.5, "block length: ")
            stopping["requested"] = choice.stopped
        length = choice.length
        final = _measure(
            stack, params, length, frames_per_chunk, memory_budget, name, device, stopping
        )
        result = yield from scaled(final, 0.5 if len(choice.scores) > 1 else 0.0, 1.0)
        return dataclasses.replace(
            result, time_averaging_chosen=length, block_length_choice=choice.summary()
        )
    result = yield from _measure(
        stack, params, params.time_averaging, frames_per_chunk, memory_budget, name, device,
        stopping,
    )  # fmt: skip
    return result


estimate_drift = blocking(iter_estimate_drift)
estimate_drift.__doc__ = """Estimate the drift of a time series; blocking version of
:func:`iter_estimate_drift` (same parameters).

Returns
-------
DriftResult
    ``.shifts`` float64 ``(T, 2)``: ``(dy, dx)`` of every frame relative to frame 0.

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.esrrf import estimate_drift
>>> y, x = np.mgrid[:32, :32]
>>> blob = 1000 * np.exp(-((y - 15) ** 2 + (x - 16) ** 2) / 8)
>>> stack = np.random.default_rng(0).poisson(100 + np.stack([blob] * 8)).astype(np.uint16)
>>> estimate_drift(stack, time_averaging=4, device="cpu").shifts.shape
(8, 2)
"""
