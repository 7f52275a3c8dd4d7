"""Rendering figure panels pixel-exactly with napari.

In 2D the region is rendered with the camera set so that one data pixel of the finest visible
layer covers exactly ``zoom x zoom`` screen pixels, and the canvas edges fall on data-pixel edges:
with nearest-neighbour interpolation the picture is the data, each pixel repeated. Beyond
:data:`~napari_gpuscope.export._options.MAX_ZOOM` napari renders at a zoom dividing the asked
one and each rendered pixel is repeated into a square block (never interpolated), so small data
reach any width with square, sharp pixels. Large panels are rendered in tiles. In 3D there is no
pixel grid to align to; the canvas is captured as shown.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.export._options import split_zoom
from napari_gpuscope.export._panels import Panel, Region, window_pixel_ratio

if TYPE_CHECKING:
    from napari.components.overlays import Overlay
    from napari.layers import Layer
    from napari.viewer import Viewer

__all__ = ["MAX_TILE", "hidden_overlays", "render_canvas_3d", "render_region"]

#: Largest canvas side rendered at once; bigger panels are stitched from tiles.
MAX_TILE = 2048


def _granularity(ratio: float) -> int:
    """Smallest logical size step whose device size is a whole number of pixels."""
    for multiple in range(1, 9):
        if abs(multiple * ratio - round(multiple * ratio)) < 1e-6:
            return multiple
    return 1


@contextlib.contextmanager
def hidden_overlays(viewer: Viewer) -> Iterator[None]:
    """Hide napari's canvas overlays and the layers' colorbars and name labels, then restore.

    The figure draws its own titles, colorbars and scale bar outside the data; napari's would be
    drawn inside every tile.
    """
    saved: list[tuple[Overlay, bool]] = []
    try:
        for overlay in viewer.canvas.overlays.values():
            saved.append((overlay, overlay.visible))
            overlay.visible = False
        for layer in viewer.layers:
            for name in ("colorbar", "name_overlay"):
                overlay = getattr(layer, name, None)
                if overlay is not None:
                    saved.append((overlay, overlay.visible))
                    overlay.visible = False
        yield
    finally:
        for overlay, visible in reversed(saved):
            overlay.visible = visible


@contextlib.contextmanager
def _only_visible(viewer: Viewer, shown: Sequence[Layer]) -> Iterator[None]:
    """Show only ``shown`` with the grid off; restore visibility, grid and camera afterwards."""
    grid = viewer.canvas.grid
    camera = viewer.scene.camera
    was_enabled = grid.enabled
    center, zoom = camera.center, camera.zoom
    visibility = [(layer, layer.visible) for layer in viewer.layers]
    keep = {id(layer) for layer in shown}
    try:
        grid.enabled = False
        for layer, _ in visibility:
            layer.visible = id(layer) in keep
        yield
    finally:
        for layer, visible in visibility:
            layer.visible = visible
        grid.enabled = was_enabled
        camera.center, camera.zoom = center, zoom


def render_region(viewer: Viewer, panel: Panel, region: Region, zoom: int) -> np.ndarray:
    """Render ``panel`` over ``region`` at ``zoom`` figure pixels per data pixel.

    napari renders at the largest zoom up to
    :data:`~napari_gpuscope.export._options.MAX_ZOOM` that divides ``zoom``
    (:func:`~napari_gpuscope.export._options.split_zoom`); each rendered pixel is then repeated
    into a square block (nearest neighbour): data pixels stay square and sharp, never
    interpolated, whatever the zoom.

    Returns
    -------
    numpy.ndarray
        ``(region.shape[0] * zoom, region.shape[1] * zoom, 4)`` uint8 RGBA.

    Raises
    ------
    RuntimeError
        When the display scaling makes napari return a canvas of another size (the pixel grid
        would not be exact).
    """
    rendered, repeat = split_zoom(zoom)
    out = _render_at(viewer, panel, region, rendered)
    if repeat == 1:
        return out
    return np.repeat(np.repeat(out, repeat, axis=0), repeat, axis=1)


def _render_at(viewer: Viewer, panel: Panel, region: Region, zoom: int) -> np.ndarray:
    """What napari renders of ``panel`` over ``region`` at ``zoom`` screen pixels per data
    pixel, in tiles of at most :data:`MAX_TILE` pixels."""
    ratio = window_pixel_ratio(viewer)
    unit = _granularity(ratio)
    pixels_per_world = zoom / region.step
    height, width = region.shape[0] * zoom, region.shape[1] * zoom
    out = np.empty((height, width, 4), dtype=np.uint8)
    # Tiles are whole logical pixels (device size an integer) so the camera mapping stays exact.
    tile = max(unit, int(MAX_TILE // ratio) // unit * unit)
    camera = viewer.scene.camera
    with _only_visible(viewer, panel.layers):
        for top in range(0, height, int(tile * ratio)):
            for left in range(0, width, int(tile * ratio)):
                rows = min(int(tile * ratio), height - top)
                cols = min(int(tile * ratio), width - left)
                # Round the logical tile up to the granularity; the surplus is cropped.
                logical = [math.ceil(n / ratio / unit) * unit for n in (rows, cols)]
                device = [round(n * ratio) for n in logical]
                camera.zoom = pixels_per_world / ratio
                camera.center = (
                    region.corner[0] + (top + device[0] / 2) / pixels_per_world,
                    region.corner[1] + (left + device[1] / 2) / pixels_per_world,
                )
                shot = viewer.screenshot(size=tuple(device), canvas_only=True, flash=False)
                if shot.shape[:2] != tuple(device):
                    raise RuntimeError(
                        f"napari rendered {shot.shape[1]}x{shot.shape[0]} pixels instead of "
                        f"{device[1]}x{device[0]} (display scaling {ratio:g}); the exported "
                        "pixels would not match the data pixels."
                    )
                out[top : top + rows, left : left + cols] = shot[:rows, :cols]
    return out


def render_canvas_3d(viewer: Viewer, zoom: int) -> np.ndarray:
    """The canvas as shown (3D view: perspective has no pixel grid), ``zoom`` times its size."""
    return viewer.screenshot(canvas_only=True, scale=zoom, flash=False)
