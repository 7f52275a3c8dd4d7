"""Figures of the viewer that carry the provenance of the results they show.

:func:`export_screenshot` (the **Export figure with provenance...** command) draws the viewer as
a figure (:mod:`napari_gpuscope.export.figure`: panels at an integer zoom, optional titles,
colorbar with the intensity unit, scale bar) and writes

- ``<name>.png`` -- the figure, with its DPI (``pHYs`` chunk), napari's ``Software`` text chunk
  and a ``napari_gpuscope`` text chunk holding the provenance of the visible result layers as
  JSON;
- ``<name>.json`` -- a sidecar with the image size, zoom, DPI and print size, the panels, the
  pixel size, colorbars and scale bar, the visible layers with their scale and units, the plane
  shown, and the same provenance list.

A *result layer* is one that carries a provenance record
(:func:`napari_gpuscope.provenance.is_result`). The viewer (layers, grid, camera, overlays) is
restored afterwards, also when the export fails.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.compute.signatures import merge_call
from napari_gpuscope.export._panels import slider_positions
from napari_gpuscope.export.figure import FigureOptions, render_figure
from napari_gpuscope.provenance import (
    PROVENANCE_KEY,
    is_result,
    provenance_json,
    provenance_of,
    software_versions,
)

if TYPE_CHECKING:
    from napari.layers import Layer
    from napari.viewer import Viewer

    from napari_gpuscope.compute._types import JSONDict

__all__ = [
    "PNG_PROVENANCE_CHUNK",
    "ScreenshotFiles",
    "export_screenshot",
    "read_png_provenance",
    "visible_result_layers",
]

#: Name of the PNG text chunk holding the provenance list (same as the layer metadata key).
PNG_PROVENANCE_CHUNK = PROVENANCE_KEY


@dataclass(frozen=True)
class ScreenshotFiles:
    """Files written by :func:`export_screenshot`.

    Attributes
    ----------
    png : Path
        The figure.
    sidecar : Path
        The JSON sidecar next to it (same name, ``.json`` suffix).
    size : tuple of int
        (width, height) of the PNG in pixels.
    dpi : float
        Resolution written to the PNG.
    notes : tuple of str
        What was asked for but not drawn (e.g. a scale bar without physical units).
    """

    png: Path
    sidecar: Path
    size: tuple[int, int] = (0, 0)
    dpi: float = 0.0
    notes: tuple[str, ...] = ()


def visible_result_layers(viewer: Viewer) -> list[Layer]:
    """Visible layers carrying a provenance record, bottom to top."""
    return [layer for layer in viewer.layers if layer.visible and is_result(layer)]


def _unit_names(layer: Layer) -> list[str] | None:
    units = getattr(layer, "units", None)
    return None if units is None else [str(u) for u in units]


def _layer_summary(layer: Layer) -> JSONDict:
    return {
        "name": layer.name,
        "type": layer.__class__.__name__,  # not type(): plugins receive proxied layers
        "scale": [float(s) for s in layer.scale],
        "units": _unit_names(layer),
        "axis_labels": [str(a) for a in getattr(layer, "axis_labels", ())],
        "result": is_result(layer),
    }


def _provenance_entries(viewer: Viewer) -> list[JSONDict]:
    """One ``{"layer": name, "provenance": record}`` entry per visible result layer."""
    # Round-trip through our serialiser so the PNG chunk and sidecar hold identical JSON values.
    return json.loads(
        provenance_json(
            [
                {"layer": layer.name, "provenance": provenance_of(layer)}
                for layer in visible_result_layers(viewer)
            ]
        )
    )


def _png_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix == "":
        return path.with_suffix(".png")
    if path.suffix.lower() != ".png":
        raise ValueError(f"Figures are saved as PNG; got a {path.suffix!r} file name.")
    return path


def _write_png(path: Path, image: np.ndarray, provenance_text: str, dpi: float) -> None:
    import napari
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    # Same watermark napari writes for its own screenshots (napari.utils.io.imsave_png).
    info.add_text("Software", f"napari version {napari.__version__} https://napari.org/")
    info.add_text(PNG_PROVENANCE_CHUNK, provenance_text)
    # Pillow writes ``dpi`` as the pHYs chunk (pixels per metre).
    Image.fromarray(np.ascontiguousarray(image)).save(
        path, format="PNG", pnginfo=info, dpi=(dpi, dpi)
    )


def read_png_provenance(path: str | Path) -> list[JSONDict]:
    """Provenance entries stored in a screenshot's ``napari_gpuscope`` text chunk.

    Parameters
    ----------
    path : str or Path
        A PNG written by :func:`export_screenshot`.

    Returns
    -------
    list of dict
        ``[{"layer": name, "provenance": record}, ...]`` (empty when the chunk is missing).
    """
    from PIL import Image

    with Image.open(path) as image:
        text = getattr(image, "text", {}).get(PNG_PROVENANCE_CHUNK)
    return [] if text is None else json.loads(text)


def export_screenshot(
    viewer: Viewer,
    path: str | Path,
    options: FigureOptions | None = None,
    **changes: object,
) -> ScreenshotFiles:
    """Save a figure of the viewer as PNG plus a JSON sidecar, both carrying provenance.

    The figure is drawn by :func:`~napari_gpuscope.export.figure.render_figure`: every panel
    at ``zoom`` pixels per data pixel (no resampling), optional titles, colorbar and scale bar.

    Parameters
    ----------
    viewer : napari.Viewer
        A shown viewer (hidden canvases render black).
    path : str or Path
        PNG file to write; ``.png`` is appended when there is no suffix. The sidecar is the
        same path with a ``.json`` suffix.
    options : FigureOptions, optional
        Zoom, DPI or print width, colorbar, scale bar and titles (default: ``FigureOptions()``).
    **changes
        Fields of :class:`~napari_gpuscope.export.figure.FigureOptions` to set instead of
        ``options``' values: ``zoom`` (screen pixels per data pixel, 1 to
        :data:`~napari_gpuscope.export.figure.MAX_ZOOM`), ``dpi`` (default 300) or
        ``width_mm`` (the DPI follows), ``colorbar`` (one per display range, labelled with the
        intensity unit), ``scale_bar`` (when the layers have a physical pixel size), ``titles``
        (layer names above the panels; default when there are several panels).

    Returns
    -------
    ScreenshotFiles
        Paths of the PNG and the sidecar, the pixel size, DPI and notes.

    Raises
    ------
    ValueError
        Bad options, nothing visible or a non-PNG file name.
    TypeError
        A keyword that is no figure option.

    Examples
    --------
    >>> files = export_screenshot(viewer, "cells.png", zoom=2, colorbar=True)  # doctest: +SKIP
    >>> files.dpi, files.size  # doctest: +SKIP
    (300.0, (1100, 584))
    """
    options = merge_call(FigureOptions, options, changes, "export_screenshot")
    png = _png_path(path)
    sidecar = png.with_suffix(".json")
    figure = render_figure(viewer, options)  # type: ignore[arg-type]

    entries = _provenance_entries(viewer)
    _write_png(png, figure.image, provenance_json(entries), figure.plan.dpi)

    import napari

    height, width = figure.image.shape[:2]
    record = {
        "image": {"file": png.name, "width": int(width), "height": int(height)},
        "figure": figure.info,
        # What was drawn, not what was asked for (no scale bar without units, no colorbar
        # without an intensity image).
        "scale_bar": figure.info["scale_bar"] is not None,
        "colorbar": bool(figure.info["colorbars"]),
        "ndisplay": int(viewer.dims.ndisplay),
        "current_step": [int(s) for s in viewer.dims.current_step],
        "plane": {position.label: position.world for position in slider_positions(viewer)},
        "layers": [_layer_summary(layer) for layer in viewer.layers if layer.visible],
        "provenance": entries,
        "software": {"napari": napari.__version__, **software_versions()},
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    sidecar.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return ScreenshotFiles(
        png=png,
        sidecar=sidecar,
        size=(int(width), int(height)),
        dpi=figure.plan.dpi,
        notes=figure.plan.notes,
    )
