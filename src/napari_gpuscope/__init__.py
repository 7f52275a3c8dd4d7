"""napari-gpuscope: GPU tools for microscopists in napari.

The package is split in three layers:

- :mod:`napari_gpuscope.compute` -- pure array code (torch, CuPy, NumPy). No Qt, no napari.
- :mod:`napari_gpuscope.widgets` -- thin Qt/magicgui dock widgets on one shared base.
- :mod:`napari_gpuscope.export` -- screenshots and TIFF files that carry provenance.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("napari-gpuscope")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
