"""The figure's colours and the marks drawn beside its panels: a colorbar per display range,
with ticks and its rotated label, and the scale bar with its length below the panels."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.export import _drawing as draw
from napari_gpuscope.export import _panels
from napari_gpuscope.export._colorbars import Colorbar, bar_title
from napari_gpuscope.export._layout import BAR_WIDTH_PT, TICK_PT, Layout, tick_count

if TYPE_CHECKING:
    from napari.viewer import Viewer
    from PIL import Image

__all__ = ["canvas_colour", "draw_colorbar", "draw_scale_bar", "ink_on"]


def canvas_colour(viewer: Viewer) -> tuple[int, int, int]:
    """The canvas colour napari draws behind the data (the viewer's theme, or its override)."""
    from napari.utils.colormaps.standardize_color import transform_color

    override = getattr(viewer.canvas, "background_color_override", None)
    if override is not None:
        color = transform_color(override)[0]
    else:
        from napari.utils.theme import get_theme

        color = transform_color(get_theme(_panels.theme_name(viewer)).canvas.as_hex())[0]
    return tuple(round(float(c) * 255) for c in color[:3])  # type: ignore[return-value]


def ink_on(background: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white ink, whichever reads on ``background``."""
    luminance = 0.2126 * background[0] + 0.7152 * background[1] + 0.0722 * background[2]
    return (0, 0, 0) if luminance > 128 else (255, 255, 255)


def draw_colorbar(
    canvas: Image.Image,
    bar: Colorbar,
    xy: tuple[int, int],
    height: int,
    layout: Layout,
    colors: tuple[tuple[int, int, int], tuple[int, int, int]],
    others: list[Colorbar],
) -> dict[str, int | str]:
    """Draw one colorbar with ticks and its rotated label; returns the gradient's box, where
    the label is and its text (``"title"``)."""
    from PIL import ImageDraw

    x, top = xy
    background, ink = colors
    point = layout.dpi / 72.0
    face = draw.font(layout.font_px)
    bar_width = max(6, round(BAR_WIDTH_PT * point))
    tick = max(2, round(TICK_PT * point))
    line_width = max(1, round(0.5 * point))
    # napari's shaders apply gamma to the normalised value: colour = cmap(t ** gamma).
    fractions = np.linspace(0.0, 1.0, height) ** bar.gamma
    strip = draw.colorbar_strip(bar.colormap.map(fractions), bar_width, background)
    canvas.paste(strip, (x, top))
    pen = ImageDraw.Draw(canvas)
    low, high = bar.contrast_limits
    values = draw.nice_ticks(low, high, tick_count(height, face))
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
    title = bar_title(bar, others, face, height)
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
        "title": title,
    }


def draw_scale_bar(
    canvas: Image.Image,
    scale_bar: dict[str, object],
    right: int,
    top: int,
    layout: Layout,
    ink: tuple[int, int, int],
) -> dict[str, int]:
    """Draw the bar right-aligned at ``right`` with its label below (centred under the bar, or
    moved left so that it ends at ``right``: a label wider than the bar is never cut); returns
    the bar's box."""
    from PIL import ImageDraw

    face = draw.font(layout.font_px)
    length, thickness = scale_bar["pixels"], scale_bar["thickness"]
    ImageDraw.Draw(canvas).rectangle(
        (right - length, top, right - 1, top + thickness - 1), fill=ink
    )
    label = scale_bar["label"]
    label_width = draw.text_width(face, label)
    x = max(
        layout.panel_origin[0], min(right - length // 2 - label_width // 2, right - label_width)
    )
    label_y = top + thickness + layout.gap // 2
    draw.draw_text(canvas, (x, label_y), label, face, ink)
    return {
        "x": right - length,
        "y": top,
        "width": length,
        "height": thickness,
        "label_x": x,
        "label_y": label_y,
        "label_width": label_width,
    }
