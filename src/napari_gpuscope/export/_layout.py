"""Measuring a figure before drawing it: panels, display ranges, and where everything goes.

:func:`measure_scene` reads what the viewer shows (panels, region, colorbars, plane caption)
without rendering; :func:`fit_layout` places titles, panels, colorbars, scale bar and caption in
figure pixels for a DPI, or finds the DPI that gives a print width. Typographic sizes are in
points, so text prints at the same size whatever the DPI.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.export import _drawing as draw
from napari_gpuscope.export import _panels
from napari_gpuscope.export._options import DEFAULT_DPI, DPI_RANGE, MM_PER_INCH, FigureOptions
from napari_gpuscope.export.units import intensity_unit, quantity

if TYPE_CHECKING:
    import pint
    from napari.layers import Layer
    from napari.utils.colormaps import Colormap
    from napari.viewer import Viewer

    from napari_gpuscope.compute._types import JSONDict

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
class Colorbar:
    """One display range (colormap, contrast limits, gamma, unit) and the layers that use it."""

    layers: tuple[str, ...]
    colormap: Colormap
    contrast_limits: tuple[float, float]
    gamma: float
    unit: str | None
    quantity: str = "Intensity"

    @property
    def label(self) -> str:
        """What the values are and their unit, e.g. "Intensity (ADU)", "Phase (rad)"."""
        return self.quantity + (f" ({self.unit})" if self.unit else "")

    def describe(self) -> JSONDict:
        return {
            "layers": list(self.layers),
            "colormap": str(self.colormap.name),
            "contrast_limits": list(self.contrast_limits),
            "gamma": self.gamma,
            "unit": self.unit,
            "quantity": self.quantity,
            "label": self.label,
        }


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


def _colorbars(viewer: Viewer, panels: list[_panels.Panel]) -> list[Colorbar]:
    """One colorbar per distinct display range, naming every layer drawn with it."""
    from napari.layers import Image as ImageLayer

    found: dict[tuple, Colorbar] = {}
    for panel in panels:
        for layer in panel.layers:
            if not isinstance(layer, ImageLayer) or layer.rgb:
                continue
            low, high = (float(v) for v in layer.contrast_limits)
            gamma, unit = float(layer.gamma), intensity_unit(layer, viewer.layers)
            what = quantity(layer)
            colors = np.asarray(layer.colormap.colors).tobytes()
            key = (layer.colormap.name, colors, low, high, gamma, unit, what)
            if key in found:
                shared = found[key]
                found[key] = dataclasses.replace(shared, layers=(*shared.layers, layer.name))
            else:
                found[key] = Colorbar((layer.name,), layer.colormap, (low, high), gamma, unit, what)
    return list(found.values())


def _plane_caption(viewer: Viewer, layers: list[Layer]) -> str:
    """Where the shown plane lies on the axes not displayed, e.g. "z = 6.4 µm (index 16 of 32)"."""
    parts = []
    for position in _panels.slider_positions(viewer):
        if position.steps <= 1:
            continue
        unit = ""
        for layer in layers:
            offset = viewer.dims.ndim - layer.ndim
            units = getattr(layer, "units", None)
            if position.axis >= offset and units is not None:
                unit = f"{units[position.axis - offset]:~}"
                break
        unit = "" if unit in ("", "px") else f" {unit}"
        parts.append(
            f"{position.label} = {position.world:.4g}{unit} "
            f"(index {position.index} of {position.steps})"
        )
    return ", ".join(parts)


def measure_scene(viewer: Viewer, options: FigureOptions) -> Scene:
    panels = _panels.figure_panels(viewer)
    rows = 1 + max(panel.row for panel in panels)
    columns = 1 + max(panel.column for panel in panels)
    visible = [layer for panel in panels for layer in panel.layers]
    bars = _colorbars(viewer, panels) if options.colorbar else []
    if viewer.dims.ndisplay == 3:
        ratio = _panels.window_pixel_ratio(viewer)
        height, width = (round(n * options.zoom * ratio) for n in viewer.canvas.size)
        return Scene(panels, (1, 1), (height, width), None, None, bars, options.zoom, "")
    region = _panels.world_region(viewer, visible)
    size = (region.shape[0] * options.zoom, region.shape[1] * options.zoom)
    unit = _panels.length_unit(viewer, visible)
    caption = _plane_caption(viewer, visible)
    return Scene(panels, (rows, columns), size, region, unit, bars, options.zoom, caption)


def tick_count(height: int, face: draw.Face) -> int:
    """About five ticks, fewer on a short bar so labels keep a line of space between them."""
    return max(2, min(5, height // (2 * draw.line_height(face)) + 1))


def bar_title(bar: Colorbar, others: Sequence[Colorbar], face: draw.Face, span: int) -> str:
    """The colorbar's label: the quantity and its unit. Only when another colorbar of the
    figure has the same label does it name its layers as well. Very long labels are shortened
    to the longer of the bar and 30 lines of text."""
    same = [other for other in others if other is not bar and other.label == bar.label]
    title = f"{', '.join(bar.layers)}: {bar.label}" if same else bar.label
    return draw.truncate(face, title, max(span, 30 * draw.line_height(face)))


def title_lines(scene: Scene, face: draw.Face) -> list[list[str]]:
    """Each panel's title wrapped to the panel width (at most :data:`TITLE_LINES` lines)."""
    width = scene.panel_size[1]
    return [draw.wrap(face, panel.title, width, TITLE_LINES) for panel in scene.panels]


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


def _layout(scene: Scene, options: FigureOptions, dpi: float) -> Layout:
    point = dpi / 72.0
    font_px = max(10, round(FONT_PT * point))
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
    scale_bar_height = 0
    if scale_bar is not None:
        scale_bar["thickness"] = max(2, round(SCALE_BAR_PT * point))
        scale_bar_height = gap + scale_bar["thickness"] + gap // 2 + line
    caption_height = gap + line if scene.caption else 0

    top = pad + max(0, overflow - title_height)
    bottom = max(scale_bar_height, caption_height, overflow)
    return Layout(
        dpi=dpi,
        width=pad + panels_width + sum(2 * gap + w for w in bar_widths) + pad,
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
