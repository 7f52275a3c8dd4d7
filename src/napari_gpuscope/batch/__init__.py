"""Batch runs: recipes saved from the docks, applied to whole experiments on Dask.

``recipes`` (the recipe model), ``recipe_sections`` (its input facts, artifacts and
provenance), ``recipe_yaml`` (its YAML text), ``recipe_union`` (the recipe type of each job and
their union), ``schema`` (the recipe's JSON Schema), ``inputs`` (positions from TIFF globs and
OME-Zarr), ``store`` (the output's positions and their completion markers), ``ngff`` (a
position's OME-Zarr image groups), ``lock`` (one run at a time per store), ``task_spec`` (what
a run's tasks share), ``tasks`` (what a worker does for one position), ``pools`` (the device
memory pools between positions), ``pipeline`` (a worker's next position read ahead and each
position written in the background), ``cluster`` (local CPU/GPU clusters, an existing
scheduler), ``jobqueue`` (SLURM, PBS and LSF through dask-jobqueue), ``gpu_pin`` (a job's
worker processes pinned to its GPUs), ``runner`` (the driver), ``run_record`` (the store's
record of a run and its positions, merged on resume), ``report``, ``status``, ``progress``,
``watch`` (positions run as an acquisition writes them; the files it follows
``watch_positions``), ``cli`` (the
``recipe``, ``run``, ``validate`` and ``status`` commands: their arguments ``cli_parsers``, each
in ``cli_recipe``, ``cli_run``, ``cli_inspect``, errors ``cli_fail``) and ``reader`` (the reader
of a result store: which folders are ours ``reader_layout``, one position at its true scale
``reader_position``, a store's root ``reader_store``, channel colours ``reader_colours``; napari's
entry point, which records the reader preference, is ``napari_gpuscope.napari_reader``). See
``docs/batch.md``.

Nothing here imports Qt or napari; the compute layer is imported lazily, by the workers.
Importing this package imports none of its modules: each is imported when used.
"""

__all__ = [
    "cli",
    "cli_fail",
    "cli_inspect",
    "cli_parsers",
    "cli_recipe",
    "cli_run",
    "cluster",
    "gpu_pin",
    "inputs",
    "jobqueue",
    "lock",
    "ngff",
    "pipeline",
    "pools",
    "progress",
    "reader",
    "reader_colours",
    "reader_layout",
    "reader_position",
    "reader_store",
    "recipe_sections",
    "recipe_union",
    "recipe_yaml",
    "recipes",
    "report",
    "run_record",
    "runner",
    "schema",
    "status",
    "store",
    "task_spec",
    "tasks",
    "watch",
    "watch_positions",
]
