"""The colours a batch position's channels open with in napari.

One idea: each channel layer's colormap. Where a group records its channels' colours as
OME-NGFF does (``ome.omero.channels[i].color``, ``RRGGBB``), those colours are used: napari
takes ``"#rrggbb"`` as the colormap from black to that colour. The batch writer
(:func:`napari_gpuscope.batch.ngff.write_image`) records them where a layer's colormap is a
single-colour ramp (:mod:`napari_gpuscope.export.colours`). Stores without them (older ones,
or colormaps with no OME colour) fall back on the eSRRF dock's colours: a multi-channel eSRRF
position has one group per channel (channel 0 the position's result, the others under
``extra/``), named ``"<kind> · <input> ch<c> [...]"`` (or by the run's channel names), and
its provenance says how many channels the input had. Those layers then take the colours the
eSRRF dock gives channel ``c``
(:data:`~napari_gpuscope.compute.esrrf.CHANNEL_COLORMAPS`, additive blending, so they
overlay), and every channel of the result is shown, as the dock shows them; the other layers
of a channel (its widefield mean) stay hidden.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from napari_gpuscope.compute.results import split_result_name

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["default_channel_colours", "omero_colours"]

_HEX = re.compile(r"[0-9A-Fa-f]{6}")
_CHANNEL = re.compile(r" ch(\d+)$")


def omero_colours(attrs: JSONDict) -> list[str] | None:
    """The ``"#rrggbb"`` colour of each channel the group's OME-NGFF ``omero`` metadata
    records; None when it records none, or any is not six hex digits.

    Examples
    --------
    >>> omero_colours({"ome": {"omero": {"channels": [{"color": "FF00FF"}, {"color": "00ff00"}]}}})
    ['#ff00ff', '#00ff00']
    >>> omero_colours({"ome": {"multiscales": []}}) is None
    True
    """
    ome = attrs.get("ome")
    omero = ome.get("omero") if isinstance(ome, dict) else attrs.get("omero")  # NGFF 0.5, 0.4
    channels = omero.get("channels") if isinstance(omero, dict) else None
    if not isinstance(channels, list) or not channels:
        return None
    colours = [c.get("color") if isinstance(c, dict) else None for c in channels]
    if not all(isinstance(c, str) and _HEX.fullmatch(c) for c in colours):
        return None
    return [f"#{str(c).lower()}" for c in colours]


def _channel_of(name: str, names: list[str] | None) -> tuple[str, int] | None:
    """``(kind, channel)`` of a channel layer's name, else None."""
    parts = split_result_name(name)
    if parts is None:
        return None
    kind, source, _ = parts
    if names and source in names:
        return kind, names.index(source)
    found = _CHANNEL.search(source)
    return (kind, int(found.group(1))) if found else None


def default_channel_colours(
    layers: list[LayerDataTuple], batch: JSONDict, main_name: str | None
) -> list[LayerDataTuple]:
    """``layers`` of a multi-channel position with each channel's colour (where no recorded
    colour is set), and every channel of the result (the layers of ``main_name``'s kind)
    visible; other positions' layers are returned unchanged.

    Parameters
    ----------
    layers : list of tuple
        The position's layer-data tuples, as read.
    batch : dict
        The group's :data:`~napari_gpuscope.batch.ngff.ATTRIBUTE` attribute (its provenance
        says how many channels the input had, and their names).
    main_name : str or None
        The name of the position's result layer (channel 0's).
    """
    provenance = batch.get("provenance")
    result = provenance.get("result") if isinstance(provenance, dict) else None
    n_channels = result.get("n_channels") if isinstance(result, dict) else None
    if not isinstance(n_channels, int) or isinstance(n_channels, bool) or n_channels < 2:
        return layers
    from napari_gpuscope.compute.esrrf import CHANNEL_COLORMAPS

    names = result.get("channel_names")
    names = [str(n) for n in names] if isinstance(names, list) else None
    main = _channel_of(main_name, names) if main_name else None
    coloured = []
    for data, kwargs, kind in layers:
        found = _channel_of(str(kwargs.get("name", "")), names) if kind == "image" else None
        if found is not None and found[1] < n_channels:
            kwargs = {"colormap": CHANNEL_COLORMAPS[found[1] % len(CHANNEL_COLORMAPS)], **kwargs}
            kwargs["blending"] = "additive"  # the channels overlay
            if main is not None and found[0] == main[0]:
                kwargs["visible"] = True
        coloured.append((data, kwargs, kind))
    return coloured
