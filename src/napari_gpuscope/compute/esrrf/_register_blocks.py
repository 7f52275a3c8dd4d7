"""The elastic map of channel registration: overlapping blocks half a block apart, the blocks of
low similarity replaced by their neighbours' median, and the block map interpolated bilinearly
to one ``(dy, dx)`` per pixel (:func:`._register.register_channels` with ``elastic=True``).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import ndimage


def _block_starts(n: int, size: int) -> np.ndarray:
    """Block origins half a block apart, the last one flush with the far edge."""
    step = max(1, size // 2)
    starts = list(range(0, n - size + 1, step))
    if starts[-1] != n - size:
        starts.append(n - size)
    return np.asarray(starts)


def _blocks(data: torch.Tensor, rows: np.ndarray, cols: np.ndarray, size: int) -> torch.Tensor:
    """``(C, R, K, size, size)`` blocks of ``(C, H, W)`` images."""
    return torch.stack(
        [torch.stack([data[:, r : r + size, c : c + size] for c in cols], dim=1) for r in rows],
        dim=1,
    )


def _smooth_blocks(
    measured: np.ndarray,
    similarity: np.ndarray,
    translation: np.ndarray,
    min_similarity: float,
) -> np.ndarray:
    """Blocks below ``min_similarity`` take their good neighbours' median (the channel's
    translation where none is good); then a 3 x 3 median filter over the block grid."""
    out = measured.astype(np.float64).copy()
    n_channels, _, n_rows, n_cols = out.shape
    for c in range(n_channels):
        good = similarity[c] >= min_similarity
        for r in range(n_rows):
            for k in range(n_cols):
                if good[r, k]:
                    continue
                near = (slice(max(r - 1, 0), r + 2), slice(max(k - 1, 0), k + 2))
                usable = good[near]
                for axis in range(2):
                    values = out[c, axis][near][usable]
                    out[c, axis, r, k] = np.median(values) if values.size else translation[c, axis]
        for axis in range(2):
            out[c, axis] = ndimage.median_filter(out[c, axis], size=3, mode="nearest")
    return out


def _pixel_fields(
    blocks: np.ndarray, centres: tuple[np.ndarray, np.ndarray], shape: tuple[int, int]
) -> np.ndarray:
    """``(C, 2, H, W)`` bilinear interpolation of the block map between block centres (held
    constant beyond the outermost centres)."""
    rows = np.clip(np.arange(shape[0]), centres[0][0], centres[0][-1])
    cols = np.clip(np.arange(shape[1]), centres[1][0], centres[1][-1])
    row_pos = np.interp(rows, centres[0], np.arange(len(centres[0])))
    col_pos = np.interp(cols, centres[1], np.arange(len(centres[1])))
    grid_r, grid_c = np.meshgrid(row_pos, col_pos, indexing="ij")
    out = np.empty((*blocks.shape[:2], *shape), np.float32)
    for c in range(blocks.shape[0]):
        for axis in range(2):
            out[c, axis] = ndimage.map_coordinates(
                blocks[c, axis], [grid_r, grid_c], order=1, mode="nearest"
            )
    return out
