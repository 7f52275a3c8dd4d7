"""Canvas screenshots that carry the provenance of the results they show.

:func:`export_screenshot` renders the viewer canvas (optionally at a higher resolution), with the
scale bar on and optionally colorbars on the visible result layers, and writes

- ``<name>.png`` -- the picture, with napari's ``Software`` text chunk and a
  ``napari_gpuscope`` text chunk holding the provenance of the visible result layers as JSON;
- ``<name>.json`` -- a sidecar with the image size, scale factor, the visible layers with their
  scale and units, and the same provenance list.

A *result layer* is a layer whose ``metadata`` holds a provenance record under
:data:`napari_gpuscope.provenance.PROVENANCE_KEY`. Overlay settings changed for the export are
restored afterwards, also when the export fails.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_gpuscope.provenance import PROVENANCE_KEY, provenance_json, software_versions

if TYPE_CHECKING:
    from napari.layers import Layer
    from napari.viewer import Viewer

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
        The rendered canvas.
    sidecar : Path
        The JSON sidecar next to it (same name, ``.json`` suffix).
    """

    png: Path
    sidecar: Path


def _is_result(layer: Layer) -> bool:
    return isinstance(layer.metadata.get(PROVENANCE_KEY), dict | list)


def visible_result_layers(viewer: Viewer) -> list[Layer]:
    """Visible layers carrying a provenance record, bottom to top."""
    return [layer for layer in viewer.layers if layer.visible and _is_result(layer)]


def _unit_names(layer: Layer) -> list[str] | None:
    units = getattr(layer, "units", None)
    return None if units is None else [str(u) for u in units]


def _layer_summary(layer: Layer) -> dict[str, Any]:
    return {
        "name": layer.name,
        "type": layer.__class__.__name__,  # not type(): plugins receive proxied layers
        "scale": [float(s) for s in layer.scale],
        "units": _unit_names(layer),
        "axis_labels": [str(a) for a in getattr(layer, "axis_labels", ())],
        "result": _is_result(layer),
    }


def _provenance_entries(viewer: Viewer) -> list[dict[str, Any]]:
    """One ``{"layer": name, "provenance": record}`` entry per visible result layer."""
    # Round-trip through our serialiser so the PNG chunk and sidecar hold identical JSON values.
    return json.loads(
        provenance_json(
            [
                {"layer": layer.name, "provenance": layer.metadata[PROVENANCE_KEY]}
                for layer in visible_result_layers(viewer)
            ]
        )
    )


@contextlib.contextmanager
def _temporary_overlays(viewer: Viewer, *, scale_bar: bool, colorbar: bool) -> Iterator[None]:
    """Set the scale bar and result-layer colorbars for the export, then restore them."""
    bar = viewer.canvas.overlays.scale_bar
    previous_bar = bar.visible
    previous_colorbars: list[tuple[Any, bool]] = []
    try:
        bar.visible = scale_bar
        if colorbar:
            for layer in visible_result_layers(viewer):
                layer_colorbar = getattr(layer, "colorbar", None)
                if layer_colorbar is not None:
                    previous_colorbars.append((layer_colorbar, layer_colorbar.visible))
                    layer_colorbar.visible = True
        yield
    finally:
        for layer_colorbar, was_visible in previous_colorbars:
            layer_colorbar.visible = was_visible
        bar.visible = previous_bar


def _png_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix == "":
        return path.with_suffix(".png")
    if path.suffix.lower() != ".png":
        raise ValueError(f"Screenshots are saved as PNG; got a {path.suffix!r} file name.")
    return path


def _write_png(path: Path, image: np.ndarray, provenance_text: str) -> None:
    import napari
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    # Same watermark napari writes for its own screenshots (napari.utils.io.imsave_png).
    info.add_text("Software", f"napari version {napari.__version__} https://napari.org/")
    info.add_text(PNG_PROVENANCE_CHUNK, provenance_text)
    Image.fromarray(np.ascontiguousarray(image)).save(path, format="PNG", pnginfo=info)


def read_png_provenance(path: str | Path) -> list[dict[str, Any]]:
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
    *,
    scale: float = 1.0,
    colorbar: bool = False,
    scale_bar: bool = True,
) -> ScreenshotFiles:
    """Save the viewer canvas as PNG plus a JSON sidecar, both carrying provenance.

    Parameters
    ----------
    viewer : napari.Viewer
        A shown viewer (hidden canvases render black).
    path : str or Path
        PNG file to write; ``.png`` is appended when there is no suffix. The sidecar is the
        same path with a ``.json`` suffix.
    scale : float
        Resolution factor: the PNG has ``scale`` times the canvas size in device pixels.
        Overlays (scale bar, colorbar) keep their screen-pixel size, so they look smaller at
        large factors.
    colorbar : bool
        Show a colorbar on each visible result layer during the export.
    scale_bar : bool
        Show the scale bar (units come from the layers) during the export.

    Returns
    -------
    ScreenshotFiles
        Paths of the PNG and the sidecar.

    Raises
    ------
    ValueError
        Non-positive ``scale`` or a non-PNG file name.
    """
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale}.")
    png = _png_path(path)
    sidecar = png.with_suffix(".json")

    with _temporary_overlays(viewer, scale_bar=scale_bar, colorbar=colorbar):
        image = viewer.screenshot(canvas_only=True, scale=scale, flash=False)

    entries = _provenance_entries(viewer)
    provenance_text = provenance_json(entries)
    _write_png(png, image, provenance_text)

    import napari

    height, width = image.shape[:2]
    record = {
        "image": {"file": png.name, "width": int(width), "height": int(height)},
        "scale_factor": scale,
        "scale_bar": bool(scale_bar),
        "colorbar": bool(colorbar),
        "ndisplay": int(viewer.dims.ndisplay),
        "current_step": [int(s) for s in viewer.dims.current_step],
        "layers": [_layer_summary(layer) for layer in viewer.layers if layer.visible],
        "provenance": entries,
        "software": {"napari": napari.__version__, **software_versions()},
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    sidecar.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return ScreenshotFiles(png=png, sidecar=sidecar)
