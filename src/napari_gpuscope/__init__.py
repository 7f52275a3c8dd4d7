"""napari-gpuscope: GPU tools for microscopists in napari.

The package is split in layers, each importing only those below it (import-linter contracts in
``pyproject.toml`` keep it so):

- :mod:`napari_gpuscope.widgets` -- the Qt/magicgui dock widgets, one per method, on one
  shared base.
- :mod:`napari_gpuscope.batch` -- recipes saved from the docks, applied to whole experiments on
  Dask (``napari-gpuscope run``, local GPUs or SLURM). No Qt, no napari.
- :mod:`napari_gpuscope.export` -- figures, screenshots and TIFF files that carry provenance.
- :mod:`napari_gpuscope.compute` -- pure array code (torch, CuPy, NumPy): every method's jobs,
  parameters, results and fused kernels. No Qt, no napari, no registry.

Beside them: :mod:`napari_gpuscope.methods` (the registry, the one list of methods),
:mod:`napari_gpuscope.provenance` (what produced a result), :mod:`napari_gpuscope.sample_data`,
:mod:`napari_gpuscope.demos` (every method on its samples, headless) and
:mod:`napari_gpuscope.cli` (the ``napari-gpuscope`` console command).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("napari-gpuscope")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
