"""Device memory pools between a worker's positions: kept for reuse, emptied only when it pays.

torch's and CuPy's pools are kept from one position to the next, so that positions of one
shape reuse their blocks instead of paying cudaMalloc and cudaFree (and the synchronisation
they imply) every time; they are emptied only after a failed position or when the memory they
hold unused exceeds ``POOL_SLACK`` of the device (:func:`release_pools`).
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["POOL_SLACK", "release_pools"]

POOL_SLACK = 0.25
"""Fraction of a GPU's memory that the device pools may hold unused between positions."""


def release_pools(device: str, *, failed: bool) -> bool:
    """Empty torch's and CuPy's device pools after a position, only when it pays.

    Kept, the pools let the next position (usually of the same shape) reuse their blocks; so
    they are emptied only after a failed position (an out-of-memory error leaves the pools
    fragmented) or when they hold more unused memory than ``POOL_SLACK`` of the device (a
    position of another shape, or the other library, would find no room). Not
    :func:`~napari_gpuscope.compute.memory.free_cached`: its ``gc.collect()`` (for a failed
    attempt's frames) costs more than a small position here. Nothing to do on the CPU.

    Returns
    -------
    bool
        Whether the pools were emptied.
    """
    if not device.startswith("cuda"):
        return False
    import torch

    cupy = sys.modules.get("cupy")  # only if the method used it: never import it here
    # A broken CUDA context must not hide the position's own outcome.
    try:
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        total = torch.cuda.get_device_properties(device).total_memory
        if cupy is not None:
            with contextlib.suppress(Exception):
                pool = cupy.get_default_memory_pool()
                unused += pool.total_bytes() - pool.used_bytes()
    except Exception:
        return False
    if not failed and unused <= POOL_SLACK * total:
        return False
    with contextlib.suppress(Exception):
        torch.cuda.empty_cache()
    if cupy is not None:
        with contextlib.suppress(Exception):
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
    return True
