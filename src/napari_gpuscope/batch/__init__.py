"""Batch runs: recipes saved from the docks, applied to whole experiments on Dask.

``recipes`` (the recipe model and YAML), ``schema`` (the recipe's JSON Schema), ``inputs``
(positions from TIFF globs and OME-Zarr), ``store`` (the OME-Zarr output and its completion
markers), ``tasks`` (what a worker does for one position), ``cluster`` (local CPU/GPU clusters,
SLURM, an existing scheduler), ``runner`` (the driver), ``report``, ``status``, ``progress``,
``cli`` (the ``recipe``, ``run``, ``validate`` and ``status`` commands) and ``reader`` (napari's
reader of a result position at its true scale). See ``docs/batch.md``.

Nothing here imports Qt or napari; the compute layer is imported lazily, by the workers.
Importing this package imports none of its modules: each is imported when used.
"""

__all__ = [
    "cli",
    "cluster",
    "inputs",
    "progress",
    "reader",
    "recipes",
    "report",
    "runner",
    "schema",
    "status",
    "store",
    "tasks",
]
