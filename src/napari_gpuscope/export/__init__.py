"""Export results with their provenance: canvas screenshots (PNG + JSON sidecar) and TIFF files.

Qt-free functions live in :mod:`.screenshot` and :mod:`.tiff`; :mod:`.commands` holds the
File-menu commands with their dialogs.
"""

from napari_gpuscope.export.screenshot import ScreenshotFiles, export_screenshot
from napari_gpuscope.export.tiff import (
    TiffContents,
    TiffScaling,
    read_tiff,
    save_layer_tiff,
    save_tiff,
)

__all__ = [
    "ScreenshotFiles",
    "TiffContents",
    "TiffScaling",
    "export_screenshot",
    "read_tiff",
    "save_layer_tiff",
    "save_tiff",
]
