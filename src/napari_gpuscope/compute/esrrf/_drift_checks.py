"""What a drift estimate refuses: too few measured blocks, a trace beyond the frame, a
drift beyond ``max_drift``."""

from __future__ import annotations

import numpy as np

from ..arrays import InvalidInputError
from ..params import ParameterError

_MIN_MEASURED = 2
"""Blocks with structure a trace needs: the drift between two measured blocks is the least
there is to interpolate; with one, any trace would be invented."""


def _block_list(indices: np.ndarray, blocks: list[tuple[int, int]], most: int = 4) -> str:
    """``"block 1 (frames 0-19), block 4 (frames 60-79)"`` (the first ``most``)."""
    parts = [f"block {k + 1} (frames {blocks[k][0]}-{blocks[k][1] - 1})" for k in indices[:most]]
    if len(indices) > most:
        parts.append(f"and {len(indices) - most} more")
    return ", ".join(parts)


def _check_measured(
    known: np.ndarray, blocks: list[tuple[int, int]], reference: str, name: str
) -> None:
    """Refuse a stack with fewer than :data:`_MIN_MEASURED` blocks whose correlation with
    their reference has a peak above the noise (:func:`_peak_significance`): frames without
    sample (background, a constant or pure noise) give a shift that is noise, tens of
    pixels, and blocks without a measured neighbour have nothing to interpolate from."""
    if known.sum() >= _MIN_MEASURED:
        return
    blank = np.nonzero(~known)[0]
    against = {
        "first": "the first block",
        "previous": "the block before them",
        "mean": "the mean of the other frames",
    }[reference]
    hint = (
        " (with reference='first', the first block is every block's reference: if it shows "
        "no sample, use reference='mean')"
        if reference == "first"
        else ""
    )
    raise InvalidInputError(
        f"{name}: {len(blank)} of {len(blocks)} blocks have no structure in common with "
        f"{against}: {_block_list(blank, blocks)}: their correlation peaks are below the "
        f"height that noise alone reaches, so no drift can be measured there (frames "
        f"without sample: background, a constant, noise). A trace needs at least "
        f"{_MIN_MEASURED} measured blocks to interpolate the others from{hint}. Crop the "
        "stack to frames that show the sample, or raise time_averaging"
    )


def _check_within_frame(
    shifts: np.ndarray, frame_shape: tuple[int, int], reference: str, name: str
) -> None:
    """Refuse a trace that moves a frame by its whole size or more: such frames share no
    content with frame 0 and cannot be corrected (:func:`check_shifts` refuses the trace).
    Each block's shift is measured within half a frame, but ``reference="previous"`` adds
    the steps up (issue 26 item 13: a shift beyond the frame is never returned)."""
    too_far = np.abs(shifts) >= np.asarray(frame_shape, np.float64)
    if not too_far.any():
        return
    t = int(np.nonzero(too_far.any(axis=1))[0][0])
    how = (
        "the previous-block steps add up to more than the frame"
        if reference == "previous"
        else "the trace goes beyond the frame"
    )
    raise InvalidInputError(
        f"{name}: frame {t} has drifted by (dy {shifts[t, 0]:+.2f}, dx {shifts[t, 1]:+.2f}) "
        f"px from frame 0, as far as the whole {frame_shape[0]} x {frame_shape[1]} px frame "
        f"or more ({how}): such frames share no content with frame 0, so the trace cannot "
        "be right and cannot be corrected. Split the stack where the field of view changes"
    )


def _check_limit(
    shift: np.ndarray,
    on_edge: bool,
    limit: float | None,
    k: int,
    first: int,
    stop: int,
    against: str,
) -> None:
    if limit is None:
        return
    if on_edge or np.abs(shift).max() > limit:
        raise ParameterError(
            f"DriftParams.max_drift is {limit:g} px but block {k + 1} (frames {first}-"
            f"{stop - 1}) correlates best with {against} at the edge of that search range or "
            f"beyond it (dy {shift[0]:+.2f}, dx {shift[1]:+.2f} px): the drift is larger; "
            "raise max_drift (or None)"
        )
