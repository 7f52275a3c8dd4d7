"""What a worker does for one position (and, for two-phase methods, once per run).

A task reads its position, runs the method's job from the registry with the recipe's
parameters on the worker's device, writes the result's layers (``result.layers()``, the same
mapping the docks use) into its own OME-Zarr group, then its completion marker, and returns a
small summary (never an array). Whatever fails is recorded with its reason and returned as a
failed summary; only the death of the worker process itself is left to the driver. Device memory
pools (torch's and CuPy's) are emptied after every position so they do not starve each other.

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

__all__ = ["TaskSpec", "prepare_run", "run_position"]

_RECIPES: dict[str, Recipe] = {}


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
    try:
        tiles = [position.read for position in positions]
        artifacts = {name: Path(path) for name, path in task.artifacts.items()}
        return prepare(recipe.params_model(), tiles, device=device, artifacts=artifacts)
    finally:
        _free(device)


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
        ``{"position", "status": "done" | "failed", "reason", "seconds", ...}``.
    """
    store = BatchStore(task.out)
    started = time.perf_counter()
    worker = {"host": platform.node(), "pid": os.getpid()}
    stage = "setting up"
    device = "cpu"
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
        info = position.info()
        data = position.open()
        read_s = time.perf_counter() - started
        stage = "computing"
        result, record = _compute(recipe, position, data, device, prepared)
        compute_s = time.perf_counter() - started - read_s
        stage = "writing"
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
        seconds = time.perf_counter() - started
        summary = {
            "position": position.name,
            "status": "done",
            "seconds": round(seconds, 4),
            "read_seconds": round(read_s, 4),
            "compute_seconds": round(compute_s, 4),
            "write_seconds": round(seconds - read_s - compute_s, 4),
            "groups": written,
            "describe": result.describe(),
            "worker": worker,
        }
        store.mark_done(position.name, {**summary, "key": key, "recipe_hash": task.recipe_hash})
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
        _free(device)


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


def _free(device: str) -> None:
    """Empty torch's and CuPy's pools after a position, so the two never starve each other.

    Not :func:`~napari_gpuscope.compute.memory.free_cached`: its ``gc.collect()`` (for a failed
    attempt's frames) costs more than a small position here, and a finished job has already
    released its tensors. Nothing to do on the CPU.
    """
    if not device.startswith("cuda"):
        return
    import torch

    # A broken CUDA context must not hide the position's own outcome.
    with contextlib.suppress(Exception):
        torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")  # only if the method used it: never import it here
    if cupy is not None:
        with contextlib.suppress(Exception):
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
