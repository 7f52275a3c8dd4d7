"""The OME-NGFF ``omero`` channel metadata of an image layer: each channel's colour, label and
display window, so that viewers (napari through our reader, Fiji, OMERO) open it in the colour
it was shown in.

One idea: a layer's colormap as an OME colour. OME-NGFF describes a channel's look by one
colour, the ramp from black to it (``"color": "RRGGBB"``); a colormap is recorded only when it
is such a ramp: a name of one (``"green"``, ``"magenta"``, ``"gray"``...), ``"#rrggbb"``, or a
colormap object whose colours run from black to one colour (napari's, read by duck typing:
batch runs import no napari). The batch writer (:mod:`napari_gpuscope.batch.ngff`) and the
TIFF export (:mod:`.tiff`, as ImageJ lookup tables) share it. Other colormaps (``"viridis"``,
``"twilight"``) have no OME colour: nothing is recorded for such a layer, and viewers choose
their own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict

__all__ = ["RAMP_COLOURS", "colormap_hex", "omero_metadata"]

RAMP_COLOURS = {
    "gray": "FFFFFF",
    "red": "FF0000",
    "green": "00FF00",
    "blue": "0000FF",
    "cyan": "00FFFF",
    "magenta": "FF00FF",
    "yellow": "FFFF00",
    "orange": "FFA500",  # napari's: (1, 0.647, 0)
}
"""Colormap names that are a ramp from black to one colour, and that colour (napari's)."""

_HEX = re.compile(r"#?([0-9A-Fa-f]{6})")


def _ramp_end(colours: np.ndarray) -> str | None:
    """The end colour of ``(n, 3 or 4)`` colours in [0, 1] running linearly from black, else
    None."""
    if colours.ndim != 2 or colours.shape[0] < 2 or colours.shape[1] < 3:
        return None
    if colours.shape[1] == 4 and not np.allclose(colours[:, 3], 1.0):
        return None  # transparency is no OME colour
    rgb = colours[:, :3]
    end = rgb[-1]
    if not np.allclose(rgb[0], 0.0, atol=1e-3) or not end.any():
        return None
    # Every colour is a multiple of the end colour: a ramp of one hue.
    fractions = rgb @ end / float(end @ end)
    if not np.allclose(rgb, fractions[:, None] * end, atol=2e-3):
        return None
    return "".join(f"{round(float(c) * 255):02X}" for c in end)


def colormap_hex(colormap: object) -> str | None:
    """The OME colour (``"RRGGBB"``) of a colormap that is a ramp from black to one colour,
    else None.

    Examples
    --------
    >>> colormap_hex("green"), colormap_hex("#ff00ff"), colormap_hex("viridis")
    ('00FF00', 'FF00FF', None)
    >>> from types import SimpleNamespace as Colormap
    >>> colormap_hex(Colormap(colors=[[0, 0, 0, 1], [0.5, 1, 0, 1]]))
    '80FF00'
    """
    if isinstance(colormap, str):
        found = _HEX.fullmatch(colormap.strip())
        if found:
            return found.group(1).upper()
        return RAMP_COLOURS.get(colormap.strip().lower())
    colours = getattr(colormap, "colors", None)
    if colours is None:
        return None
    try:
        array = np.asarray(colours, dtype=float)
    except (TypeError, ValueError):
        return None
    return _ramp_end(array)


def _window(channel: np.ndarray, limits: object) -> dict[str, float]:
    finite = channel[np.isfinite(channel)] if channel.dtype.kind == "f" else channel
    low = float(finite.min()) if finite.size else 0.0
    high = float(finite.max()) if finite.size else 0.0
    start, end = low, high
    if isinstance(limits, Sequence) and not isinstance(limits, str) and len(limits) == 2:
        start, end = (float(v) for v in limits)
    return {"min": low, "max": high, "start": start, "end": end}


def omero_metadata(
    array: np.ndarray, kwargs: Mapping[str, object], channel_axis: int | None
) -> JSONDict | None:
    """OME-NGFF ``omero`` metadata for an image layer, or None when a channel's colormap has
    no OME colour (or the layer gives none).

    Parameters
    ----------
    array : numpy.ndarray
        The image.
    kwargs : Mapping
        The layer's keyword arguments: ``colormap`` (one, or one per channel), ``name``,
        ``contrast_limits``, ``visible``.
    channel_axis : int or None
        The image's channel axis, whose planes are the channels; None for one channel.

    Returns
    -------
    dict or None
        ``{"channels": [{"color", "label", "window", "active", ...}], "rdefs": {...}}``.

    Examples
    --------
    >>> layer = {"colormap": "green", "name": "a"}
    >>> meta = omero_metadata(np.arange(4.0).reshape(2, 2), layer, None)
    >>> meta["channels"][0]["color"], meta["channels"][0]["window"]["end"]
    ('00FF00', 3.0)
    """
    colormap = kwargs.get("colormap")
    count = 1 if channel_axis is None else int(array.shape[channel_axis])
    many = isinstance(colormap, list | tuple) and not isinstance(colormap, str)
    colormaps = list(colormap) if many else [colormap] * count
    if colormap is None or len(colormaps) != count:
        return None
    colours = [colormap_hex(c) for c in colormaps]
    if any(c is None for c in colours):
        return None
    name = str(kwargs.get("name") or "")
    limits = kwargs.get("contrast_limits")
    per_channel = (
        isinstance(limits, list | tuple)
        and len(limits) == count
        and all(isinstance(pair, list | tuple) for pair in limits)
    )
    channels = []
    for index, colour in enumerate(colours):
        plane = array if channel_axis is None else np.take(array, index, axis=channel_axis)
        channel_limits = limits[index] if per_channel else limits
        channels.append(
            {
                "color": colour,
                "label": name if count == 1 else f"{name} ch{index}",
                "window": _window(np.asarray(plane), channel_limits),
                "active": bool(kwargs.get("visible", True)),
                "coefficient": 1.0,
                "family": "linear",
                "inverted": False,
            }
        )
    return {"channels": channels, "rdefs": {"model": "color"}}
