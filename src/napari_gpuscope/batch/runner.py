"""The batch driver: plan which positions to compute, submit them to Dask, record everything.

Examples
--------
>>> import tempfile, pathlib, numpy as np, tifffile
>>> from napari_gpuscope.batch.cluster import ClusterChoice, open_client
>>> from napari_gpuscope.batch.inputs import discover
>>> from napari_gpuscope.batch.recipes import Recipe
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> noisy = np.random.default_rng(0).poisson(20, (2, 32, 32)).astype(np.uint16)
>>> for i, plane in enumerate(noisy):
...     tifffile.imwrite(folder / f"p{i}.tif", plane)
>>> with open_client(ClusterChoice(device="cpu", workers=1, dashboard="")) as client:
...     report = run_batch(Recipe.from_defaults("tv"), discover(str(folder / "*.tif")),
...                        folder / "out.zarr", client)
>>> report.done, report.failed
(['p0', 'p1'], {})
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.cluster import GPU_RESOURCE, TASK_GPU_SHARE
from napari_gpuscope.batch.inputs import Position
from napari_gpuscope.batch.lock import StoreLock
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.report import BatchReport
from napari_gpuscope.batch.run_record import merge_run_records, run_record
from napari_gpuscope.batch.store import BatchStore, StoreError, marker_key
from napari_gpuscope.batch.task_spec import TaskSpec
from napari_gpuscope.batch.tasks import prepare_run, run_position

if TYPE_CHECKING:
    from distributed import Client, Future

    from napari_gpuscope.compute._types import JSONDict

__all__ = ["StoreExistsError", "check_run", "plan", "run_batch"]


class StoreExistsError(RuntimeError):
    """OUT holds an earlier run and neither ``--resume`` nor ``--overwrite`` was given."""


def check_run(
    recipe: Recipe,
    out: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    recipe_dir: str | Path | None = None,
) -> None:
    """Raise what a run would refuse with before it reads or computes a position.

    The console command calls it (holding the store's lock) before it starts a cluster, so a
    refused run starts no worker and prints no dashboard; :func:`run_batch` calls it again.
    It creates the store's root group when it is missing (what the run would do first).

    Parameters
    ----------
    recipe : Recipe
    out : str or Path
        The OME-Zarr output store.
    resume, overwrite : bool
        As for :func:`run_batch`.
    recipe_dir : str or Path, optional
        Where relative artifact paths start (the recipe file's folder).

    Raises
    ------
    ValueError
        An artifact is missing or changed since the recipe was saved.
    StoreError
        The store's ``run.json`` is corrupt, or the store cannot be written.
    StoreExistsError
        ``out`` holds an earlier run and neither ``resume`` nor ``overwrite`` is set.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "out.zarr"
    >>> check_run(Recipe.from_defaults("tv"), out)
    >>> (out / "zarr.json").is_file()
    True
    """
    problems = recipe.check_artifacts(Path(recipe_dir) if recipe_dir is not None else None)
    if problems:
        raise ValueError("; ".join(problems))
    store = BatchStore(out)
    # With overwrite the record goes unread: a corrupt one is deleted with the rest.
    if not overwrite and store.run_record() is not None and not resume:
        raise StoreExistsError(
            f"{store.out} holds an earlier run: pass --resume to compute only what is missing "
            "or --overwrite to start again"
        )
    import zarr

    try:  # the run's first write (BatchStore.prepare), made here where a refusal costs nothing
        zarr.open_group(str(store.out), mode="a", zarr_format=3)
    except OSError as exc:
        raise StoreError(
            f"cannot write the output store {exc.filename or store.out}: "
            f"{exc.strerror or exc}; give --out a folder you can write to"
        ) from None


def plan(
    recipe: Recipe,
    positions: Sequence[Position],
    store: BatchStore,
    *,
    resume: bool,
    recipe_hash: str | None = None,
) -> tuple[list[tuple[Position, str]], list[str], dict[str, str]]:
    """Split the positions into (to compute with their marker keys, skipped, unreadable).

    A position is skipped only with ``resume`` and a matching, complete marker; a position
    whose identity cannot be read (a missing file) is reported, not computed.
    ``recipe_hash`` is ``recipe.hash()`` when the caller has it already.
    """
    if recipe_hash is None:
        recipe_hash = recipe.hash()
    todo, skipped, unreadable = [], [], {}
    for position in positions:
        try:
            key = marker_key(recipe_hash, position.identity())
        except (OSError, ValueError, KeyError) as exc:
            unreadable[position.name] = f"reading {position.source}: {type(exc).__name__}: {exc}"
            continue
        if resume and store.is_complete(position.name, key):
            skipped.append(position.name)
        else:
            todo.append((position, key))
    return todo, skipped, unreadable


def run_batch(
    recipe: Recipe,
    positions: Sequence[Position],
    out: str | Path,
    client: Client,
    *,
    resume: bool = False,
    overwrite: bool = False,
    device: str = "cpu",
    input_name: str = "",
    dry_run: bool = False,
    recipe_dir: str | Path | None = None,
    on_update: Callable[[int, int, int], None] | None = None,
    wait: bool = False,
) -> BatchReport:
    """Apply a recipe to every position on a Dask cluster.

    Parameters
    ----------
    recipe : Recipe
    positions : sequence of Position
    out : str or Path
        The OME-Zarr output store.
    client : distributed.Client
    resume : bool
        Skip positions whose completion marker matches (recipe hash and input identity), and
        add this run's positions to the store's record instead of replacing it
        (:func:`~napari_gpuscope.batch.run_record.merge_run_records`), so ``status`` still
        counts the positions of earlier runs (a watch's earlier rounds).
    overwrite : bool
        Delete an earlier output first.
    device : str
        What each task runs on: ``"cpu"`` or ``"cuda"`` (each worker's pinned GPU); GPU tasks
        require the worker resource ``GPU=1``.
    input_name : str
        The INPUT as given (for the report).
    dry_run : bool
        Plan only: report what would be computed and skipped.
    recipe_dir : str or Path, optional
        Where relative artifact paths start (the recipe file's folder).
    on_update : callable, optional
        ``on_update(done, failed, total)`` after each finished position (``total``: the
        positions this run computes).
    wait : bool
        When another run holds the store's lock, wait for it instead of refusing.

    Returns
    -------
    BatchReport

    Raises
    ------
    StoreExistsError
        ``out`` holds an earlier run and neither ``resume`` nor ``overwrite`` is set.
    StoreError
        The store is locked by another run (and ``wait`` is not set), cannot be written, or
        its ``run.json`` is corrupt.
    ValueError
        An artifact is missing or changed since the recipe was saved.

    Notes
    -----
    An interrupt (Ctrl-C) cancels the positions not yet finished and returns the report so
    far, marked ``interrupted``. A run (not a dry run) holds the store's lock
    (:class:`~napari_gpuscope.batch.lock.StoreLock`) throughout and first deletes the
    ``.writing-*`` folders an interrupted run left.
    """
    args = (recipe, positions, out, client, resume, overwrite, device, input_name)
    if dry_run:
        return _run_batch(*args, True, recipe_dir, on_update)
    with StoreLock(BatchStore(out), wait=wait):
        return _run_batch(*args, False, recipe_dir, on_update)


def _run_batch(
    recipe: Recipe,
    positions: Sequence[Position],
    out: str | Path,
    client: Client,
    resume: bool,
    overwrite: bool,
    device: str,
    input_name: str,
    dry_run: bool,
    recipe_dir: str | Path | None,
    on_update: Callable[[int, int, int], None] | None,
) -> BatchReport:
    start = time.perf_counter()
    # Hashed once here: plan, the run record, the report and every task (TaskSpec) share it.
    recipe_hash = recipe.hash()
    base = Path(recipe_dir) if recipe_dir is not None else None
    if dry_run:
        problems = recipe.check_artifacts(base)
        if problems:
            raise ValueError("; ".join(problems))
    else:
        check_run(recipe, out, resume=resume, overwrite=overwrite, recipe_dir=base)
    artifacts = {a.name: str(recipe.artifact_path(a, base).resolve()) for a in recipe.artifacts}
    store = BatchStore(out)
    if overwrite and not dry_run:
        store.prepare({}, overwrite=True)
    elif not dry_run:
        store.clean_staging()
    todo, skipped, failed = plan(recipe, positions, store, resume=resume, recipe_hash=recipe_hash)
    report = BatchReport(
        recipe_hash,
        recipe.method,
        input_name,
        str(store.out),
        device,
        skipped=skipped,
        failed=dict(failed),
        dashboard=getattr(client, "dashboard_link", None),
        dry_run=dry_run,
    )
    if dry_run:
        report.done = [position.name for position, _ in todo]
        report.finish(time.perf_counter() - start, {})
        return report
    record = run_record(recipe, recipe_hash, positions, input_name)
    if resume:  # a watch round or a --resume with some positions: the others stay recorded
        record = merge_run_records(store.run_record(), record)
    store.prepare(record)
    for name, reason in failed.items():
        store.mark_failed(name, {"position": name, "status": "failed", "reason": reason})
    spec = TaskSpec(
        recipe.model_dump(mode="json"),
        recipe_hash,
        str(store.out),
        device=device,
        artifacts=artifacts,
    )
    # Half a GPU per task: one position written while the next computes (TASK_GPU_SHARE).
    resources = {GPU_RESOURCE: TASK_GPU_SHARE} if device != "cpu" else None
    position_seconds: dict[str, float] = {}
    position_stages: dict[str, dict[str, float]] = {}
    # A two-phase job prepares on every readable position of the run, skipped (complete) ones
    # included: a resumed flat-field run fits the profile the first run fitted.
    readable = [position for position in positions if position.name not in failed]
    futures = _submit(client, spec, todo, resources, readable)
    report.done, finished_failed, summaries = [], 0, []
    from distributed import as_completed

    try:
        for future in as_completed(list(futures)):
            position = futures.pop(future)
            summary = _outcome(future, position)
            summaries.append(summary)
            # Let go of the result at once: a future still held is one Dask recomputes when
            # the worker keeping its (small) result dies, and that rerun would rewrite a
            # position this report already calls done, possibly after the run has ended.
            future.release()
            if summary["status"] == "done":
                report.done.append(position.name)
                position_seconds[position.name] = summary["seconds"]
                position_stages[position.name] = {
                    stage: summary[f"{stage}_seconds"]
                    for stage in ("read", "compute", "write")
                    if f"{stage}_seconds" in summary
                }
                report.note_automatic(position.name, summary.get("automatic"))
            else:
                report.failed[position.name] = summary["reason"]
                finished_failed += 1
                if "worker" not in summary:  # the task never reported: record it here
                    store.mark_failed(position.name, summary)
            if on_update is not None:
                on_update(len(report.done), finished_failed, len(todo))
    except KeyboardInterrupt:
        # Finished positions keep their markers; the rest stay pending for --resume.
        client.cancel(list(futures))
        report.interrupted = True
    report.done.sort()
    report.finish(time.perf_counter() - start, position_seconds, position_stages)
    from napari_gpuscope.batch.pipeline import worker_busy

    report.workers = worker_busy(summaries)
    return report


def _submit(
    client: Client,
    spec: TaskSpec,
    todo: list[tuple[Position, str]],
    resources: dict[str, float] | None,
    prepare_on: Sequence[Position],
) -> dict[Future, Position]:
    from napari_gpuscope.methods import load, method

    run_id = uuid.uuid4().hex[:8]
    prepared = None
    batch_hooks = method(spec.recipe["method"]).batch
    if todo and batch_hooks and getattr(load(batch_hooks), "prepare", None) is not None:
        prepared = client.submit(
            prepare_run,
            spec,
            list(prepare_on),
            key=f"prepare-{run_id}",
            resources=resources,
            pure=False,
        )
    # Tasks start about in this order, one per worker: the one W further on is most likely
    # this worker's next, read ahead while this one computes (W: the workers up now).
    ahead = max(1, len(client.nthreads()))
    return {
        client.submit(
            run_position,
            spec,
            position,
            key,
            prepared,
            todo[index + ahead][0] if index + ahead < len(todo) else None,
            key=f"position-{position.name}-{run_id}",
            resources=resources,
            pure=False,
        ): position
        for index, (position, key) in enumerate(todo)
    }


def _outcome(future: Future, position: Position) -> JSONDict:
    """The task's summary, or a failed one when the task could not report (worker died,
    ``prepare`` failed)."""
    try:
        return future.result()
    except Exception as exc:
        from distributed import KilledWorker

        if isinstance(exc, KilledWorker):
            reason = (
                f"the worker process died while computing {position.source} (too many times to "
                f"retry; out of host memory or a crash?): {exc}"
            )
        else:
            reason = f"{position.source}: {type(exc).__name__}: {exc}"
        return {"position": position.name, "status": "failed", "reason": reason}
