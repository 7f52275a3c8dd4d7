"""napari reader of batch results: a position of ``OUT.zarr`` at its true scale, with provenance.

``napari OUT.zarr/<position>`` (or ``viewer.open(path, plugin="napari-gpuscope")``) opens the
position's result, and every extra layer under ``extra/``, as image layers named as the dock
names them, with the pixel size, axis labels and units of its OME-Zarr metadata and the
provenance record in ``layer.metadata["napari_gpuscope"]``; the data stays on disk (a lazy Zarr
array). napari's built-in reader ignores the OME-Zarr scale (0.1 um pixels shown at 1), which
is why the plugin contributes its own. Only folders this package wrote are claimed: any other
path gets ``None`` and napari asks its other readers.

A position's drift trace (``drift.csv``, written by an eSRRF run with drift correction) opens
as the drift Tracks layer the dock draws (``"drift · <position>"``, coloured by frame) over the
widefield image, at the input's scale and centred on its frames.

Imports neither napari nor torch at import time (the reader runs in napari's process, where
both are loaded anyway, but the CLI's quick commands import this package's batch modules); a
drift trace imports :mod:`napari_gpuscope.compute.esrrf` when it is read.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from napari_gpuscope.batch.store import ATTRIBUTE

__all__ = ["get_reader", "read_position"]

LayerDataTuple = tuple[Any, dict[str, Any], str]

_UNITS = {"micrometer": "µm", "nanometer": "nm", "millimeter": "mm", "second": "s"}


def _attributes(folder: Path) -> dict[str, Any] | None:
    meta = folder / "zarr.json"
    if not meta.is_file():
        return None
    try:
        document = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    attrs = document.get("attributes", {}) if isinstance(document, dict) else {}
    if ATTRIBUTE not in attrs or "multiscales" not in attrs.get("ome", {}):
        return None
    return attrs


def get_reader(path: str | list[str]) -> Callable[[str], list[LayerDataTuple]] | None:
    """napari's reader hook: :func:`read_position` for a position group of a batch store.

    Examples
    --------
    >>> get_reader("/nowhere/out.zarr/A01") is None
    True
    """
    if isinstance(path, list):
        if len(path) != 1:
            return None
        path = path[0]
    return read_position if _attributes(Path(path)) is not None else None


def _layer(folder: Path, attrs: dict[str, Any], visible: bool) -> LayerDataTuple:
    import zarr

    scales = attrs["ome"]["multiscales"][0]
    dataset = scales["datasets"][0]
    data = zarr.open_array(str(folder / dataset["path"]), mode="r")
    scale = next(
        (t["scale"] for t in dataset.get("coordinateTransformations", []) if t["type"] == "scale"),
        [1.0] * data.ndim,
    )
    axes = scales.get("axes", [])
    kwargs: dict[str, Any] = {
        "name": scales.get("name") or folder.name,
        "scale": tuple(float(s) for s in scale),
        "visible": visible,
        "metadata": {
            ATTRIBUTE: attrs[ATTRIBUTE].get("provenance"),
            "batch": {k: v for k, v in attrs[ATTRIBUTE].items() if k != "provenance"},
        },
    }
    if len(axes) == data.ndim:
        kwargs["axis_labels"] = tuple(axis["name"] for axis in axes)
        units = [_UNITS.get(axis.get("unit", ""), axis.get("unit")) for axis in axes]
        if any(units):  # an axis without one (time, of an ImageJ input) is napari's "pixel"
            kwargs["units"] = tuple(u or "pixel" for u in units)
        channel = [i for i, axis in enumerate(axes) if axis.get("type") == "channel"]
        if channel:
            # napari splits the channels into layers; per-layer geometry drops that axis.
            c = channel[0]
            kwargs["channel_axis"] = c
            for key in ("scale", "axis_labels", "units"):
                if key in kwargs:
                    kwargs[key] = tuple(v for i, v in enumerate(kwargs[key]) if i != c)
    return data, kwargs, "image"


def read_position(path: str | list[str]) -> list[LayerDataTuple]:
    """The position's result layer, then its extra layers (hidden), lazily from disk, then its
    drift trace as a Tracks layer when the group has ``drift.csv``.

    Parameters
    ----------
    path : str
        ``OUT.zarr/<position>``.

    Returns
    -------
    list of tuple
        napari layer-data tuples.
    """
    folder = Path(path[0] if isinstance(path, list) else path)
    attrs = _attributes(folder)
    if attrs is None:
        raise ValueError(f"{folder} is not a position of a napari-gpuscope batch store")
    layers = [_layer(folder, attrs, visible=True)]
    extra = folder / "extra"
    if extra.is_dir():
        for child in sorted(extra.iterdir()):
            child_attrs = _attributes(child)
            if child_attrs is not None:
                layers.append(_layer(child, child_attrs, visible=False))
    trace = folder / DRIFT_FILE
    if DRIFT_FILE in attrs[ATTRIBUTE].get("files", []) and trace.is_file():
        try:
            layers.append(_drift_layer(trace, attrs[ATTRIBUTE]))
        except ValueError as exc:  # an edited or damaged trace must not hide the images
            warnings.warn(f"{trace} not opened as a drift track: {exc}", stacklevel=2)
    return layers


DRIFT_FILE = "drift.csv"
"""A position's drift trace (eSRRF's ``files``), opened as a Tracks layer."""


def _drift_layer(path: Path, batch: dict[str, Any]) -> LayerDataTuple:
    """The drift track of ``drift.csv``, as the dock draws it over the input (the input's
    geometry and frame size from the group's ``input`` attribute)."""
    import dataclasses

    from napari_gpuscope.compute.esrrf import DriftResult
    from napari_gpuscope.compute.results import Geometry

    source = batch.get("input") or {}
    trace = DriftResult.from_csv(path)
    shape = source.get("shape") or []
    if len(shape) >= 2:  # the track starts at the middle of the frames, as in the dock
        trace = dataclasses.replace(trace, frame_shape=(int(shape[-2]), int(shape[-1])))
    geometry = Geometry.from_kwargs(source.get("geometry") or {})
    labels = geometry.axis_labels or ()
    if len(shape) == 4:  # channels (C, T, Y, X): the track lives on one channel's axes
        channel = labels.index("c") if len(labels) == 4 and "c" in labels else 0
        geometry = geometry.select([i for i in range(4) if i != channel])
    metadata = {
        ATTRIBUTE: batch.get("provenance"),
        "batch": {k: v for k, v in batch.items() if k != "provenance"},
        "file": str(path),
    }
    data, kwargs, kind = trace.tracks_layer(
        str(batch.get("position") or path.parent.name), geometry, metadata
    )
    # The name the run gave the layer (e.g. "drift · A01 ch0" for channels), as recorded.
    written = [
        label.removesuffix(" (tracks)")
        for label, file_name in (batch.get("layers_in_files") or {}).items()
        if file_name == path.name and label.endswith(" (tracks)")
    ]
    if written:
        kwargs["name"] = written[0]
    return data, kwargs, kind
