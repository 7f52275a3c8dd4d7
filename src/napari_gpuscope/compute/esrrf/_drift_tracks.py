"""The drift trace as a napari Tracks layer: the path of frame 0's content over the frames,
drawn at true size in the input's coordinates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..results import Geometry, LayerDataTuple, result_name

__all__ = ["tracks_data", "tracks_layer"]


def tracks_data(
    shifts: np.ndarray,
    frame_shape: tuple[int, int] | None,
    anchor: tuple[float, float] | None = None,
) -> np.ndarray:
    """napari Tracks data ``(T, 4)``: ``[track 0, frame, y, x]``, the path of frame 0's
    content at ``anchor`` (input pixels; default the centre of a frame of ``frame_shape``).

    Examples
    --------
    >>> tracks_data(np.array([[0.0, 0.0], [0.5, -1.0]]), (9, 9)).tolist()
    [[0.0, 0.0, 4.0, 4.0], [0.0, 1.0, 4.5, 3.0]]
    """
    if anchor is None:
        rows, cols = frame_shape or (1, 1)
        anchor = ((rows - 1) / 2, (cols - 1) / 2)
    n = shifts.shape[0]
    data = np.zeros((n, 4), np.float64)
    data[:, 1] = np.arange(n)
    data[:, 2] = anchor[0] + shifts[:, 0]
    data[:, 3] = anchor[1] + shifts[:, 1]
    return data


def tracks_layer(
    shifts: np.ndarray,
    frame_shape: tuple[int, int] | None,
    name: str = "stack",
    geometry: Geometry | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> LayerDataTuple:
    """The Tracks layer of a drift trace (``DriftResult.layers``).

    Coloured by frame (turbo: blue at frame 0 to red at the last, so the path says which
    way the sample went) and 4 px wide with the whole path shown: one track coloured by
    its id takes turbo's darkest blue, invisible over a dark image. The geometry is the
    input's ``(t, y, x)`` (its last three axes), units and axis labels included, so that
    napari keeps its units and scale bar on; a 2D geometry (a frame's) gives the ``y, x``
    axes and a time axis of scale 1 in frames.

    Examples
    --------
    >>> shifts = np.array([[0.0, 0.0], [0.5, -1.0]])
    >>> geometry = Geometry(scale=(2.0, 0.1, 0.1), units=("s", "µm", "µm"))
    >>> data, kwargs, kind = tracks_layer(shifts, (8, 8), "cells", geometry)
    >>> kind, kwargs["color_by"], kwargs["properties"]["frame"].tolist(), kwargs["units"]
    ('tracks', 'frame', [0.0, 1.0], ('s', 'µm', 'µm'))
    """
    kwargs: dict[str, Any] = {"name": result_name("drift", name)}
    if geometry is not None:
        g = geometry.trailing(3).as_kwargs()
        pads = {"scale": 1.0, "translate": 0.0, "units": "pixel", "axis_labels": "t"}
        for key, pad in pads.items():
            if key in g and len(g[key]) == 2:  # a frame's geometry: the track adds time
                g[key] = (pad, *g[key])
            elif key in g and len(g[key]) != 3:
                del g[key]
        kwargs.update(g)
    data = tracks_data(shifts, frame_shape)
    n = data.shape[0]
    kwargs.update(
        {
            "metadata": {**dict(metadata or {}), "quantity": "drift", "unit": "px"},
            "properties": {"frame": data[:, 1].copy()},
            "color_by": "frame",
            "colormap": "turbo",
            "tail_width": 4,
            "tail_length": max(1, n),
            "head_length": 0,
        }
    )
    return data, kwargs, "tracks"
