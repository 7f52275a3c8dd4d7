"""File-menu commands (``napari/file/io_utilities``): figure and TIFF export with dialogs.

``napari.yaml`` points the commands ``napari-gpuscope.export_screenshot`` and
``napari-gpuscope.save_result_tiff`` here; napari injects the viewer. Every question asked of
the user can be answered by an argument instead (``path=``, ``zoom=``, ``dtype=``...), which
is how scripts and tests skip the dialogs. Failures become napari notifications; nothing is
raised into the Qt event loop.
"""

from __future__ import annotations

import logging
from pathlib import Path

from napari.layers import Image, Layer
from napari.utils.notifications import show_error, show_info, show_warning
from napari.viewer import Viewer

from napari_gpuscope.export._dialogs import (
    FigureOptionsDialog,
    TiffOptionsDialog,
    ask_save_path,
)
from napari_gpuscope.export.figure import FigureOptions
from napari_gpuscope.export.screenshot import ScreenshotFiles, export_screenshot
from napari_gpuscope.export.tiff import save_layer_tiff
from napari_gpuscope.export.tiff_samples import TiffOptions
from napari_gpuscope.provenance import is_result

__all__ = [
    "SAVE_TIFF_COMMAND",
    "SCREENSHOT_COMMAND",
    "default_export_layer",
    "export_screenshot_dialog",
    "save_tiff_dialog",
]

SCREENSHOT_COMMAND = "napari-gpuscope.export_screenshot"
SAVE_TIFF_COMMAND = "napari-gpuscope.save_result_tiff"

_log = logging.getLogger(__name__)


def _save_folder() -> Path:
    from napari.utils.history import get_save_history

    return Path(get_save_history()[0])


def _remember_folder(path: Path) -> None:
    from napari.utils.history import update_save_history

    update_save_history(str(path))


def _safe_file_stem(name: str) -> str:
    stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip("._")
    return stem or "image"


def default_export_layer(viewer: Viewer) -> Image | None:
    """The layer "Save result as TIFF" saves when none is given.

    The active or a selected image layer carrying a provenance record (a result) wins; otherwise
    the active image layer; otherwise ``None``.
    """
    selection = viewer.layers.selection
    active = selection.active
    candidates = [active, *sorted(selection, key=lambda layer: layer.name)]
    for layer in candidates:
        if isinstance(layer, Image) and is_result(layer):
            return layer
    return active if isinstance(active, Image) else None


def export_screenshot_dialog(
    viewer: Viewer,
    *,
    path: str | Path | None = None,
    zoom: int | None = None,
    dpi: float | None = None,
    width_mm: float | None = None,
    colorbar: bool | None = None,
    scale_bar: bool | None = None,
    titles: bool | None = None,
) -> ScreenshotFiles | None:
    """Ask for a PNG path and the figure options, then export the figure with provenance.

    Parameters
    ----------
    viewer : napari.Viewer
        The viewer to draw (injected by napari).
    path : str or Path, optional
        Output PNG; skips the file dialog.
    zoom : int, optional
        Pixels per data pixel; when given, the options dialog is skipped and the other options
        take their given values or the defaults of
        :class:`~napari_gpuscope.export.figure.FigureOptions` (300 dpi, scale bar on, colorbar
        off).
    dpi, width_mm, colorbar, scale_bar, titles : optional
        See :class:`~napari_gpuscope.export.figure.FigureOptions`; ``None`` keeps the default.

    Returns
    -------
    ScreenshotFiles or None
        ``None`` when cancelled or when the export failed (an error notification is shown).
    """
    try:
        if path is None:
            path = ask_save_path(
                "Export figure with provenance",
                _save_folder() / "figure.png",
                "PNG image (*.png)",
                ".png",
            )
            if path is None:
                return None
        given = {
            "zoom": zoom,
            "dpi": dpi,
            "width_mm": width_mm,
            "colorbar": colorbar,
            "scale_bar": scale_bar,
            "titles": titles,
        }
        defaults = FigureOptions(**{k: v for k, v in given.items() if v is not None})
        options = defaults if zoom is not None else FigureOptionsDialog.ask(defaults, viewer=viewer)
        if options is None:
            return None
        files = export_screenshot(viewer, path, options)
    except Exception as exc:
        _log.exception("Figure export failed")
        show_error(f"Could not export the figure: {exc}")
        return None
    _remember_folder(files.png)
    message = f"Saved {files.png.name} ({files.size[0]} x {files.size[1]} px, {files.dpi:.0f} dpi)"
    for note in files.notes:
        message += f". {note}"
    show_info(message)
    return files


def save_tiff_dialog(
    viewer: Viewer,
    layer: Layer | None = None,
    *,
    path: str | Path | None = None,
    dtype: str | None = None,
    uint16_scaling: str | None = None,
) -> Path | None:
    """Ask for a TIFF path and sample type, then save an image layer with its provenance.

    Parameters
    ----------
    viewer : napari.Viewer
        The viewer (injected by napari).
    layer : napari.layers.Layer, optional
        Layer to save; defaults to :func:`default_export_layer`.
    path : str or Path, optional
        Output file; skips the file dialog.
    dtype : {"float32", "uint16"}, optional
        When given, the options dialog is skipped.
    uint16_scaling : {"clip", "minmax"}, optional
        Scaling for uint16 output (default:
        :class:`~napari_gpuscope.export.tiff_samples.TiffOptions`' ``"clip"``).

    Returns
    -------
    Path or None
        The written file, or ``None`` when cancelled, when no image layer is available, or
        when saving failed (a notification is shown).
    """
    try:
        if layer is None:
            layer = default_export_layer(viewer)
        if not isinstance(layer, Image):
            show_warning("Select an image layer to save as TIFF.")
            return None
        if path is None:
            path = ask_save_path(
                f"Save {layer.name!r} as TIFF",
                _save_folder() / f"{_safe_file_stem(layer.name)}.tif",
                "TIFF image (*.tif *.tiff)",
                ".tif",
            )
            if path is None:
                return None
        given = {"dtype": dtype, "uint16_scaling": uint16_scaling}
        defaults = TiffOptions(**{k: v for k, v in given.items() if v is not None})
        options = defaults if dtype is not None else TiffOptionsDialog.ask(defaults, viewer=viewer)
        if options is None:
            return None
        written = save_layer_tiff(layer, path, **options.to_dict())
    except Exception as exc:
        _log.exception("TIFF export failed")
        show_error(f"Could not save the TIFF file: {exc}")
        return None
    _remember_folder(written)
    show_info(f"Saved {written.name}")
    return written
