"""One position of a batch store read as napari layers: its result at its true scale, its extra
layers, its drift trace.

``OUT.zarr/<position>`` opens as the position's result, and every extra layer under
``extra/``, as image layers named as the dock names them, with the pixel size, axis labels and
units of its OME-Zarr metadata and the provenance record in
``layer.metadata["napari_gpuscope"]``; the data stays on disk (a lazy Zarr array). The
channels of a multi-channel position have their colours (:mod:`.reader_colours`).

A position's drift trace (``drift.csv``, written by an eSRRF run with drift correction) opens
as the drift Tracks layer the dock draws (``"drift · <position>"``, coloured by frame) over the
widefield image, at the input's scale and centred on its frames.

Imports neither napari nor torch at import time; a drift trace, or the channels of a
multi-channel position, import :mod:`napari_gpuscope.compute.esrrf` when read.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.reader_colours import default_channel_colours, omero_colours
from napari_gpuscope.batch.reader_layout import group_attributes

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["DRIFT_FILE", "DamagedPosition", "read_position"]


_UNITS = {"micrometer": "µm", "nanometer": "nm", "millimeter": "mm", "second": "s"}


class DamagedPosition(ValueError):
    """A position (or one of its layers) whose metadata or arrays cannot be read; the message
    names the folder and what is wrong."""


def _require(condition: bool, folder: Path, what: str) -> None:
    if not condition:
        raise DamagedPosition(f"{folder}: {what}")


def _layer(folder: Path, attrs: JSONDict, visible: bool) -> LayerDataTuple:
    """The image layer of one group; :class:`DamagedPosition` names what is wrong."""
    import zarr

    batch = attrs.get(ATTRIBUTE)
    _require(isinstance(batch, dict), folder, f"its {ATTRIBUTE!r} attribute is not a mapping")
    ome = attrs.get("ome")
    multiscales = ome.get("multiscales") if isinstance(ome, dict) else None
    _require(
        isinstance(multiscales, list) and bool(multiscales) and isinstance(multiscales[0], dict),
        folder,
        "no OME-NGFF 'multiscales' list in its attributes",
    )
    scales = multiscales[0]
    datasets = scales.get("datasets")
    _require(
        isinstance(datasets, list) and bool(datasets) and isinstance(datasets[0], dict),
        folder,
        "its multiscales have no 'datasets'",
    )
    dataset = datasets[0]
    _require(isinstance(dataset.get("path"), str), folder, "its first dataset has no 'path'")
    try:
        data = zarr.open_array(str(folder / dataset["path"]), mode="r")
    except Exception as exc:  # missing, not an array, damaged metadata: zarr's many errors
        raise DamagedPosition(
            f"{folder}: its array {dataset['path']!r} cannot be opened ({exc})"
        ) from exc
    scale = _scale(folder, dataset, data.ndim)
    axes = scales.get("axes")
    if not (isinstance(axes, list) and all(isinstance(a, dict) and "name" in a for a in axes)):
        axes = []
    name = scales.get("name")
    kwargs: dict[str, object] = {
        "name": name if isinstance(name, str) and name else folder.name,
        "scale": scale,
        "visible": visible,
        "metadata": {
            ATTRIBUTE: batch.get("provenance"),
            "batch": {k: v for k, v in batch.items() if k != "provenance"},
        },
    }
    if len(axes) == data.ndim:
        kwargs["axis_labels"] = tuple(str(axis["name"]) for axis in axes)
        units = [_UNITS.get(str(axis.get("unit", "")), axis.get("unit")) for axis in axes]
        if any(units):  # an axis without one (time, of an ImageJ input) is napari's "pixel"
            kwargs["units"] = tuple(str(u) if u else "pixel" for u in units)
        channel = [i for i, axis in enumerate(axes) if axis.get("type") == "channel"]
        if channel:
            # napari splits the channels into layers; per-layer geometry drops that axis.
            c = channel[0]
            kwargs["channel_axis"] = c
            for key in ("scale", "axis_labels", "units"):
                if key in kwargs:
                    kwargs[key] = tuple(v for i, v in enumerate(kwargs[key]) if i != c)
    colours = omero_colours(attrs)
    if colours is not None:
        if "channel_axis" in kwargs and len(colours) == data.shape[kwargs["channel_axis"]]:
            kwargs.update(colormap=colours, blending="additive")
        elif "channel_axis" not in kwargs and len(colours) == 1:
            kwargs["colormap"] = colours[0]
    return data, kwargs, "image"


def _scale(folder: Path, dataset: JSONDict, ndim: int) -> tuple[float, ...]:
    """The dataset's scale transformation: one positive finite number per axis (1 each when
    there is none)."""
    transforms = dataset.get("coordinateTransformations", [])
    _require(isinstance(transforms, list), folder, "its coordinateTransformations are no list")
    for transform in transforms:
        if isinstance(transform, dict) and transform.get("type") == "scale":
            scale = transform.get("scale")
            ok = isinstance(scale, list) and len(scale) == ndim
            ok = ok and all(
                isinstance(s, (int, float)) and not isinstance(s, bool) and 0 < s < math.inf
                for s in scale
            )
            _require(ok, folder, f"its scale {scale!r} is not {ndim} positive numbers")
            return tuple(float(s) for s in scale)
    return (1.0,) * ndim


def read_position(path: str | list[str]) -> list[LayerDataTuple]:
    """The position's result layer, then its extra layers (hidden, except the other channels
    of a multi-channel result), lazily from disk, then its drift trace as a Tracks layer when
    the group has ``drift.csv``. The channels of a multi-channel position have their colours
    (:mod:`.reader_colours`).

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
    attrs = group_attributes(folder)
    if attrs is None:
        raise ValueError(f"{folder} is not a position of a napari-gpuscope batch store")
    layers: list[LayerDataTuple] = []
    skipped: list[str] = []
    try:
        layers.append(_layer(folder, attrs, visible=True))
    except DamagedPosition as exc:
        skipped.append(f"the result not opened: {exc}")
    extra = folder / "extra"
    if extra.is_dir():
        for child in sorted(extra.iterdir()):
            child_attrs = group_attributes(child)
            if child_attrs is None:
                if child.is_dir():
                    skipped.append(f"extra layer {child.name!r} not opened: no readable attributes")
                continue
            try:
                layers.append(_layer(child, child_attrs, visible=False))
            except DamagedPosition as exc:
                skipped.append(f"extra layer {child.name!r} not opened: {exc}")
    batch = attrs.get(ATTRIBUTE)
    files = batch.get("files") if isinstance(batch, dict) else None
    trace = folder / DRIFT_FILE
    if isinstance(files, list) and DRIFT_FILE in files and trace.is_file():
        try:
            layers.append(_drift_layer(trace, batch))
        except Exception as exc:  # an edited or damaged trace must not hide the images
            skipped.append(f"{trace.name} not opened as a drift track: {_plain(exc)}")
    if not layers:
        raise DamagedPosition(
            f"{folder} is a damaged position, nothing in it could be read: " + "; ".join(skipped)
        )
    if skipped:
        warnings.warn(f"{folder}: " + "; ".join(skipped), stacklevel=2)
    if isinstance(batch, dict):
        layers = default_channel_colours(layers, batch, _multiscales_name(attrs))
    return layers


def _multiscales_name(attrs: JSONDict) -> str | None:
    """The name the group's OME-NGFF metadata gives its image, when it is a string."""
    ome = attrs.get("ome")
    multiscales = ome.get("multiscales") if isinstance(ome, dict) else None
    first = multiscales[0] if isinstance(multiscales, list) and multiscales else None
    name = first.get("name") if isinstance(first, dict) else None
    return name if isinstance(name, str) else None


def _plain(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if isinstance(exc, ValueError) and text else f"{type(exc).__name__}: {text}"


DRIFT_FILE = "drift.csv"
"""A position's drift trace (eSRRF's ``files``), opened as a Tracks layer."""


def _frames(shape: list[int], source: JSONDict) -> int | None:
    """The input's frame count (its time axis), when its shape and labels say so."""
    labels = ((source.get("geometry") or {}).get("axis_labels")) or ()
    if len(shape) == 3:
        return int(shape[0])
    if len(shape) == 4:  # (C, T, Y, X), or (T, C, Y, X) labelled so
        time = list(labels).index("t") if len(labels) == 4 and "t" in labels else 1
        return int(shape[time])
    return None


def _drift_layer(path: Path, batch: JSONDict) -> LayerDataTuple:
    """The drift track of ``drift.csv``, as the dock draws it over the input (the input's
    geometry and frame size from the group's ``input`` attribute)."""
    import dataclasses

    from napari_gpuscope.compute.esrrf import DriftResult
    from napari_gpuscope.compute.results import Geometry

    source = batch.get("input") or {}
    trace = DriftResult.from_csv(path)
    shape = source.get("shape") or []
    frames = _frames(shape, source)
    if frames is not None and trace.shifts.shape[0] != frames:
        raise ValueError(
            f"it has {trace.shifts.shape[0]} frames where the position's input has {frames}"
        )
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
