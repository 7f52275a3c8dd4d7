"""``napari-gpuscope run``: check a recipe and its input, then apply it to every position on
a Dask cluster (local, SLURM, PBS or LSF), with a progress bar and a report."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from napari_gpuscope.batch.cli_fail import fail

if TYPE_CHECKING:
    from napari_gpuscope.batch.cluster import ClusterChoice
    from napari_gpuscope.batch.inputs import Position
    from napari_gpuscope.batch.recipes import Recipe

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run the batch ``args`` describe; returns the exit code."""
    from napari_gpuscope.batch.inputs import discover_all
    from napari_gpuscope.batch.recipes import load_recipe

    recipe = load_recipe(args.recipe)
    problems = recipe.check_artifacts(args.recipe.parent)
    if problems:
        return fail("; ".join(problems))
    if getattr(args, "watch", False):
        return _watch(args, recipe)
    positions = discover_all(args.input)
    input_name = " ".join(str(spec) for spec in args.input)
    from napari_gpuscope.batch.status import validate_inputs

    # The first position only (every one would cost a metadata read each on the driver).
    first = validate_inputs(recipe, positions[:1], recipe_dir=args.recipe.parent, pixels=False)
    for problem in first:
        print(
            f"warning: {problem} (check every position with 'napari-gpuscope validate')",
            file=sys.stderr,
        )
    if args.cluster == "local" and args.device == "cpu" and args.workers is not None:
        cores = os.cpu_count() or 1
        if args.workers > cores:
            return fail(
                f"--workers {args.workers}: this machine has {cores} cores; give 1 to {cores} "
                "(one worker process per core)"
            )
    choice = _cluster_choice(args)
    if choice.uses_gpu and choice.cluster == "local":
        from napari_gpuscope.batch.cluster import gpu_indices

        gpu_indices(choice.device)  # a clear error before any worker starts
    print(
        f"{recipe.method}: {len(positions)} positions from {input_name} -> {args.out} "
        f"on {args.device} (recipe {recipe.hash()[:12]})"
    )
    from napari_gpuscope.batch.store import BatchStore

    if args.dry_run:
        from napari_gpuscope.batch.runner import plan

        todo, skipped, unreadable = plan(
            recipe, positions, BatchStore(args.out), resume=args.resume
        )
        print(f"dry run: would compute {len(todo)}, skip {len(skipped)} (complete)")
        from napari_gpuscope.batch.jobqueue import SCHEDULERS, job_script

        if choice.cluster in SCHEDULERS:
            print(f"job script ({choice.cluster}, one per job):")
            print(job_script(choice))
        for name, reason in unreadable.items():
            print(f"  unreadable {name}: {reason}")
        return 1 if unreadable else 0
    from napari_gpuscope.batch.lock import StoreLock
    from napari_gpuscope.batch.runner import check_run

    # Before the cluster starts: a locked, unwritable, corrupt or earlier store, or a changed
    # artifact, is refused (exit 2) without a worker or a dashboard.
    with StoreLock(BatchStore(args.out), wait=args.wait):
        check_run(
            recipe,
            args.out,
            resume=args.resume,
            overwrite=args.overwrite,
            recipe_dir=args.recipe.parent,
        )
        return _run_on_cluster(args, recipe, positions, choice)


def _cluster_choice(args: argparse.Namespace) -> ClusterChoice:
    from napari_gpuscope.batch.cluster import ClusterChoice

    return ClusterChoice(
        cluster=args.cluster,
        device=args.device,
        workers=args.workers,
        dashboard=args.dashboard,
        walltime=args.walltime,
        queue=args.queue,
        account=args.account,
        memory=args.memory,
        gpus_per_job=args.gpus_per_job,
    )


def _watch(args: argparse.Namespace, recipe: Recipe) -> int:
    """``run --watch``: follow INPUT until Ctrl-C (or ``--watch-idle``), resuming OUT."""
    if args.overwrite or args.dry_run:
        option = "--overwrite" if args.overwrite else "--dry-run"
        return fail(
            f"{option} cannot be combined with --watch: a watch resumes OUT and computes "
            "positions as they are written (run without --watch first to overwrite or plan)"
        )
    from napari_gpuscope.batch.cluster import open_client
    from napari_gpuscope.batch.lock import StoreLock
    from napari_gpuscope.batch.runner import check_run
    from napari_gpuscope.batch.store import BatchStore
    from napari_gpuscope.batch.watch import (
        DEFAULT_POLL_S,
        check_watch,
        describe_settings,
        watch_batch,
    )

    specs = [str(spec) for spec in args.input]
    check_watch(recipe, specs)  # a fit on all positions, or a name clash: before any worker
    choice = _cluster_choice(args)
    if choice.uses_gpu and choice.cluster == "local":
        from napari_gpuscope.batch.cluster import gpu_indices

        gpu_indices(choice.device)
    with StoreLock(BatchStore(args.out), wait=args.wait):
        check_run(recipe, args.out, resume=True, overwrite=False, recipe_dir=args.recipe.parent)
    print(f"{recipe.method}: watching {' '.join(specs)} -> {args.out} on {args.device}")
    print(describe_settings(args.settle, DEFAULT_POLL_S, args.watch_idle))
    with open_client(choice) as client:

        def said(report: object) -> None:
            for line in report.lines():  # type: ignore[attr-defined]
                print(line, flush=True)

        watched = watch_batch(
            recipe,
            specs,
            args.out,
            client,
            device=choice.task_device,
            recipe_dir=args.recipe.parent,
            settle_s=args.settle,
            idle_s=args.watch_idle,
            on_round=said,
        )
    if args.report is not None:
        watched.write(args.report)
    for line in watched.lines():
        print(line, file=sys.stderr if line.startswith("FAILED") else sys.stdout)
    return 130 if watched.stopped_by == "interrupt" else watched.exit_code


def _run_on_cluster(
    args: argparse.Namespace, recipe: Recipe, positions: list[Position], choice: ClusterChoice
) -> int:
    from napari_gpuscope.batch.cluster import open_client
    from napari_gpuscope.batch.progress import ProgressBar
    from napari_gpuscope.batch.runner import StoreExistsError, run_batch

    with open_client(choice) as client:
        if client.dashboard_link:
            print(f"Dask dashboard: {client.dashboard_link}")
        bar = None if args.no_progress else ProgressBar(len(positions))

        def update(done: int, failed: int, total: int) -> None:
            if bar is not None:
                bar.total = total  # the positions to compute (resumed ones are not counted)
                bar.update(done=done, failed=failed)

        try:
            report = run_batch(
                recipe,
                positions,
                args.out,
                client,
                resume=args.resume,
                overwrite=args.overwrite,
                device=choice.task_device,
                input_name=" ".join(str(spec) for spec in args.input),
                recipe_dir=args.recipe.parent,
                on_update=update,
                wait=args.wait,
            )
        except StoreExistsError as exc:
            return fail(str(exc))
        if bar is not None and report.done + list(report.failed):
            bar.update(done=len(report.done), failed=len(report.failed), final=True)
    if args.report is not None:
        report.write(args.report)
    for line in report.lines():
        print(line, file=sys.stderr if line.startswith(("FAILED", "INTERRUPTED")) else sys.stdout)
    return report.exit_code
