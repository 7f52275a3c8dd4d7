"""What a worker does for one position (and, for two-phase methods, once per run).

A task reads its position, runs the method's job from the registry with the recipe's
parameters on the worker's device, writes the result's layers (``result.layers()``, the same
mapping the docks use) into its own OME-Zarr group, then its completion marker, and returns a
small summary (never an array) with the seconds it spent reading, computing and writing.
Whatever fails is recorded with its reason and returned as a failed summary; only the death of
the worker process itself is left to the driver. Device memory pools (torch's and CuPy's) are
kept from one position to the next, so that positions of one shape reuse their blocks instead of
paying cudaMalloc and cudaFree (and the synchronisation they imply) every time; they are emptied
only after a failed position or when the memory they hold unused exceeds ``POOL_SLACK`` of the
device (:func:`release_pools`).

Two-phase methods name a hook object in ``MethodSpec.batch`` (see
:class:`~napari_gpuscope.methods.MethodSpec`): ``prepare(params, tiles, *, device, artifacts)``
runs once per run as one task (``tiles`` is a sequence of zero-argument readers, so a fit on a
subsample reads only what it uses; ``artifacts`` maps the recipe's artifact names to their
files) and its return value is handed to every position's
``job(data, params, *, prepared, device, cache_key)``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from napari_gpuscope.batch.inputs import Position
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.store import BatchStore

__all__ = ["POOL_SLACK", "TaskSpec", "prepare_run", "release_pools", "run_position"]

_RECIPES: dict[str, Recipe] = {}

POOL_SLACK = 0.25
"""Fraction of a GPU's memory that the device pools may hold unused between positions."""


@dataclass(frozen=True)
class TaskSpec:
    """What every task of one run shares (small: sent with each task).

    Attributes
    ----------
    recipe : dict
        The recipe as plain data (``Recipe.model_dump(mode="json")``).
    recipe_hash : str
    out : str
        The output store.
    device : str
        ``"cpu"``, ``"cuda"`` (the worker's first visible GPU: the one it is pinned to) or
        ``"cuda:N"``.
    cpu_threads : int or None
        torch threads per CPU worker (None: leave torch's default).
    artifacts : dict
        The recipe's artifacts: name -> absolute path (checked against their SHA-256 by the
        driver before the run).
    """

    recipe: dict[str, Any]
    recipe_hash: str
    out: str
    device: str = "cpu"
    cpu_threads: int | None = 1
    artifacts: dict[str, str] = field(default_factory=dict)

    def load_recipe(self) -> Recipe:
        """The validated recipe, parsed once per worker process."""
        recipe = _RECIPES.get(self.recipe_hash)
        if recipe is None:
            recipe = _RECIPES[self.recipe_hash] = Recipe.from_data(self.recipe)
        return recipe


def _device(task: TaskSpec) -> str:
    if task.device == "cpu":
        import torch

        if task.cpu_threads and torch.get_num_threads() != task.cpu_threads:
            # Several worker processes share the cores: one torch thread each, no oversubscription.
            torch.set_num_threads(task.cpu_threads)
        return "cpu"
    from napari_gpuscope.compute.devices import resolve_device

    return str(resolve_device(None if task.device == "cuda" else task.device))


def _hooks(method_id: str) -> Any:
    from napari_gpuscope.methods import load, method

    spec = method(method_id)
    return load(spec.batch) if spec.batch else None


def prepare_run(task: TaskSpec, positions: Sequence[Position]) -> Any:
    """Run a two-phase method's ``prepare`` once (as one task); None for other methods."""
    recipe = task.load_recipe()
    hooks = _hooks(recipe.method)
    prepare: Callable[..., Any] | None = getattr(hooks, "prepare", None)
    if prepare is None:
        return None
    device = _device(task)
    failed = True
    try:
        tiles = [position.read for position in positions]
        artifacts = {name: Path(path) for name, path in task.artifacts.items()}
        prepared = prepare(recipe.params_model(), tiles, device=device, artifacts=artifacts)
        failed = False
        return prepared
    finally:
        release_pools(device, failed=failed)


def _job(recipe: Recipe, data: Any, params: Any, device: str, prepared: Any) -> Any:
    from napari_gpuscope.methods import method

    hooks = _hooks(recipe.method)
    make_job = getattr(hooks, "job", None)
    if make_job is not None:
        return make_job(data, params, prepared=prepared, device=device, cache_key=recipe.hash())
    return method(recipe.method).job_function()(data, params=params, device=device)


def run_position(task: TaskSpec, position: Position, key: str, prepared: Any = None) -> dict:
    """Compute, write and mark one position; returns a small JSON-able summary.

    Parameters
    ----------
    task : TaskSpec
    position : Position
    key : str
        The completion marker's key (:func:`~napari_gpuscope.batch.store.marker_key`).
    prepared : object, optional
        What the method's ``prepare`` hook returned.

    Returns
    -------
    dict
        ``{"position", "status": "done" | "failed", "reason", "seconds", ...}``; a done
        position also has ``read_seconds`` (its metadata and :meth:`Position.open`: a
        memory-mapped TIFF or a Zarr array is read while the job runs, so that time counts as
        computing), ``compute_seconds`` (the job) and ``write_seconds`` (the layers and their
        OME-Zarr metadata); ``seconds`` also counts setting up (recipe, device, clearing an
        earlier attempt).
    """
    store = BatchStore(task.out)
    started = time.perf_counter()
    worker = {"host": platform.node(), "pid": os.getpid()}
    stage = "setting up"
    device = "cpu"
    failed = True
    try:
        if store.is_complete(position.name, key):
            # Another attempt of this very computation finished (Dask reruns a task whose
            # worker died before reporting): its group and marker stand; rewriting them would
            # leave the position briefly absent, and a run ending meanwhile would lose it.
            record = store.done_record(position.name) or {}
            return {
                **{k: v for k, v in record.items() if k not in ("key", "recipe_hash")},
                "position": position.name,
                "status": "done",
            }
        recipe = task.load_recipe()
        device = _device(task)
        store.discard(position.name)
        stage = "reading"
        read_start = time.perf_counter()
        info = position.info()
        data = position.open()
        read_s = time.perf_counter() - read_start
        stage = "computing"
        compute_start = time.perf_counter()
        result, record = _compute(recipe, position, data, device, prepared)
        compute_s = time.perf_counter() - compute_start
        stage = "writing"
        write_start = time.perf_counter()
        from napari_gpuscope.compute.results import Geometry
        from napari_gpuscope.provenance import PROVENANCE_KEY

        kwargs = info.geometry_kwargs()
        layers = result.layers(
            position.name, Geometry.from_kwargs(kwargs), metadata={PROVENANCE_KEY: record}
        )
        attrs = {
            "recipe": task.recipe,
            "recipe_hash": task.recipe_hash,
            "provenance": record,
            "position": position.name,
            "source": position.source,
        }
        written = store.write_position(position.name, layers, attrs)
        now = time.perf_counter()
        summary = {
            "position": position.name,
            "status": "done",
            "seconds": round(now - started, 4),
            "read_seconds": round(read_s, 4),
            "compute_seconds": round(compute_s, 4),
            "write_seconds": round(now - write_start, 4),
            "groups": written,
            "describe": result.describe(),
            "worker": worker,
        }
        store.mark_done(position.name, {**summary, "key": key, "recipe_hash": task.recipe_hash})
        failed = False
        return summary
    except Exception as exc:
        reason = f"{stage} {position.source}: {type(exc).__name__}: {exc}"
        summary = {
            "position": position.name,
            "status": "failed",
            "reason": reason,
            "seconds": round(time.perf_counter() - started, 4),
            "worker": worker,
        }
        # Unwritable markers: the driver records the failure in the report all the same.
        with contextlib.suppress(OSError):
            store.mark_failed(
                position.name,
                {**summary, "traceback": traceback.format_exc(limit=8), "key": key},
            )
        return summary
    finally:
        release_pools(device, failed=failed)


def _compute(recipe: Recipe, position: Position, data: Any, device: str, prepared: Any) -> Any:
    from napari_gpuscope.compute import devices
    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.provenance import build_provenance

    params = recipe.params_model()
    start = time.perf_counter()
    result = run_job(_job(recipe, data, params, device, prepared))
    elapsed = time.perf_counter() - start
    record = build_provenance(
        recipe.method,
        params.to_dict(),
        device=devices.device_label(device),
        input_name=position.source,
        elapsed_seconds=elapsed,
        result=result.summary(),
    )
    record["recipe_hash"] = recipe.hash()
    return result, record


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
