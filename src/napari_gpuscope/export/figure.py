"""Figures of the viewer: panels at an integer zoom, titles, a colorbar with units, a scale bar.

:func:`render_figure` turns what the viewer shows into one picture a microscopist can print:

- each panel (grid viewbox, or the whole canvas) shows the same world region, one data pixel of
  the finest layer as exactly ``zoom x zoom`` pixels (nearest neighbour, no resampling);
- optional panel titles (the layer names) above the panels;
- an optional colorbar per distinct display range (colormap, contrast limits, gamma), labelled
  with the intensity unit (:func:`~napari_gpuscope.export.units.intensity_unit`);
- an optional scale bar below the panels, when the layers have a physical pixel size;
- text sized in points for the figure's DPI, so it prints at a readable size.

The DPI is either given or follows from a print width (``width_mm``): the pixel size is fixed by
the data and the zoom, so choosing one fixes the other. :func:`plan_figure` gives the pixel and
physical size without rendering (for dialogs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from napari_gpuscope.export import _drawing as draw
from napari_gpuscope.export import _panels
from napari_gpuscope.export.units import intensity_unit

if TYPE_CHECKING:
    from napari.layers import Layer
    from napari.viewer import Viewer

__all__ = [
    "DEFAULT_DPI",
    "MAX_PIXELS",
    "MAX_ZOOM",
    "Figure",
    "FigureOptions",
    "FigurePlan",
    "plan_figure",
    "render_figure",
]

DEFAULT_DPI = 300.0
MAX_ZOOM = 16
MAX_PIXELS = 150_000_000
DPI_RANGE = (10.0, 10_000.0)
MM_PER_INCH = 25.4

_FONT_PT = 8.0
_PAD_PT = 4.0
_GAP_PT = 3.0
_BAR_WIDTH_PT = 8.0
_TICK_PT = 2.5
_SCALE_BAR_PT = 2.0
_SCALE_BAR_FRACTION = 0.2  # of the panel width


@dataclass(frozen=True)
class FigureOptions:
    """How to draw the figure.

    Attributes
    ----------
    zoom : int
        Screen pixels per data pixel of the finest layer, along each axis (1 = native size).
    dpi : float, optional
        Dots per inch written to the PNG; default 300 unless ``width_mm`` is given.
    width_mm : float, optional
        Print width; the DPI follows (``width in pixels / width in inches``).
    colorbar : bool
        Draw a colorbar per distinct display range of the visible image layers.
    scale_bar : bool
        Draw a scale bar (only when the layers have a physical pixel size).
    titles : bool, optional
        Layer names above the panels; default: when there is more than one panel.
    """

    zoom: int = 1
    dpi: float | None = None
    width_mm: float | None = None
    colorbar: bool = False
    scale_bar: bool = True
    titles: bool | None = None

    def validated(self) -> FigureOptions:
        """These options, checked; raises ValueError naming the bad one and the valid range."""
        if isinstance(self.zoom, bool) or int(self.zoom) != self.zoom:
            raise ValueError(f"zoom must be a whole number from 1 to {MAX_ZOOM}, got {self.zoom}.")
        if not 1 <= self.zoom <= MAX_ZOOM:
            raise ValueError(f"zoom must be from 1 to {MAX_ZOOM}, got {self.zoom}.")
        if self.dpi is not None and self.width_mm is not None:
            raise ValueError("Give either dpi or width_mm, not both: one follows from the other.")
        if self.dpi is not None and not (
            math.isfinite(self.dpi) and DPI_RANGE[0] <= self.dpi <= DPI_RANGE[1]
        ):
            raise ValueError(
                f"dpi must be from {DPI_RANGE[0]:g} to {DPI_RANGE[1]:g}, got {self.dpi}."
            )
        if self.width_mm is not None and not (math.isfinite(self.width_mm) and self.width_mm > 0):
            raise ValueError(f"width_mm must be a positive length, got {self.width_mm}.")
        return self


@dataclass(frozen=True)
class _Colorbar:
    layers: tuple[str, ...]
    colormap: Any
    contrast_limits: tuple[float, float]
    gamma: float
    unit: str | None

    @property
    def label(self) -> str:
        return "Intensity" + (f" ({self.unit})" if self.unit else "")

    def describe(self) -> dict[str, Any]:
        return {
            "layers": list(self.layers),
            "colormap": str(self.colormap.name),
            "contrast_limits": list(self.contrast_limits),
            "gamma": self.gamma,
            "unit": self.unit,
            "label": self.label,
        }


@dataclass(frozen=True)
class _Scene:
    """What the viewer shows, measured without rendering."""

    panels: list[_panels.Panel]
    grid: tuple[int, int]
    panel_size: tuple[int, int]  # (height, width) in figure pixels
    region: _panels.Region | None  # None in 3D
    length_unit: Any | None
    colorbars: list[_Colorbar]
    zoom: int
    caption: str


def _colorbars(viewer: Viewer, panels: list[_panels.Panel]) -> list[_Colorbar]:
    from napari.layers import Image as ImageLayer

    found: dict[tuple, list[Layer]] = {}
    for panel in panels:
        for layer in panel.layers:
            if not isinstance(layer, ImageLayer) or layer.rgb:
                continue
            low, high = (float(v) for v in layer.contrast_limits)
            unit = intensity_unit(layer, viewer.layers)
            key = (
                layer.colormap.name,
                np.asarray(layer.colormap.colors).tobytes(),
                low,
                high,
                float(layer.gamma),
                unit,
            )
            found.setdefault(key, []).append(layer)
    bars = []
    for layers in found.values():
        first = layers[0]
        low, high = (float(v) for v in first.contrast_limits)
        bars.append(
            _Colorbar(
                layers=tuple(layer.name for layer in layers),
                colormap=first.colormap,
                contrast_limits=(low, high),
                gamma=float(first.gamma),
                unit=intensity_unit(first, viewer.layers),
            )
        )
    return bars


def _plane_caption(viewer: Viewer, layers: list[Layer]) -> str:
    """Where the shown plane lies on the axes not displayed, e.g. "z = 6.4 µm (index 16 of 32)"."""
    dims = viewer.dims
    parts = []
    for axis in range(dims.ndim):
        if axis in dims.displayed or dims.nsteps[axis] <= 1:
            continue
        unit = ""
        for layer in layers:
            offset = dims.ndim - layer.ndim
            units = getattr(layer, "units", None)
            if axis >= offset and units is not None:
                unit = f"{units[axis - offset]:~}"
                break
        unit = "" if unit in ("", "px") else f" {unit}"
        parts.append(
            f"{dims.axis_labels[axis]} = {dims.point[axis]:.4g}{unit} "
            f"(index {dims.current_step[axis]} of {dims.nsteps[axis]})"
        )
    return ", ".join(parts)


def _scene(viewer: Viewer, options: FigureOptions) -> _Scene:
    panels = _panels.figure_panels(viewer)
    rows = 1 + max(panel.row for panel in panels)
    columns = 1 + max(panel.column for panel in panels)
    visible = [layer for panel in panels for layer in panel.layers]
    bars = _colorbars(viewer, panels) if options.colorbar else []
    if viewer.dims.ndisplay == 3:
        ratio = _panels._window_pixel_ratio(viewer)
        height, width = (round(n * options.zoom * ratio) for n in viewer.canvas.size)
        return _Scene(panels, (1, 1), (height, width), None, None, bars, options.zoom, "")
    region = _panels.world_region(viewer, visible)
    size = (region.shape[0] * options.zoom, region.shape[1] * options.zoom)
    unit = _panels.length_unit(viewer, visible)
    caption = _plane_caption(viewer, visible)
    return _Scene(panels, (rows, columns), size, region, unit, bars, options.zoom, caption)


def _tick_count(height: int, face: Any) -> int:
    """About five ticks, fewer on a short bar so labels keep a line of space between them."""
    return max(2, min(5, height // (2 * draw.line_height(face)) + 1))


def _bar_title(bar: _Colorbar, several: bool, face: Any, span: int) -> str:
    """The colorbar's label; with several colorbars it names its layers. Very long labels are
    shortened to the longer of the bar and 30 lines of text."""
    title = f"{', '.join(bar.layers)}: {bar.label}" if several else bar.label
    return draw.truncate(face, title, max(span, 30 * draw.line_height(face)))


@dataclass(frozen=True)
class _Layout:
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
    scale_bar: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    def panel_xy(self, scene: _Scene, row: int, column: int) -> tuple[int, int]:
        height, width = scene.panel_size
        x = self.panel_origin[0] + column * (width + self.gap)
        y = self.panel_origin[1] + row * (self.title_height + height + self.gap)
        return x, y


def _scale_bar(scene: _Scene, options: FigureOptions) -> tuple[dict[str, Any] | None, list[str]]:
    if not options.scale_bar:
        return None, []
    if scene.region is None:
        return None, ["No scale bar: a 3D view has no single pixel size."]
    if scene.length_unit is None:
        return None, ["No scale bar: the layers have no common physical pixel size (units)."]
    pixels_per_unit = scene.zoom / scene.region.step
    length = draw.nice_length(_SCALE_BAR_FRACTION * scene.panel_size[1] / pixels_per_unit)
    unit = f"{scene.length_unit:~}"
    return {
        "length": length,
        "unit": unit,
        "pixels": round(length * pixels_per_unit),
        "label": f"{length:g} {unit}",
    }, []


def _colorbar_width(bar: _Colorbar, face: Any, span: int, point: float, gap: int) -> int:
    """Gradient, ticks, tick labels and the rotated label of one colorbar, side by side."""
    ticks = draw.nice_ticks(*bar.contrast_limits, _tick_count(span, face))
    ticks_width = max(draw.text_width(face, label) for label in draw.format_ticks(ticks))
    return (
        max(6, round(_BAR_WIDTH_PT * point))
        + max(2, round(_TICK_PT * point))
        + gap // 2
        + ticks_width
        + gap
        + draw.line_height(face)
    )


def _layout(scene: _Scene, options: FigureOptions, dpi: float) -> _Layout:
    point = dpi / 72.0
    font_px = max(10, round(_FONT_PT * point))
    face = draw.font(font_px)
    line = draw.line_height(face)
    pad = max(4, round(_PAD_PT * point))
    gap = max(4, round(_GAP_PT * point))
    titles = len(scene.panels) > 1 if options.titles is None else options.titles
    title_height = line + gap // 2 if titles else 0
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
        title = _bar_title(bar, len(scene.colorbars) > 1, face, span)
        overflow = max(overflow, (draw.text_width(face, title) - span + 1) // 2)

    scale_bar, notes = _scale_bar(scene, options)
    scale_bar_height = 0
    if scale_bar is not None:
        scale_bar["thickness"] = max(2, round(_SCALE_BAR_PT * point))
        scale_bar_height = gap + scale_bar["thickness"] + gap // 2 + line
    caption_height = gap + line if scene.caption else 0

    top = pad + max(0, overflow - title_height)
    bottom = max(scale_bar_height, caption_height, overflow)
    return _Layout(
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


def _fitted_layout(scene: _Scene, options: FigureOptions) -> _Layout:
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


def _plan(scene: _Scene, layout: _Layout) -> FigurePlan:
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
        Bad options, no visible layer, or a figure beyond :data:`MAX_PIXELS`.
    """
    options = (options or FigureOptions()).validated()
    scene = _scene(viewer, options)
    layout = _fitted_layout(scene, options)
    if layout.width * layout.height > MAX_PIXELS:
        raise ValueError(
            f"The figure would be {layout.width} x {layout.height} pixels, more than "
            f"{MAX_PIXELS / 1e6:.0f} megapixels; choose a smaller zoom."
        )
    return _plan(scene, layout)


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
    info: dict[str, Any]


def _background(viewer: Viewer) -> tuple[int, int, int]:
    """The canvas colour napari draws behind the data (the viewer's theme, or its override)."""
    from napari.utils.colormaps.standardize_color import transform_color

    override = getattr(viewer.canvas, "background_color_override", None)
    if override is not None:
        color = transform_color(override)[0]
    else:
        from napari.settings import get_settings
        from napari.utils.theme import get_system_theme, get_theme

        name = getattr(viewer, "theme", None) or get_settings().appearance.theme
        theme = get_theme(get_system_theme() if name == "system" else name)
        color = transform_color(theme.canvas.as_hex())[0]
    return tuple(round(float(c) * 255) for c in color[:3])  # type: ignore[return-value]


def _foreground(background: tuple[int, int, int]) -> tuple[int, int, int]:
    luminance = 0.2126 * background[0] + 0.7152 * background[1] + 0.0722 * background[2]
    return (0, 0, 0) if luminance > 128 else (255, 255, 255)


def _draw_colorbar(
    canvas: Image.Image,
    bar: _Colorbar,
    xy: tuple[int, int],
    height: int,
    layout: _Layout,
    colors: tuple[tuple[int, int, int], tuple[int, int, int]],
) -> dict[str, int]:
    """Draw one colorbar with ticks and its rotated label; returns the gradient's box."""
    from PIL import ImageDraw

    x, top = xy
    background, ink = colors
    point = layout.dpi / 72.0
    face = draw.font(layout.font_px)
    bar_width = max(6, round(_BAR_WIDTH_PT * point))
    tick = max(2, round(_TICK_PT * point))
    line_width = max(1, round(0.5 * point))
    # napari's shaders apply gamma to the normalised value: colour = cmap(t ** gamma).
    fractions = np.linspace(0.0, 1.0, height) ** bar.gamma
    strip = draw.colorbar_strip(bar.colormap.map(fractions), bar_width, height, background)
    canvas.paste(strip, (x, top))
    pen = ImageDraw.Draw(canvas)
    low, high = bar.contrast_limits
    values = draw.nice_ticks(low, high, _tick_count(height, face))
    half_line = draw.line_height(face) // 2
    label_right = x
    for value, label in zip(values, draw.format_ticks(values), strict=True):
        fraction = 0.5 if high == low else (high - value) / (high - low)
        y = top + round(fraction * (height - 1))
        pen.line((x + bar_width, y, x + bar_width + tick, y), fill=ink, width=line_width)
        tx = x + bar_width + tick + layout.gap // 2
        draw.draw_text(canvas, (tx, y - half_line), label, face, ink)
        label_right = max(label_right, tx + draw.text_width(face, label))
    # The outline sits around the gradient, so every gradient pixel keeps its colour.
    pen.rectangle(
        (x - line_width, top - line_width, x + bar_width - 1 + line_width, top + height),
        outline=ink,
        width=line_width,
    )
    title = _bar_title(bar, len(layout.colorbar_widths) > 1, face, height)
    rotated = draw.rotated_text(title, face, ink, background)
    label_xy = (label_right + layout.gap, top + (height - rotated.height) // 2)
    canvas.paste(rotated, label_xy)
    return {
        "x": x,
        "y": top,
        "width": bar_width,
        "height": height,
        "label_x": label_xy[0],
        "label_y": label_xy[1],
    }


def _draw_scale_bar(
    canvas: Image.Image,
    scale_bar: dict[str, Any],
    right: int,
    top: int,
    layout: _Layout,
    ink: tuple[int, int, int],
) -> dict[str, int]:
    """Draw the bar right-aligned at ``right`` with its label below; returns the bar's box."""
    from PIL import ImageDraw

    face = draw.font(layout.font_px)
    length, thickness = scale_bar["pixels"], scale_bar["thickness"]
    ImageDraw.Draw(canvas).rectangle(
        (right - length, top, right - 1, top + thickness - 1), fill=ink
    )
    label = scale_bar["label"]
    x = right - length // 2 - draw.text_width(face, label) // 2
    draw.draw_text(canvas, (x, top + thickness + layout.gap // 2), label, face, ink)
    return {"x": right - length, "y": top, "width": length, "height": thickness}


def _describe(scene: _Scene, layout: _Layout, boxes: dict[str, Any]) -> dict[str, Any]:
    region = scene.region
    height, width = scene.panel_size
    panels = []
    for panel in scene.panels:
        x, y = layout.panel_xy(scene, panel.row, panel.column)
        panels.append(
            {
                "row": panel.row,
                "column": panel.column,
                "layers": [layer.name for layer in panel.layers],
                "box": {"x": x, "y": y, "width": width, "height": height},
            }
        )
    info: dict[str, Any] = {
        "zoom": scene.zoom,
        "dpi": layout.dpi,
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
    }
    if region is not None:
        info["region"] = {
            "corner": list(region.corner),
            "data_shape": list(region.shape),
            "pixel_size": region.step,
            "pixel_unit": None if scene.length_unit is None else f"{scene.length_unit:~}",
            "screen_pixels_per_data_pixel": scene.zoom,
        }
    return info


def _paste_panels(
    viewer: Viewer, canvas: Image.Image, scene: _Scene, layout: _Layout, ink: tuple[int, int, int]
) -> None:
    face = draw.font(layout.font_px)
    height, width = scene.panel_size
    with _panels.hidden_overlays(viewer):
        for panel in scene.panels:
            if scene.region is None:
                pixels = _panels.render_canvas_3d(viewer, scene.zoom)
            else:
                pixels = _panels.render_region(viewer, panel, scene.region, scene.zoom)
            x, y = layout.panel_xy(scene, panel.row, panel.column)
            tile = Image.fromarray(np.ascontiguousarray(pixels[..., :3]), "RGB")
            canvas.paste(tile.crop((0, 0, width, height)), (x, y))
            if layout.title_height:
                title = draw.truncate(face, panel.title, width)
                draw.draw_text(canvas, (x, y - layout.title_height), title, face, ink)


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
        Bad options, no visible layer, or a figure beyond :data:`MAX_PIXELS`.
    """
    options = (options or FigureOptions()).validated()
    scene = _scene(viewer, options)
    layout = _fitted_layout(scene, options)
    if layout.width * layout.height > MAX_PIXELS:
        raise ValueError(
            f"The figure would be {layout.width} x {layout.height} pixels, more than "
            f"{MAX_PIXELS / 1e6:.0f} megapixels; choose a smaller zoom."
        )
    background = _background(viewer)
    ink = _foreground(background)
    canvas = Image.new("RGB", (layout.width, layout.height), background)
    _paste_panels(viewer, canvas, scene, layout, ink)

    height, width = scene.panel_size
    rows, columns = scene.grid
    first_top = layout.panel_origin[1]
    last_bottom = layout.panel_xy(scene, rows - 1, 0)[1] + height
    boxes: dict[str, Any] = {"colorbars": [], "scale_bar": None}
    x = layout.colorbar_x
    for bar, bar_width in zip(scene.colorbars, layout.colorbar_widths, strict=True):
        x += 2 * layout.gap
        box = _draw_colorbar(
            canvas, bar, (x, first_top), last_bottom - first_top, layout, (background, ink)
        )
        boxes["colorbars"].append(box)
        x += bar_width

    face = draw.font(layout.font_px)
    right = layout.panel_xy(scene, rows - 1, columns - 1)[0] + width
    room = right - layout.panel_origin[0]
    if layout.scale_bar is not None:
        top = last_bottom + layout.gap
        boxes["scale_bar"] = _draw_scale_bar(canvas, layout.scale_bar, right, top, layout, ink)
        label_width = draw.text_width(face, layout.scale_bar["label"])
        room -= max(layout.scale_bar["pixels"], label_width) + 2 * layout.gap
    if scene.caption:
        text = draw.truncate(face, scene.caption, room)
        draw.draw_text(canvas, (layout.panel_origin[0], last_bottom + layout.gap), text, face, ink)

    info = _describe(scene, layout, boxes)
    return Figure(image=np.asarray(canvas), plan=_plan(scene, layout), info=info)
