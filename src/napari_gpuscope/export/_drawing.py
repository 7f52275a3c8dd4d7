"""Drawing the figure furniture with Pillow: text, colorbars, scale bars, nice numbers.

Sizes are given in device pixels; callers convert typographic points with the figure's DPI.
Text uses DejaVu Sans, which ships with matplotlib (a dependency), so figures look the same on
every machine.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "colorbar_strip",
    "draw_text",
    "font",
    "format_ticks",
    "line_height",
    "nice_length",
    "nice_ticks",
    "rotated_text",
    "text_width",
    "truncate",
    "wrap",
]

RGB = tuple[int, int, int]
Face = ImageFont.FreeTypeFont | ImageFont.ImageFont
"""A font PIL draws with (a TrueType face, or PIL's default when none is found)."""


@functools.cache
def _font_file() -> str | None:
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    return str(path) if path.is_file() else None


@functools.cache
def font(size: int) -> Face:
    """DejaVu Sans at ``size`` pixels (Pillow's default font when it is missing)."""
    path = _font_file()
    if path is None:
        return ImageFont.load_default(size)
    return ImageFont.truetype(path, size)


def line_height(face: Face) -> int:
    """Height of one line of text (ascent + descent)."""
    ascent, descent = face.getmetrics()
    return int(ascent + descent)


def text_width(face: Face, text: str) -> int:
    """Advance width of ``text``."""
    return math.ceil(face.getlength(text))


def truncate(face: Face, text: str, width: int) -> str:
    """``text``, shortened with an ellipsis to fit ``width`` pixels."""
    if text_width(face, text) <= width:
        return text
    while text and text_width(face, text + "…") > width:
        text = text[:-1]
    return text + "…" if text else ""


def wrap(face: Face, text: str, width: int, max_lines: int = 2) -> list[str]:
    """``text`` broken at spaces into lines of at most ``width`` pixels, at most ``max_lines`` of
    them (the last one shortened with an ellipsis when text is left over; a word wider than a
    line is shortened too).

    Examples
    --------
    >>> face = font(10)
    >>> wrap(face, "short", 200)
    ['short']
    >>> len(wrap(face, "a title much too long for one line of the panel", 120))
    2
    """
    words = text.split()
    lines: list[str] = []
    while words and len(lines) < max_lines:
        line = words.pop(0)
        while words and text_width(face, f"{line} {words[0]}") <= width:
            line = f"{line} {words.pop(0)}"
        lines.append(line)
    if words:  # text left over: the last line ends in an ellipsis
        last = truncate(face, f"{lines[-1]} {' '.join(words)}", width)
        lines[-1] = last[:-1].rstrip() + "…" if last.endswith("…") else last
    return [truncate(face, line, width) for line in lines] or [""]


def draw_text(image: Image.Image, xy: tuple[int, int], text: str, face: Face, fill: RGB) -> None:
    """Draw ``text`` with its line box's top-left corner at ``xy``."""
    ImageDraw.Draw(image).text(xy, text, font=face, fill=fill, anchor="la")


def rotated_text(text: str, face: Face, fill: RGB, background: RGB) -> Image.Image:
    """``text`` rotated to read bottom to top, on ``background``."""
    strip = Image.new("RGB", (max(1, text_width(face, text)), line_height(face)), background)
    ImageDraw.Draw(strip).text((0, 0), text, font=face, fill=fill, anchor="la")
    return strip.rotate(90, expand=True)


def nice_length(target: float) -> float:
    """The largest 1, 2 or 5 times a power of ten not above ``target`` (``target`` > 0)."""
    exponent = math.floor(math.log10(target))
    for mantissa in (5, 2, 1):
        value = mantissa * 10.0**exponent
        if value <= target * (1 + 1e-9):
            return value
    return 10.0**exponent


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values inside ``[low, high]``, about ``count`` of them."""
    if not high > low:
        return [low]
    step = nice_length((high - low) / max(1, count - 1))
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [k * step for k in range(first, last + 1)]


def format_ticks(values: Sequence[float]) -> list[str]:
    """Labels with as many decimals as the tick spacing needs."""
    if len(values) < 2:
        return [f"{v:.4g}" for v in values]
    step = abs(values[1] - values[0])
    span = max(abs(v) for v in values)
    if span >= 1e6 or step < 1e-4:
        return [f"{v:.3g}" for v in values]
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [f"{v:.{decimals}f}" for v in values]


def colorbar_strip(colors: np.ndarray, width: int, background: RGB) -> Image.Image:
    """A vertical gradient ``width`` pixels wide, one row per colour, ``colors[0]`` at the bottom.

    ``colors`` is ``(rows, 4)`` RGBA in [0, 1]; transparent colormap entries are blended over
    ``background`` as the canvas would show them.
    """
    rgba = np.asarray(colors, dtype=float)[::-1]
    alpha = rgba[:, 3:4]
    rgb = rgba[:, :3] * alpha + np.asarray(background, float) / 255 * (1 - alpha)
    column = np.clip(np.rint(rgb * 255), 0, 255).astype(np.uint8)
    return Image.fromarray(np.repeat(column[:, None, :], width, axis=1), "RGB")
