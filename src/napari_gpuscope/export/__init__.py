"""Export results with their provenance: figures (PNG + JSON sidecar) and TIFF files.

:mod:`.figure` draws the viewer as a figure (integer zoom, colorbar, scale bar, DPI),
:mod:`.screenshot` writes it with provenance, :mod:`.tiff` writes ImageJ TIFFs and
:mod:`.tiff_read` reads them, :mod:`.writer` is napari's "Save Selected Layers" writer and
:mod:`.commands` holds the File-menu commands with their dialogs.
"""

from napari_gpuscope.export.figure import FigureOptions, plan_figure, render_figure
from napari_gpuscope.export.screenshot import ScreenshotFiles, export_screenshot
from napari_gpuscope.export.tiff import save_layer_data_tiff, save_layer_tiff, save_tiff
from napari_gpuscope.export.tiff_read import TiffContents, read_tiff
from napari_gpuscope.export.tiff_samples import TiffOptions, TiffScaling
from napari_gpuscope.export.units import intensity_unit

__all__ = [
    "FigureOptions",
    "ScreenshotFiles",
    "TiffContents",
    "TiffOptions",
    "TiffScaling",
    "export_screenshot",
    "intensity_unit",
    "plan_figure",
    "read_tiff",
    "render_figure",
    "save_layer_data_tiff",
    "save_layer_tiff",
    "save_tiff",
]
