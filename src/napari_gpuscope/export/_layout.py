"""Measuring a figure before drawing it: panels, display ranges, and where everything goes.

:func:`measure_scene` reads what the viewer shows (panels, region, colorbars, plane caption)
without rendering; :func:`fit_layout` places titles, panels, colorbars, scale bar and caption in
figure pixels for a DPI, or finds the DPI that gives a print width. Typographic sizes are in
points, so text prints at the same size whatever the DPI.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from napari_gpuscope.export import _drawing as draw
from napari_gpuscope.export import _panels
from napari_gpuscope.export._caption import figure_caption
from napari_gpuscope.export._colorbars import Colorbar, bar_title, colorbars, seen_layers
from napari_gpuscope.export._options import (
    DEFAULT_DPI,
    DPI_RANGE,
    MAX_PIXELS,
    MAX_ZOOM,
    MM_PER_INCH,
    PUBLICATION_WIDTH_PX,
    FigureOptions,
    figure_zoom,
)

if TYPE_CHECKING:
    import pint
    from napari.viewer import Viewer


__all__ = [
    "Colorbar",
    "Layout",
    "Scene",
    "bar_title",
    "fit_layout",
    "measure_scene",
    "tick_count",
    "title_lines",
]

FONT_PT = 9.0
"""Every text of the figure (titles, ticks, labels, caption), in points at the figure's DPI."""
PAD_PT = 4.0
GAP_PT = 3.0
BAR_WIDTH_PT = 8.0
TICK_PT = 2.5
SCALE_BAR_PT = 2.0
SCALE_BAR_FRACTION = 0.2  # of the panel width
TITLE_LINES = 3
"""Panel titles wrap onto at most this many lines before they are shortened."""


@dataclass(frozen=True)
class Scene:
    """What the viewer shows, measured without rendering (panel size in figure pixels)."""

    panels: list[_panels.Panel]
    grid: tuple[int, int]
    panel_size: tuple[int, int]  # (height, width) in figure pixels
    region: _panels.Region | None  # None in 3D
    length_unit: pint.Unit | None
    colorbars: list[Colorbar]
    zoom: int
    caption: str
    titles: list[str]  # per panel: the layers a reader sees in it (:func:`seen_layers`)


def _auto_zoom(options: FigureOptions, panels_width: float, pixels: float) -> int:
    """The smallest zoom making the panels publication-size (:data:`PUBLICATION_WIDTH_PX` at
    300 dpi, the same print width at another DPI or print width), whatever the data size (beyond
    :data:`MAX_ZOOM` a zoom that
    :func:`~napari_gpuscope.export._options.split_zoom` renders exactly), within half of
    :data:`MAX_PIXELS` (room for the marks beside the panels)."""
    if options.width_mm is not None:
        target = options.width_mm / MM_PER_INCH * DEFAULT_DPI
    else:
        dpi = DEFAULT_DPI if options.dpi is None else float(options.dpi)
        target = PUBLICATION_WIDTH_PX * dpi / DEFAULT_DPI
    needed = max(1, math.ceil(target / max(panels_width, 1.0)))
    zoom = figure_zoom(needed)
    while zoom > 1 and pixels * zoom**2 > MAX_PIXELS / 2:
        needed -= 1
        zoom = figure_zoom(needed)
    return zoom


def measure_scene(viewer: Viewer, options: FigureOptions) -> Scene:
    """What the viewer shows, at the option's zoom or the automatic one (:func:`_auto_zoom`);
    the viewer's own zoom plays no part in 2D."""
    panels = _panels.figure_panels(viewer)
    rows = 1 + max(panel.row for panel in panels)
    columns = 1 + max(panel.column for panel in panels)
    visible = [layer for panel in panels for layer in panel.layers]
    seen_by_panel = [seen_layers(viewer, panel) for panel in panels]
    seen = [layer for layers in seen_by_panel for layer in layers]
    # Like the colorbars, titles name no layer hidden under an opaque one.
    titles = [_panels.panel_title(layers) for layers in seen_by_panel]
    bars = colorbars(viewer, panels) if options.colorbar else []
    if viewer.dims.ndisplay == 3:
        ratio = _panels.window_pixel_ratio(viewer)
        size = [n * ratio for n in viewer.canvas.size]
        # napari scales the 3D canvas itself: no pixel grid to repeat, so no zoom beyond its own.
        zoom = options.zoom or min(MAX_ZOOM, _auto_zoom(options, size[1], size[0] * size[1]))
        height, width = (round(n * zoom) for n in size)
        return Scene(panels, (1, 1), (height, width), None, None, bars, zoom, "", titles)
    region = _panels.world_region(viewer, visible)
    zoom = options.zoom or _auto_zoom(
        options, columns * region.shape[1], len(panels) * region.shape[0] * region.shape[1]
    )
    size = (region.shape[0] * zoom, region.shape[1] * zoom)
    unit = _panels.length_unit(viewer, visible)
    caption = figure_caption(viewer, seen)
    return Scene(panels, (rows, columns), size, region, unit, bars, zoom, caption, titles)


def tick_count(height: int, face: draw.Face) -> int:
    """About five ticks, fewer on a short bar so labels keep a line of space between them."""
    return max(2, min(5, height // (2 * draw.line_height(face)) + 1))


def title_lines(scene: Scene, face: draw.Face) -> list[list[str]]:
    """Each panel's title wrapped to the panel width (at most :data:`TITLE_LINES` lines)."""
    width = scene.panel_size[1]
    return [draw.wrap(face, title, width, TITLE_LINES) for title in scene.titles]


@dataclass(frozen=True)
class Layout:
    """Positions of everything, in figure pixels, for one DPI."""

    dpi: float
    width: int
    height: int
    font_px: int
    pad: int
    gap: int
    title_height: int
    panel_origin: tuple[int, int]  # (x, y) of the first panel's image
    colorbar_x: int
    colorbar_widths: list[int]
    scale_bar: dict[str, object] | None
    notes: list[str] = field(default_factory=list)
    caption_lines: list[str] = field(default_factory=list)
    caption_offset: int = 0  # from the last panel row's bottom edge to the caption's first line

    def panel_xy(self, scene: Scene, row: int, column: int) -> tuple[int, int]:
        height, width = scene.panel_size
        x = self.panel_origin[0] + column * (width + self.gap)
        y = self.panel_origin[1] + row * (self.title_height + height + self.gap)
        return x, y


def _scale_bar(scene: Scene, options: FigureOptions) -> tuple[dict[str, object] | None, list[str]]:
    if not options.scale_bar:
        return None, []
    if scene.region is None:
        return None, ["No scale bar: a 3D view has no single pixel size."]
    if scene.length_unit is None:
        return None, ["No scale bar: the layers have no common physical pixel size (units)."]
    pixels_per_unit = scene.zoom / scene.region.step
    length = draw.nice_length(SCALE_BAR_FRACTION * scene.panel_size[1] / pixels_per_unit)
    unit = f"{scene.length_unit:~}"
    return {
        "length": length,
        "unit": unit,
        "pixels": round(length * pixels_per_unit),
        "label": f"{length:g} {unit}",
    }, []


def _colorbar_width(bar: Colorbar, face: draw.Face, span: int, point: float, gap: int) -> int:
    """Gradient, ticks, tick labels and the rotated label of one colorbar, side by side."""
    ticks = draw.nice_ticks(*bar.contrast_limits, tick_count(span, face))
    ticks_width = max(draw.text_width(face, label) for label in draw.format_ticks(ticks))
    return (
        max(6, round(BAR_WIDTH_PT * point))
        + max(2, round(TICK_PT * point))
        + gap // 2
        + ticks_width
        + gap
        + draw.line_height(face)
    )


def _caption(
    text: str, face: draw.Face, widths: tuple[int, int], gap: int, below: int
) -> tuple[list[str], int, int]:
    """The caption's lines, their offset below the panels and the width they need: left of the
    scale bar when that leaves a third of the panels' width, else below it across the panels
    (or the widest word, on a thumbnail); wrapped onto as many lines as it needs, never cut."""
    if not text:
        return [], 0, 0
    panels_width, scale_bar_width = widths
    room = panels_width - (scale_bar_width + 2 * gap if scale_bar_width else 0)
    if room >= panels_width / 3 and room >= max(draw.text_width(face, w) for w in text.split()):
        return draw.wrap(face, text, room, max_lines=len(text)), gap, room
    width = max(panels_width, *(draw.text_width(face, word) for word in text.split()))
    return draw.wrap(face, text, width, max_lines=len(text)), below, width


def _layout(scene: Scene, options: FigureOptions, dpi: float) -> Layout:
    point = dpi / 72.0
    # Up, not to the nearest pixel: text is never below FONT_PT at the printed size.
    font_px = max(10, math.ceil(FONT_PT * point - 1e-9))
    face = draw.font(font_px)
    line = draw.line_height(face)
    pad = max(4, round(PAD_PT * point))
    gap = max(4, round(GAP_PT * point))
    titles = len(scene.panels) > 1 if options.titles is None else options.titles
    lines = max(len(wrapped) for wrapped in title_lines(scene, face)) if titles else 0
    title_height = lines * line + gap // 2 if titles else 0
    rows, columns = scene.grid
    height, width = scene.panel_size
    panels_width = columns * width + (columns - 1) * gap
    panels_height = rows * (title_height + height) + (rows - 1) * gap
    span = panels_height - title_height  # what a colorbar spans: first to last panel image

    bar_widths = [_colorbar_width(bar, face, span, point, gap) for bar in scene.colorbars]
    # End tick labels reach half a line beyond the bar; a label longer than the bar, beyond
    # both ends.
    overflow = line // 2 if scene.colorbars else 0
    for bar in scene.colorbars:
        title = bar_title(bar, scene.colorbars, face, span)
        overflow = max(overflow, (draw.text_width(face, title) - span + 1) // 2)

    scale_bar, notes = _scale_bar(scene, options)
    scale_bar_height = scale_bar_width = 0
    if scale_bar is not None:
        scale_bar["thickness"] = max(2, round(SCALE_BAR_PT * point))
        scale_bar_height = gap + scale_bar["thickness"] + gap // 2 + line
        # The label is centred under the bar, or moved left to stay inside the panels.
        scale_bar_width = max(scale_bar["pixels"], draw.text_width(face, scale_bar["label"]))
    caption_lines, caption_offset, caption_width = _caption(
        scene.caption, face, (panels_width, scale_bar_width), gap, scale_bar_height + gap // 2
    )
    caption_height = caption_offset + len(caption_lines) * line if caption_lines else 0

    top = pad + max(0, overflow - title_height)
    bottom = max(scale_bar_height, caption_height, overflow)
    width = (
        pad
        + max(panels_width, scale_bar_width, caption_width)
        + sum(2 * gap + w for w in bar_widths)
        + pad
    )
    return Layout(
        dpi=dpi,
        width=width,
        height=top + panels_height + bottom + pad,
        font_px=font_px,
        pad=pad,
        gap=gap,
        title_height=title_height,
        panel_origin=(pad, top + title_height),
        colorbar_x=pad + panels_width,
        colorbar_widths=bar_widths,
        scale_bar=scale_bar,
        notes=notes,
        caption_lines=caption_lines,
        caption_offset=caption_offset,
    )


def fit_layout(scene: Scene, options: FigureOptions) -> Layout:
    if options.width_mm is None:
        return _layout(scene, options, DEFAULT_DPI if options.dpi is None else float(options.dpi))
    inches = options.width_mm / MM_PER_INCH
    dpi = DEFAULT_DPI
    # Text is sized for the DPI, which depends on the width in pixels: iterate to a fixed point.
    for _ in range(6):
        layout = _layout(scene, options, dpi)
        new_dpi = min(max(layout.width / inches, DPI_RANGE[0]), DPI_RANGE[1])
        if abs(new_dpi - dpi) < 1e-3:
            break
        dpi = new_dpi
    layout = _layout(scene, options, dpi)
    exact = layout.width / inches  # the written DPI makes the print width exact
    if not DPI_RANGE[0] <= exact <= DPI_RANGE[1]:
        raise ValueError(
            f"A print width of {options.width_mm:g} mm needs {exact:.0f} dpi for this figure "
            f"({layout.width} pixels wide); choose a width giving {DPI_RANGE[0]:g} to "
            f"{DPI_RANGE[1]:g} dpi or change the zoom."
        )
    return dataclasses.replace(layout, dpi=exact)
