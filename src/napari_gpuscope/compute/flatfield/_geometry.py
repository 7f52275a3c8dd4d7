"""Launch geometry and memory model of the fused ALM kernels (``basic_alm.cu``).

How many lanes ``basic_sparse`` gives each image, how many chunks ``basic_dual`` splits the
image axis into, the float64 partial-sum buffer both write, the bytes they move (what the GPU
kit's roofline uses) and the DC scale the kernels use to read an image's mean off its DCT.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "dc_scale",
    "dual_chunks",
    "scratch_doubles",
    "scratch_for",
    "sizes",
    "sparse_lanes",
    "step_bytes",
]

SPARSE_THREADS = 2**17
"""Threads ``basic_sparse`` aims for: each image gets this / (P T) lanes (a power of two)."""
MIN_LANE_PIXELS = 16
"""Pixels each ``basic_sparse`` lane sums at least (its two float64 partials stay small)."""
MAX_LANES = 1024
DUAL_THREADS = 2**18
"""Threads ``basic_dual`` aims for: the image axis is split into chunks until P M C reaches it."""
MIN_CHUNK_IMAGES = 8
"""Images each ``basic_dual`` chunk holds at least (its float64 partials stay small)."""


def sparse_lanes(n_images: int, n_pixels: int) -> int:
    """Lanes (threads) per image of ``basic_sparse`` for ``n_images = P T`` images of
    ``n_pixels`` pixels: a power of two from 32 to 1024.

    Examples
    --------
    >>> sparse_lanes(1000, 128 * 128), sparse_lanes(50, 128 * 128), sparse_lanes(10, 35)
    (256, 1024, 32)
    """
    lanes = 32
    while (
        lanes < MAX_LANES
        and 2 * lanes * MIN_LANE_PIXELS <= n_pixels
        and lanes * n_images < SPARSE_THREADS
    ):
        lanes *= 2
    return lanes


def dual_chunks(n_images: int, n_columns: int) -> int:
    """Chunks of the image axis of ``basic_dual`` for ``n_images = T`` images per problem and
    ``n_columns = P M`` pixels.

    Examples
    --------
    >>> dual_chunks(1000, 128 * 128), dual_chunks(50, 128 * 128), dual_chunks(5, 63)
    (16, 4, 1)
    """
    chunks = 1
    while 2 * chunks * MIN_CHUNK_IMAGES <= n_images and chunks * n_columns < DUAL_THREADS:
        chunks *= 2
    return chunks


def sizes(images: torch.Tensor) -> tuple[int, int, int]:
    """``(P, T, M)`` of a ``(P, T, m, n)`` stack (``M = m n`` pixels per image)."""
    p, t = images.shape[:2]
    return p, t, images[0, 0].numel()


def scratch_doubles(images: torch.Tensor, with_dark: bool) -> dict[str, int]:
    """float64 partial sums ``basic_sparse`` and ``basic_dual`` write for the
    ``(P, T, m, n)`` stack ``images`` (the darkfield adds a third sum to the dual's)."""
    p, t, m = sizes(images)
    return {
        "basic_sparse": 2 * p * t * (sparse_lanes(p * t, m) + 1),  # partials, row sums
        "basic_dual": (3 if with_dark else 2) * dual_chunks(t, p * m) * p * m,
    }


def scratch_for(images: torch.Tensor, with_dark: bool, op: str | None = None) -> torch.Tensor:
    """The float64 partial-sum buffer for the ``(P, T, m, n)`` stack ``images``, as the float32
    tensor the ops take: for both ops (they use it in turn, so one buffer serves an iteration),
    or sized exactly for ``op`` (``"basic_sparse"``/``"basic_dual"``: what the kit hands to
    compute-sanitizer, so an overrun shows)."""
    doubles = scratch_doubles(images, with_dark)
    count = max(doubles.values()) if op is None else doubles[op]
    return torch.empty(2 * count, dtype=torch.float32, device=images.device)


def step_bytes(images: torch.Tensor, with_dark: bool) -> dict[str, int]:
    """Device memory traffic of ``basic_sparse`` and ``basic_dual`` on the ``(P, T, m, n)``
    stack, in bytes: 16 B per stack element each (three float32 reads and one write), plus the
    per-problem images, baselines and float64 partials (what the roofline of the kit uses)."""
    p, t, m = sizes(images)
    n = p * t * m
    lanes = sparse_lanes(p * t, m)
    chunks = dual_chunks(t, p * m)
    sums = 3 if with_dark else 2
    images_small = 4 * p * m  # one (P, M) float32 image
    sparse = 16 * n + 3 * images_small + 2 * 8 * p * t * lanes + 2 * 4 * p * t
    dual = 16 * n + 2 * images_small + 8 * p * t + sums * 8 * chunks * p * m
    return {"basic_sparse": sparse, "basic_dual": dual}


def dc_scale(n_pixels: int) -> float:
    """``1 / sqrt(M)`` rounded to float32: ``flat_hat[0] * scale`` is the mean of the image
    (orthonormal DCT-II), as the kernels compute it."""
    return float(np.float32(1.0 / math.sqrt(n_pixels)))
