"""Figures of the viewer: panels at an integer zoom, titles, a colorbar with units, a scale bar.

:func:`render_figure` turns what the viewer shows into one picture a microscopist can print:

- each panel (grid viewbox, or the whole canvas) shows the same world region, one data pixel of
  the finest layer as exactly ``zoom x zoom`` pixels (nearest neighbour: square, sharp pixels,
  never interpolated); the zoom is by default the smallest that makes the figure
  publication-size (:data:`~napari_gpuscope.export._options.PUBLICATION_WIDTH_PX` at 300 dpi),
  whatever the viewer's own zoom and however small the data (:mod:`._render`);
- optional panel titles: the names of the layers a reader sees in the panel (not those hidden
  under an opaque layer);
- an optional colorbar per distinct display range (colormap, contrast limits, gamma) of the
  layers a reader can see (not those hidden under an opaque layer: :mod:`._colorbars`),
  labelled with the quantity and unit (:func:`~napari_gpuscope.export.units.intensity_unit`);
- an optional scale bar below the panels, when the layers have a physical pixel size, its
  label never cut;
- a caption saying what the results are (method, frames used, key parameters, automatic
  choices) and where the shown plane lies (:mod:`._caption`), wrapped, never cut;
- text sized in points for the figure's DPI, so it prints at a readable size.

The DPI is either given or follows from a print width (``width_mm``): the pixel size is fixed by
the data and the zoom, so choosing one fixes the other. :func:`plan_figure` gives the pixel and
physical size without rendering (for dialogs). The figure's colours, colorbars and scale bar are
drawn by :mod:`._figure_marks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from napari_gpuscope.export import _drawing as draw
from napari_gpuscope.export import _figure_marks as marks
from napari_gpuscope.export import _render
from napari_gpuscope.export._layout import (
    Layout,
    Scene,
    fit_layout,
    measure_scene,
    title_lines,
)
from napari_gpuscope.export._options import (
    DEFAULT_DPI,
    DPI_RANGE,
    MAX_PIXELS,
    MAX_ZOOM,
    MM_PER_INCH,
    FigureOptions,
    split_zoom,
)

if TYPE_CHECKING:
    from napari.viewer import Viewer

    from napari_gpuscope.compute._types import JSONDict

__all__ = [
    "DEFAULT_DPI",
    "DPI_RANGE",
    "MAX_PIXELS",
    "MAX_ZOOM",
    "Figure",
    "FigureOptions",
    "FigurePlan",
    "plan_figure",
    "render_figure",
]


@dataclass(frozen=True)
class FigurePlan:
    """Size of the figure before it is drawn.

    Attributes
    ----------
    width, height : int
        Pixels of the PNG.
    dpi : float
        Dots per inch written to the PNG.
    zoom : int
        Screen pixels per data pixel.
    panels : int
        Number of panels.
    panel_size : tuple of int
        (height, width) of each panel in pixels.
    data_shape : tuple of int or None
        (rows, columns) of data pixels each panel shows; ``None`` in a 3D view.
    notes : list of str
        What was asked for but cannot be drawn (e.g. no scale bar without physical units).
    """

    width: int
    height: int
    dpi: float
    zoom: int
    panels: int
    panel_size: tuple[int, int]
    data_shape: tuple[int, int] | None
    notes: tuple[str, ...]

    @property
    def width_mm(self) -> float:
        """Printed width."""
        return self.width / self.dpi * MM_PER_INCH

    @property
    def height_mm(self) -> float:
        """Printed height."""
        return self.height / self.dpi * MM_PER_INCH


def _plan(scene: Scene, layout: Layout) -> FigurePlan:
    return FigurePlan(
        width=layout.width,
        height=layout.height,
        dpi=layout.dpi,
        zoom=scene.zoom,
        panels=len(scene.panels),
        panel_size=scene.panel_size,
        data_shape=None if scene.region is None else scene.region.shape,
        notes=tuple(layout.notes),
    )


def _measure_and_fit(viewer: Viewer, options: FigureOptions | None) -> tuple[Scene, Layout]:
    """What the viewer shows and where it goes in the figure; refuses oversized figures."""
    options = options or FigureOptions()
    scene = measure_scene(viewer, options)
    layout = fit_layout(scene, options)
    if layout.width * layout.height > MAX_PIXELS:
        raise ValueError(
            f"The figure would be {layout.width} x {layout.height} pixels, more than "
            f"{MAX_PIXELS / 1e6:.0f} megapixels; choose a smaller zoom."
        )
    return scene, layout


def plan_figure(viewer: Viewer, options: FigureOptions | None = None) -> FigurePlan:
    """Pixel and physical size of the figure :func:`render_figure` would draw.

    Parameters
    ----------
    viewer : napari.Viewer
        The viewer.
    options : FigureOptions, optional
        Zoom, DPI or print width, colorbar, scale bar, titles.

    Returns
    -------
    FigurePlan

    Raises
    ------
    ValueError
        No visible layer, a print width beyond the DPI range, or a figure beyond
        :data:`MAX_PIXELS` (bad options are refused when the :class:`FigureOptions` is made).

    Examples
    --------
    >>> plan = plan_figure(viewer, FigureOptions(zoom=2, width_mm=85))  # doctest: +SKIP
    >>> plan.width, plan.height, round(plan.dpi)  # doctest: +SKIP
    (1100, 584, 329)
    """
    return _plan(*_measure_and_fit(viewer, options))


@dataclass(frozen=True)
class Figure:
    """A rendered figure.

    Attributes
    ----------
    image : numpy.ndarray
        ``(height, width, 3)`` uint8 RGB.
    plan : FigurePlan
        Its size, DPI and zoom.
    info : dict
        JSON-able description (panels, region, pixel size, colorbars, scale bar) for sidecars.
    """

    image: np.ndarray
    plan: FigurePlan
    info: JSONDict


def _describe(scene: Scene, layout: Layout, boxes: dict[str, object]) -> JSONDict:
    region = scene.region
    height, width = scene.panel_size
    titles = title_lines(scene, draw.font(layout.font_px))
    panels = []
    for panel, title in zip(scene.panels, titles, strict=True):
        x, y = layout.panel_xy(scene, panel.row, panel.column)
        panels.append(
            {
                "row": panel.row,
                "column": panel.column,
                "layers": [layer.name for layer in panel.layers],
                "title": title if layout.title_height else [],
                "box": {"x": x, "y": y, "width": width, "height": height},
            }
        )
    info: JSONDict = {
        "zoom": scene.zoom,
        "dpi": layout.dpi,
        "text_pt": layout.font_px / layout.dpi * 72.0,
        "size_mm": [
            layout.width / layout.dpi * MM_PER_INCH,
            layout.height / layout.dpi * MM_PER_INCH,
        ],
        "panels": panels,
        "panel_size": list(scene.panel_size),
        "colorbars": [
            {**bar.describe(), "box": box}
            for bar, box in zip(scene.colorbars, boxes["colorbars"], strict=True)
        ],
        "scale_bar": None
        if layout.scale_bar is None
        else {**layout.scale_bar, "box": boxes["scale_bar"]},
        "notes": list(layout.notes),
        "caption": scene.caption,
        "caption_lines": list(layout.caption_lines),
        "caption_offset": layout.caption_offset,
    }
    if region is not None:
        info["region"] = {
            "corner": list(region.corner),
            "data_shape": list(region.shape),
            "pixel_size": region.step,
            "pixel_unit": None if scene.length_unit is None else f"{scene.length_unit:~}",
            "screen_pixels_per_data_pixel": scene.zoom,
            # napari renders at the first, each rendered pixel repeated the second's times.
            "rendered_zoom_and_repeat": list(split_zoom(scene.zoom)),
        }
    return info


def _paste_panels(
    viewer: Viewer, canvas: Image.Image, scene: Scene, layout: Layout, ink: tuple[int, int, int]
) -> None:
    face = draw.font(layout.font_px)
    line = draw.line_height(face)
    height, width = scene.panel_size
    titles = title_lines(scene, face)
    with _render.hidden_overlays(viewer):
        for panel, title in zip(scene.panels, titles, strict=True):
            if scene.region is None:
                pixels = _render.render_canvas_3d(viewer, scene.zoom)
            else:
                pixels = _render.render_region(viewer, panel, scene.region, scene.zoom)
            x, y = layout.panel_xy(scene, panel.row, panel.column)
            tile = Image.fromarray(np.ascontiguousarray(pixels[..., :3]), "RGB")
            canvas.paste(tile.crop((0, 0, width, height)), (x, y))
            if layout.title_height:
                # Bottom-aligned: a one-line title sits just above its panel.
                top = y - layout.title_height + (layout.title_height // line - len(title)) * line
                for index, text in enumerate(title):
                    draw.draw_text(canvas, (x, top + index * line), text, face, ink)


def render_figure(viewer: Viewer, options: FigureOptions | None = None) -> Figure:
    """Draw the figure of what the viewer shows.

    Parameters
    ----------
    viewer : napari.Viewer
        A *shown* viewer (hidden canvases render black). Its layers, grid, camera and overlays
        are restored afterwards, also when rendering fails.
    options : FigureOptions, optional
        Zoom, DPI or print width, colorbar, scale bar, titles.

    Returns
    -------
    Figure

    Raises
    ------
    ValueError
        No visible layer, a print width beyond the DPI range, or a figure beyond
        :data:`MAX_PIXELS` (bad options are refused when the :class:`FigureOptions` is made).

    Examples
    --------
    >>> figure = render_figure(viewer, FigureOptions(zoom=2, colorbar=True))  # doctest: +SKIP
    >>> figure.image.shape, figure.info["colorbars"][0]["label"]  # doctest: +SKIP
    ((584, 1100, 3), 'Intensity (ADU)')
    """
    scene, layout = _measure_and_fit(viewer, options)
    background = marks.canvas_colour(viewer)
    ink = marks.ink_on(background)
    canvas = Image.new("RGB", (layout.width, layout.height), background)
    _paste_panels(viewer, canvas, scene, layout, ink)

    height, width = scene.panel_size
    rows, columns = scene.grid
    first_top = layout.panel_origin[1]
    last_bottom = layout.panel_xy(scene, rows - 1, 0)[1] + height
    boxes: dict[str, object] = {"colorbars": [], "scale_bar": None}
    x = layout.colorbar_x
    for bar, bar_width in zip(scene.colorbars, layout.colorbar_widths, strict=True):
        x += 2 * layout.gap
        box = marks.draw_colorbar(
            canvas,
            bar,
            (x, first_top),
            last_bottom - first_top,
            layout,
            (background, ink),
            scene.colorbars,
        )
        boxes["colorbars"].append(box)
        x += bar_width

    face = draw.font(layout.font_px)
    right = layout.panel_xy(scene, rows - 1, columns - 1)[0] + width
    if layout.scale_bar is not None:
        top = last_bottom + layout.gap
        boxes["scale_bar"] = marks.draw_scale_bar(canvas, layout.scale_bar, right, top, layout, ink)
    line = draw.line_height(face)
    for index, text in enumerate(layout.caption_lines):
        xy = (layout.panel_origin[0], last_bottom + layout.caption_offset + index * line)
        draw.draw_text(canvas, xy, text, face, ink)

    info = _describe(scene, layout, boxes)
    return Figure(image=np.asarray(canvas), plan=_plan(scene, layout), info=info)
