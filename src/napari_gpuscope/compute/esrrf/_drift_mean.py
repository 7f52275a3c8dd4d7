"""``reference="mean"``: each block against the mean of the other blocks, their positions
solved from these shifts, refined against the mean aligned by them (issue 26)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..jobs import Job
from ._drift_correct import shift_frames
from ._drift_correlate import _Correlator
from ._drift_trace import _block_uncertainty


@dataclasses.dataclass
class _Pass:
    """One pass of the estimate over the blocks: each block's shift against its reference,
    whether it was measured, its halves' shift, whether they share structure, the aligned
    sum (each measured block moved back by its shift, weighted by its frames over the
    stack's), the frames in it, and how many blocks were read (fewer after a stop)."""

    measured: np.ndarray
    known: np.ndarray
    halves: np.ndarray
    structured: np.ndarray
    aligned: torch.Tensor
    aligned_frames: int
    done: int


class _MeanReference:
    """The reference of ``reference="mean"``: the mean of the frames (``total``: the sum of
    each block's part, ``frames / n`` of it in all; ``(1, Y, X)``), each block in it moved
    back by ``shifts[k]`` (zero on the first pass: the plain mean), and which blocks are in it
    (``entered``).

    A block is measured against the mean of the *others* (:meth:`spectrum_without`): the
    block's own part correlates with the block at lag 0 (its noise and its blinking emitters
    exactly), which pulled every shift towards 0, by up to a pixel for a drift of 10 px over
    the stack (issue 26).
    """

    def __init__(
        self, total: torch.Tensor, frames: int, n: int, shifts: np.ndarray, entered: np.ndarray
    ) -> None:
        self.total, self.frames, self.n = total, frames, n
        self.shifts, self.entered = shifts, entered

    def spectrum_without(
        self, k: int, mean: torch.Tensor, count: int, correlator: _Correlator
    ) -> torch.Tensor:
        """The spectrum of the mean of the other blocks' frames (``mean``: block ``k``'s mean
        of ``count`` frames). Its part is taken off as it was added (moved back by the same
        shift), so only rounding is left of it; a block that is not in the mean wholly (a
        stop during the reference's pass read part of it) or alone in it is measured against
        the whole mean."""
        if self.entered[k] and self.frames > count:
            own = shift_frames(mean[None], self.shifts[k : k + 1]) * (count / self.n)
            image = (self.total - own) * (self.n / (self.frames - count))
        else:
            image = self.total * (self.n / self.frames)
        return correlator.spectrum(image[0])


MEAN_REFINEMENTS = 4
"""Most passes that re-measure the blocks against the mean of the aligned others
(``reference="mean"``); each reads the stack once more. A linear drift of 8 px over 8 blocks
(simulated blinking stacks) settles after 1 or 2."""

MEAN_TOLERANCE_FLOOR = 0.01
"""Smallest change (px) that counts as one in the refinement's stopping rule, where a block's
uncertainty is unknown (blocks of one frame) or smaller: well below any block's error on
real data, and about what the peak refinement resolves (a parabola through a 1/20 px grid)."""


def _refine_mean(
    state: _Pass,
    plain: _MeanReference,
    blocks: list[tuple[int, int]],
    measuring: Callable[[float, float, _MeanReference | None, _Pass | None], Job[_Pass | None]],
    stopping: dict[str, bool],
    span: tuple[float, float],
) -> Job[tuple[_Pass, dict[str, Any]]]:
    """The blocks' positions (:func:`_mean_positions`) from the pass against the plain mean
    (``state``), then from passes against the mean of the other blocks *aligned* by the last
    pass's shifts, until no block's position changes by more than its uncertainty (beyond a
    common offset, which the trace relative to frame 0 drops), at most
    :data:`MEAN_REFINEMENTS` times. The plain mean of a drifting stack is blurred along the
    drift's path (a ridge in the correlation rather than a peak, whose maximum lies anywhere
    along it); the aligned mean is as sharp as a block, and the positions' linear model holds.

    Returns the last pass, its ``measured`` replaced by the positions, and what happened
    (:attr:`DriftResult.mean_refinement`): the measuring passes, whether they converged, the
    largest change of the last one (px) and whether a stop cut the refinement short (the
    last complete pass is kept). A stop during the reference's pass (its mean holds only the
    frames read) keeps the first pass's shifts as measured."""
    n = plain.n
    info: dict[str, Any] = {
        "passes": 1,
        "converged": False,
        "largest_change_px": None,
        "most_passes": 1 + MEAN_REFINEMENTS,
        "stopped": bool(stopping["requested"]),
    }
    if plain.frames < n or state.known.sum() < 2:
        return state, info
    positions = _mean_positions(state, plain, blocks)
    lo, hi = span
    for i in range(MEAN_REFINEMENTS):
        if stopping["requested"] or state.done < len(blocks):
            info["stopped"] = bool(stopping["requested"])
            break
        reference = _MeanReference(
            state.aligned, state.aligned_frames, n, state.measured, state.known
        )
        step = (hi - lo) / MEAN_REFINEMENTS
        newer = yield from measuring(lo + i * step, lo + (i + 1) * step, reference, state)
        if newer is None:  # a stop: the last complete pass stands
            info["stopped"] = True
            break
        if newer.known.sum() < 2:  # refused by _check_measured: nothing to refine
            state, positions = newer, newer.measured
            break
        moved = _mean_positions(newer, reference, blocks)
        excess, change = _position_change(state.known, positions, newer, moved, blocks)
        state, positions = newer, moved
        info["passes"] += 1
        info["largest_change_px"] = change
        if excess <= 1.0:
            info["converged"] = True
            break
    return dataclasses.replace(state, measured=positions), info


def _mean_positions(
    state: _Pass, reference: _MeanReference, blocks: list[tuple[int, int]]
) -> np.ndarray:
    """``(B, 2)``: each measured block's position from its shift against the mean of the
    others (NaN-free; unmeasured blocks keep their values).

    Block ``j`` enters the reference moved back by ``s_j`` (``reference.shifts``), so it sits
    at ``x_j - s_j`` where ``x_j`` is its position; the others' mean sits at their weighted
    mean position (weights: frames; the linear model of a correlation peak, exact where
    these offsets are small beside the sample's structure) and the measured shift is
    ``m_k = x_k - sum_j a_kj (x_j - s_j)``, ``a_kj`` block ``j``'s share of block ``k``'s
    reference. The reference differs from block to block, so ``m`` is not a trace: against
    the plain mean (all ``s = 0``) ``m_k = x_k - mean_j≠k x_j``, a linear drift stretched by
    ``B / (B - 1)`` (2 for two blocks). The system is solved by least squares for the
    positions of the measured blocks (an entered block measured no more is taken at its
    ``s``); a common offset solves it as well, and the one chosen gives ``x`` the frame
    weighted mean of ``m``, so the aligned mean (built with ``m``) stays in ``x``'s
    coordinates."""
    counts = np.array([b - a for a, b in blocks], np.float64)
    rows = np.nonzero(state.known)[0]
    column = {int(k): i for i, k in enumerate(rows)}
    weights = np.where(reference.entered, counts, 0.0)
    matrix = np.eye(len(rows))
    rhs = state.measured[rows].copy()
    for i, k in enumerate(rows):
        share = weights.copy()
        if reference.entered[k] and reference.frames > counts[k]:
            share[k] = 0.0  # left out of its own reference (spectrum_without)
        if share.sum() <= 0:
            return state.measured.copy()
        share /= share.sum()
        for j in np.nonzero(share)[0]:
            if int(j) in column:
                matrix[i, column[int(j)]] -= share[j]
                rhs[i] -= share[j] * reference.shifts[j]
    solved = np.linalg.lstsq(matrix, rhs, rcond=None)[0]
    w = counts[rows] / counts[rows].sum()
    solved += (w[:, None] * (state.measured[rows] - solved)).sum(axis=0)
    positions = state.measured.copy()
    positions[rows] = solved
    return positions


def _position_change(
    known: np.ndarray,
    old: np.ndarray,
    new: _Pass,
    positions: np.ndarray,
    blocks: list[tuple[int, int]],
) -> tuple[float, float]:
    """``(largest change over its tolerance, largest change in px)`` of the measured blocks'
    positions from ``old`` to ``positions`` (of the pass ``new``), their mean change (a
    common offset) taken off; a block's tolerance is its uncertainty
    (:func:`_block_uncertainty`), at least :data:`MEAN_TOLERANCE_FLOOR`. A block measured in
    one pass and not the other: infinite (the set of blocks has not settled)."""
    if not np.array_equal(known, new.known):
        return math.inf, math.inf
    good = np.nonzero(new.known)[0]
    centres = np.array([(a + b - 1) / 2 for a, b in blocks], np.float64)[good]
    uncertainty = _block_uncertainty(
        centres, positions[good], new.halves[good], [blocks[i] for i in good]
    )
    tolerance = np.where(
        np.isfinite(uncertainty),
        np.maximum(uncertainty, MEAN_TOLERANCE_FLOOR),
        MEAN_TOLERANCE_FLOOR,
    )
    change = positions[good] - old[good]
    change -= change.mean(axis=0)
    return float(np.max(np.abs(change) / tolerance)), float(np.abs(change).max())
