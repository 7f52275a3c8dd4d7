"""The blocks of a drift estimate: frame ranges, the candidate lengths of the automatic
choice, the per-block sums streamed frames are added to, and a block's noise image (its
halves' difference)."""

from __future__ import annotations

import itertools
import math

import torch

from ..arrays import InvalidInputError


def drift_blocks(
    n_frames: int,
    time_averaging: int | None,
    *,
    name: str = "stack",
    parameter: str = "time_averaging",
) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the blocks: ``time_averaging`` frames each, the remainder
    joined to the last block; at least two blocks, or an error saying how many frames are
    needed (naming ``parameter``: eSRRF's is ``drift_time_averaging``). ``None``
    (automatic) checks that the stack has two frames and returns the blocks of the finest
    length :func:`auto_lengths` tries.

    Examples
    --------
    >>> drift_blocks(250, 100)
    [(0, 100), (100, 250)]
    """
    if time_averaging is None:
        if n_frames < 2:
            raise InvalidInputError(
                f"{name} has {n_frames} frame(s); drift estimation needs at least 2 frames "
                "(a single frame has no drift to estimate)"
            )
        time_averaging = auto_lengths(n_frames)[0]
    count = n_frames // time_averaging
    if count < 2:
        raise InvalidInputError(
            f"{name} has {n_frames} frame(s); drift estimation with {parameter}="
            f"{time_averaging} needs at least {2 * time_averaging} frames (two blocks to "
            f"correlate). Lower {parameter} to at most {max(1, n_frames // 2)}"
            + (" (a single frame has no drift to estimate)" if n_frames < 2 else "")
        )
    edges = [k * time_averaging for k in range(count)] + [n_frames]
    return list(itertools.pairwise(edges))


AUTO_SHORTEST = 4
"""Shortest block the automatic choice tries: halves of 2 frames, the fewest whose
difference measures a block's noise with some emitters in common."""

AUTO_MOST_BLOCKS = 128
"""Most blocks a candidate length may cut the stack into (the pilot correlates every block
of every candidate, twice: about ``2 * frames * sum(1 / length)`` correlations, 806 for 1,000
frames)."""

AUTO_FEWEST_BLOCKS = 3
"""Fewest blocks of a candidate: the end rule and the curvature need three."""


def auto_lengths(n_frames: int) -> list[int]:
    """Block lengths the automatic choice compares: 4, 6, 8, 12, 16, 24, ... (steps of
    1.5 and 4/3: the error of a length off the best by a step is within ~7 % of the best's
    for noise ~1/L and bias ~L^2), from ``max(4, frames / 128)`` to ``frames / 3``; a
    stack too short for three blocks of 4 gets ``[frames // 2]`` (two blocks).

    Examples
    --------
    >>> auto_lengths(200)
    [4, 6, 8, 12, 16, 24, 32, 48, 64]
    >>> auto_lengths(2000)
    [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    >>> auto_lengths(9)
    [4]
    """
    shortest = max(AUTO_SHORTEST, -(-n_frames // AUTO_MOST_BLOCKS))
    longest = n_frames // AUTO_FEWEST_BLOCKS
    ladder, power = [], AUTO_SHORTEST
    while power <= longest:
        ladder += [power, power * 3 // 2]
        power *= 2
    lengths = sorted(length for length in ladder if shortest <= length <= longest)
    return lengths or [max(1, n_frames // 2)]


class _BlockSums:
    """Per-block sums of all frames and of the block's first half (frames before ``middle``),
    filled chunk by chunk."""

    def __init__(self, shape: tuple[int, int], device: torch.device, middle: int = 0) -> None:
        self.total = torch.zeros(shape, dtype=torch.float64, device=device)
        self.first_half = torch.zeros_like(self.total)
        self.middle = middle
        self.frames = 0


class _StopReading(Exception):
    """Stop & keep during the mean reference's pass: the frames read so far are the mean."""


def _noise_image(sums: _BlockSums, count: int) -> torch.Tensor:
    """The block's noise alone, at the level of its mean's: the difference of its halves'
    means (the sample cancels, as far as it does not change within the block), scaled by
    ``sqrt(m (n - m)) / n`` (halves of ``m`` and ``n - m`` frames: the difference's variance
    is ``sigma^2 (1/m + 1/(n - m))``, the mean's ``sigma^2 / n``)."""
    early = count // 2
    first = sums.first_half / early
    second = (sums.total - sums.first_half) / (count - early)
    return (first - second) * (math.sqrt(early * (count - early)) / count)
