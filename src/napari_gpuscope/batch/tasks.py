"""What a worker does for one position (and, for two-phase methods, once per run).

A task reads its position, runs the recipe's job from the registry (``job`` in the recipe: any
job of the method, e.g. flat-field's ``apply`` or eSRRF's ``sweep``; the method's main job when
the recipe names none) with the recipe's parameters on the worker's device, writes the result's
layers (``result.layers()``, the same mapping the docks use) into its own OME-Zarr group, with
the result's text files beside them when it has ``files(geometry)`` (eSRRF's ``drift.csv``),
then its completion marker, and returns a small summary (never an array) with the seconds it spent
reading, computing and writing. Whatever fails is recorded with its reason and returned as a
failed summary; only the death of the worker process itself is left to the driver. Device memory
pools (torch's and CuPy's) are kept from one position to the next, so that positions of one
shape reuse their blocks instead of paying cudaMalloc and cudaFree (and the synchronisation they
imply) every time; they are emptied only after a failed position or when the memory they hold
unused exceeds ``POOL_SLACK`` of the device (:func:`release_pools`).

Two-phase jobs name a hook object in ``JobSpec.batch`` (see
:class:`~napari_gpuscope.methods.JobSpec`): ``prepare(params, tiles, *, device, artifacts)``
runs once per run as one task (``tiles`` is a sequence of zero-argument readers, so a fit on a
subsample reads only what it uses; ``artifacts`` maps the recipe's artifact names to their
files) and its return value is handed to every position's
``job(data, params, *, prepared, device, cache_key)``. Hooks with
``screen(params, tiles) -> {index: reason}`` have every position checked first (without a
saved artifact): the positions it names are left out of ``prepare`` and failed with their
reason (naming the file), the others are prepared and computed as if those were absent.

The run's shared pieces are :mod:`.task_spec`'s, the device pools' policy :mod:`.pools`'s.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.inputs import Position
from napari_gpuscope.batch.pipeline import read_ahead, worker_label, write_slot
from napari_gpuscope.batch.pools import release_pools
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.batch.task_spec import ResolvedRecipe, TaskSpec

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import ArrayLike, JSONDict
    from napari_gpuscope.compute.results import Geometry, MethodResult

__all__ = ["NotMeasurableError", "Screened", "prepare_run", "run_position"]


def _device(task: TaskSpec) -> str:
    if task.device == "cpu":
        import torch

        if task.cpu_threads and torch.get_num_threads() != task.cpu_threads:
            # Several worker processes share the cores: one torch thread each, no oversubscription.
            torch.set_num_threads(task.cpu_threads)
        return "cpu"
    from napari_gpuscope.compute.devices import resolve_device

    return str(resolve_device(None if task.device == "cuda" else task.device))


def prepare_run(task: TaskSpec, positions: Sequence[Position]) -> object:
    """Run a two-phase method's ``prepare`` once (as one task); None for other methods."""
    resolved = task.resolve()
    prepare: Callable[..., object] | None = getattr(resolved.hooks, "prepare", None)
    if prepare is None:
        return None
    device = _device(task)
    failed = True
    try:
        tiles = [position.read for position in positions]
        artifacts = {name: Path(path) for name, path in task.artifacts.items()}
        screen = getattr(resolved.hooks, "screen", None)
        # A saved profile replaces the fit: the positions are not screened (a dark frame or a
        # mask is an input of the fit, which screens them as without it).
        fitted = not getattr(resolved.hooks, "replaces_fit", lambda names: bool(names))(
            set(artifacts)
        )
        if screen is None or not fitted:
            prepared = prepare(resolved.params, tiles, device=device, artifacts=artifacts)
            failed = False
            return prepared
        bad = screen(resolved.params, tiles)
        excluded = {
            positions[index].name: f"left out of the fit: {positions[index].source}: {reason}"
            for index, reason in sorted(bad.items())
        }
        kept = [tile for index, tile in enumerate(tiles) if index not in bad]
        value = prepare(resolved.params, kept, device=device, artifacts=artifacts) if kept else None
        failed = False
        return Screened(value, excluded)
    finally:
        release_pools(device, failed=failed)


@dataclass(frozen=True)
class Screened:
    """What :func:`prepare_run` returns for hooks with ``screen``: ``prepare``'s value on the
    positions that passed, and the positions left out with their reasons."""

    value: object
    excluded: dict[str, str] = field(default_factory=dict)


class NotMeasurableError(ValueError):
    """The job ran but its input held nothing to measure (the result says why)."""


def run_position(
    task: TaskSpec,
    position: Position,
    key: str,
    prepared: object = None,
    read_next: Position | None = None,
) -> dict:
    """Compute, write and mark one position; returns a small JSON-able summary.

    On a Dask worker the write overlaps the worker's next position and ``read_next`` is read
    ahead while this one computes (:mod:`.pipeline`); the position is marked done, and the
    task returns, only after its group is written and checksummed.

    Parameters
    ----------
    task : TaskSpec
    position : Position
    key : str
        The completion marker's key (:func:`~napari_gpuscope.batch.store.marker_key`).
    prepared : object, optional
        What the method's ``prepare`` hook returned.
    read_next : Position, optional
        The position this worker most likely computes next (read ahead, never computed here).

    Returns
    -------
    dict
        ``{"position", "status": "done" | "failed", "reason", "seconds", ...}``; a done
        position also has ``read_seconds`` (its metadata and :meth:`Position.open`: a
        memory-mapped TIFF or a Zarr array is read while the job runs, so that time counts as
        computing), ``compute_seconds`` (the job, until its layers are on the host) and
        ``write_seconds`` (the OME-Zarr groups, the result's files, the checksum and the
        marker); ``seconds`` also counts setting up
        (recipe, device, clearing an earlier attempt). ``groups`` and ``files`` (e.g.
        ``["A01/drift.csv"]``) list what the position wrote, relative to the store. ``busy``
        is ``[start, end]`` (seconds since the epoch) and ``worker`` names the host, process,
        Dask worker and its GPUs: the report's busy time per worker and GPU.
    """
    store = BatchStore(task.out)
    started = time.perf_counter()
    started_at = time.time()
    worker = {"host": platform.node(), "pid": os.getpid(), **worker_label()}
    stage = "setting up"
    device = "cpu"
    failed = True
    try:
        if store.is_complete(position.name, key):
            # Another attempt of this very computation finished (Dask reruns a task whose
            # worker died before reporting): its group and marker stand; rewriting them would
            # leave the position briefly absent, and a run ending meanwhile would lose it.
            failed = False
            return _already_done(store, position)
        if isinstance(prepared, Screened):
            if position.name in prepared.excluded:
                stage = "checking"
                raise _LeftOut(prepared.excluded[position.name])
            prepared = prepared.value
        resolved = task.resolve()
        device = _device(task)
        store.discard(position.name)
        stage = "reading"
        read_start = time.perf_counter()
        info = position.info()
        data = position.open()
        read_s = time.perf_counter() - read_start
        read_ahead(read_next)  # while this one computes
        stage = "computing"
        compute_start = time.perf_counter()
        result, record = _compute(resolved, position, data, device, prepared, info.axes)
        unmeasured = getattr(result, "not_measurable", "")
        if unmeasured:  # e.g. a tilt estimate of a blank stack: no result to mark done
            raise NotMeasurableError(f"{result.describe()}")
        describe = result.describe()
        if store.is_complete(position.name, key):
            # Finished meanwhile by another attempt (e.g. a resumed run while this cancelled
            # attempt of the interrupted one still ran): keep its group and marker.
            failed = False
            return _already_done(store, position)
        stage = "writing"
        from napari_gpuscope.compute.results import Geometry
        from napari_gpuscope.provenance import PROVENANCE_KEY

        # The layers reach the host here, before the write slot: the background write
        # touches no device while the next position computes.
        kwargs = info.geometry_kwargs()
        geometry = Geometry.from_kwargs(kwargs)
        layers = result.layers(position.name, geometry, metadata={PROVENANCE_KEY: record})
        files = _result_files(result, geometry)
        attrs = {
            "recipe": task.recipe,
            "recipe_hash": task.recipe_hash,
            "provenance": record,
            "position": position.name,
            "source": position.source,
            # What a file's layer is drawn over (the reader: the drift track at the input's
            # scale, centred on its frames), which the result images' own geometry is not.
            "input": {"shape": list(info.shape), "geometry": _json_geometry(kwargs)},
        }
        del result, data  # only the host layers are kept while the next position computes
        # Computing ends with the layers on the host: a GPU's queued work finishes at their
        # copy, which must not be counted as writing.
        compute_s = time.perf_counter() - compute_start
        with write_slot():
            write_start = time.perf_counter()
            written = store.write_position(position.name, layers, attrs, files)
            checksum = store.checksum(position.name)  # --resume checks the files still match
            now = time.perf_counter()
            summary = {
                "position": position.name,
                "status": "done",
                "seconds": round(now - started, 4),
                "read_seconds": round(read_s, 4),
                "compute_seconds": round(compute_s, 4),
                "write_seconds": round(now - write_start, 4),
                "groups": written,
                "files": [f"{position.name}/{file_name}" for file_name in sorted(files)],
                "describe": describe,
                "automatic": record.get("automatic") or {},  # values chosen from the data
                "worker": worker,
                "busy": [round(started_at, 4), round(time.time(), 4)],
            }
            marker = {**summary, "key": key, "recipe_hash": task.recipe_hash, "checksum": checksum}
            store.mark_done(position.name, marker)
        failed = False
        return summary
    except Exception as exc:
        if isinstance(exc, _LeftOut):
            store.discard(position.name)  # an earlier run's result is not this run's
            reason = str(exc)
        else:
            reason = f"{stage} {position.source}: {type(exc).__name__}: {exc}"
        summary = {
            "position": position.name,
            "status": "failed",
            "reason": reason,
            "seconds": round(time.perf_counter() - started, 4),
            "worker": worker,
            "busy": [round(started_at, 4), round(time.time(), 4)],
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


def _result_files(result: MethodResult, geometry: Geometry) -> dict[str, str]:
    """The result's text files (``files(geometry)``, optional in the result protocol: e.g.
    eSRRF's ``{"drift.csv": ...}``); ``{}`` for results without it."""
    make = getattr(result, "files", None)
    if make is None:
        return {}
    files = make(geometry)
    if not isinstance(files, Mapping):
        raise ValueError(
            f"the result's files(geometry) returned {type(files).__name__}; it must return a "
            "mapping of file name to text"
        )
    return dict(files)


def _json_geometry(kwargs: Mapping[str, object]) -> dict[str, list[object]]:
    """The input's layer geometry (scale, units, axis labels) as JSON lists."""
    return {key: list(value) for key, value in kwargs.items() if value is not None}


def _already_done(store: BatchStore, position: Position) -> JSONDict:
    """The summary of a position another attempt completed (its marker's, without the key)."""
    record = store.done_record(position.name) or {}
    return {
        **{k: v for k, v in record.items() if k not in ("key", "recipe_hash", "checksum")},
        "position": position.name,
        "status": "done",
    }


class _LeftOut(ValueError):
    """A position the method's ``screen`` left out of ``prepare`` (the reason names it)."""


def _compute(
    resolved: ResolvedRecipe,
    position: Position,
    data: ArrayLike,
    device: str,
    prepared: object,
    axes: tuple[str, ...] | None = None,
) -> tuple[MethodResult, JSONDict]:
    from napari_gpuscope.compute import devices
    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.provenance import build_provenance

    start = time.perf_counter()
    result = run_job(resolved.make_job(data, device, prepared, axes))
    elapsed = time.perf_counter() - start
    record = build_provenance(
        resolved.recipe.method,
        resolved.params.to_dict(),
        device=devices.device_label(device),
        input_name=position.source,
        elapsed_seconds=elapsed,
        result=result.summary(),
    )
    record["recipe_hash"] = resolved.recipe_hash
    record["job"] = resolved.job_id
    return result, record
