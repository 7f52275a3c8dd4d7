"""A Dask worker preload that pins each worker process of a multi-GPU job to one of its GPUs.

A scheduler gives a job with N GPUs ``CUDA_VISIBLE_DEVICES=a,b,...`` and dask-jobqueue starts
N worker processes in it (``dask worker --nworkers N``), named ``<job>-0`` to ``<job>-<N-1>``.
Each process keeps only the entry of its own number, so its GPU is its ``cuda:0`` and no two
workers share a GPU. This runs when the worker starts, before any task: nothing has touched
CUDA yet (the package never does at import time).
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["dask_setup", "pinned_device"]


class _Named(Protocol):
    name: object


def pinned_device(worker_name: object, visible: str | None) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` entry of the worker process numbered by its name's suffix,
    or None when there is nothing to choose (one GPU, no list, or no number).

    Examples
    --------
    >>> pinned_device("SLURMCluster-3-1", "4,7")
    '7'
    >>> pinned_device("SLURMCluster-3-0", "4,7")
    '4'
    """
    names = [name.strip() for name in (visible or "").split(",") if name.strip()]
    suffix = str(worker_name).rsplit("-", 1)[-1]
    if len(names) < 2 or not suffix.isdigit():
        return None
    index = int(suffix)
    if index >= len(names):
        raise RuntimeError(
            f"worker {worker_name}: the job has {len(names)} GPU(s) (CUDA_VISIBLE_DEVICES="
            f"{visible}) but this is worker process {index}; ask for as many GPUs per job as "
            "worker processes (--gpus-per-job)"
        )
    return names[index]


def dask_setup(worker: _Named) -> None:
    """Keep only this worker process's GPU visible (the preload's entry point)."""
    device = pinned_device(worker.name, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
