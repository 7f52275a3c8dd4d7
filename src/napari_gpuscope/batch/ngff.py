"""OME-NGFF (OME-Zarr 0.5 on zarr v3) image groups: how a result layer is written and read.

One idea: an image layer ``(data, kwargs, kind)`` becomes a zarr group whose full-resolution
array is ``0``, with the multiscales metadata written by ome-zarr-py
(:func:`ome_zarr.writer.write_multiscales_metadata`): NGFF axes from the layer's labels, NGFF
(UDUNITS) units, the layer's scale, its channels' colours, labels and display windows as
OME-NGFF ``omero`` metadata where its colormap is a single-colour ramp
(:mod:`napari_gpuscope.export.colours`), and the recipe and provenance under the group attribute
:data:`ATTRIBUTE`. Extra layers of a position are named by :func:`safe_label`; a text file
beside the image takes no name the group's entries own (:func:`check_file_name`). Where the
groups go, and when, is the store's business (:mod:`napari_gpuscope.batch.store`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.compute.results import split_result_name
from napari_gpuscope.export.colours import omero_metadata

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

    import zarr

    from napari_gpuscope.compute._types import JSONDict
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["ATTRIBUTE", "check_file_name", "ngff_unit", "read_image", "safe_label", "write_image"]

ATTRIBUTE = "napari_gpuscope"
"""The namespaced group attribute holding the recipe and provenance of each position."""


_RESERVED = {"zarr.json", "extra", "0"}
"""Entries of a position group that the image writer owns (lower case: case-insensitive
file systems)."""


def check_file_name(file_name: str) -> str:
    """Refuse a result file name that is not a plain file name of the position's group.

    A name is letters, digits and ``._-`` (no path separator, so the file stays in its
    group), does not start with a dot (no ``..``, nothing hidden like the ``.writing-*``
    staging folders) and is none of the group's own entries (``zarr.json``, ``extra``, the
    array ``0``), in any letter case.

    Returns
    -------
    str
        The name.

    Raises
    ------
    ValueError
        Naming the file and what is valid.

    Examples
    --------
    >>> check_file_name("drift.csv")
    'drift.csv'
    >>> check_file_name("../drift.csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the result's file name '../drift.csv' is not valid: a file name is letters, ...
    """
    valid = (
        isinstance(file_name, str)
        and bool(file_name)
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in file_name)
        and not file_name.startswith(".")
        and file_name.lower() not in _RESERVED
    )
    if not valid:
        raise ValueError(
            f"the result's file name {file_name!r} is not valid: a file name is letters, digits "
            "and '._-' (no path separators), does not start with '.', and is not zarr.json, "
            "extra or 0"
        )
    return file_name


def safe_label(layer_name: str, index: int) -> str:
    """A group name for an extra layer: the kind its name starts with (``"absorption ·
    cells [reg=0.001]"`` -> ``absorption``), else the bracketed tag of an older name, else
    its index.

    The kind, not the settings, names the group, so ``extra/absorption`` is the same path
    whatever the parameters. Stores written before named groups after the tag
    (``extra/absorption_reg_0.001``); the reader lists ``extra/`` and takes each layer's name
    from its metadata, so those open as before.

    Examples
    --------
    >>> safe_label("tilt zenith · A01", 1)
    'tilt_zenith'
    >>> safe_label("A01 [absorption reg=0.001]", 1)
    'absorption_reg_0.001'
    >>> safe_label("", 2)
    'layer2'
    """
    parts = split_result_name(layer_name)
    if parts is not None:
        tag = parts[0]
    else:
        tag = layer_name.rsplit("[", 1)[-1].rstrip("]") if "[" in layer_name else ""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in tag).strip("._")
    return cleaned or f"layer{index}"


_SPACE = {"x", "y", "z"}


def _axes(
    labels: tuple[str, ...] | None, ndim: int, units: Sequence[str | None] | None
) -> list[dict[str, str]]:
    """NGFF axes: the layer's labels when they are valid NGFF names, else the usual trailing
    ``(t, c, z, y, x)``."""
    names = [str(label).lower() for label in labels] if labels else []
    if len(names) != ndim or len(set(names)) != ndim or not set(names) <= {"t", "c", *_SPACE}:
        names = ["t", "c", "z", "y", "x"][-ndim:] if ndim <= 5 else [f"d{i}" for i in range(ndim)]
    axes = []
    for i, axis in enumerate(names):
        kind = "space" if axis in _SPACE else {"t": "time", "c": "channel"}.get(axis, "other")
        entry = {"name": axis, "type": kind}
        unit = ngff_unit(units[i]) if units is not None and i < len(units) else None
        if unit and kind in ("space", "time"):
            entry["unit"] = unit
        axes.append(entry)
    return axes


_UNITS = {
    "µm": "micrometer",
    "um": "micrometer",
    "nm": "nanometer",
    "mm": "millimeter",
    "s": "second",
    "ms": "millisecond",
    "m": "meter",
    "pixel": None,  # napari's "no unit": NGFF has no such unit, so none is written
}


def ngff_unit(unit: object) -> str | None:
    """The NGFF (UDUNITS) name of a unit as napari or ImageJ write it; None when unknown.

    Examples
    --------
    >>> ngff_unit("µm"), ngff_unit("um"), ngff_unit("micrometer"), ngff_unit("px")
    ('micrometer', 'micrometer', 'micrometer', None)
    >>> ngff_unit("pixel") is None
    True
    """
    if not unit:
        return None
    text = str(unit)
    return _UNITS.get(text, text if text.isalpha() and len(text) > 2 else None)


def write_image(group: zarr.Group, layer: LayerDataTuple, attrs: JSONDict) -> None:
    """Write one image layer into a zarr group as an OME-Zarr image: its array ``0`` (one chunk
    per plane), the multiscales metadata (ome-zarr-py, NGFF 0.5), the channels' colours
    (``omero``, :func:`~napari_gpuscope.export.colours.omero_metadata`: where the layer's
    colormap is a single-colour ramp) and the attribute :data:`ATTRIBUTE`.

    Raises
    ------
    ValueError
        The image holds an infinity, or a NaN its metadata does not explain.
    """
    from ome_zarr.format import FormatV05
    from ome_zarr.writer import write_multiscales_metadata

    data, kwargs, _ = layer
    array = np.asarray(data)
    if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        # NaN is written only where the layer says what it means (e.g. a sweep's "not
        # measured"); an unexplained NaN or any infinity is a failed computation.
        explained = bool(kwargs.get("metadata", {}).get("nan")) and not np.isinf(array).any()
        if not explained:
            raise ValueError("the result holds non-finite values (NaN or infinity); not written")
    # One chunk per plane keeps reads of a plane cheap; a task owns all of its chunks.
    chunks = (1,) * max(array.ndim - 2, 0) + array.shape[-2:]
    group.create_array("0", data=array, chunks=chunks)
    scale = kwargs.get("scale")
    scale = [float(s) for s in scale] if scale is not None else [1.0] * array.ndim
    axes = _axes(kwargs.get("axis_labels"), array.ndim, kwargs.get("units"))
    write_multiscales_metadata(
        group,
        datasets=[{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": scale}]}],
        fmt=FormatV05(),
        axes=axes,
        name=str(kwargs.get("name", "")),
    )
    channel_axis = next((i for i, axis in enumerate(axes) if axis["type"] == "channel"), None)
    omero = omero_metadata(array, kwargs, channel_axis)
    if omero is not None:  # the colours it was shown in, for napari (our reader), Fiji, OMERO
        group.attrs["ome"] = {**group.attrs["ome"], "omero": omero}
    group.attrs[ATTRIBUTE] = attrs


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """The full-resolution array ``0`` of the image group at ``path``, read whole."""
    import zarr

    return np.asarray(zarr.open_array(str(path), mode="r")[...])
