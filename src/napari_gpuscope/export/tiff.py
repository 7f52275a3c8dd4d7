"""ImageJ-compatible TIFF files that keep pixel size, units, axes and provenance.

Files are written with :func:`tifffile.imwrite` in ImageJ hyperstack mode, so Fiji/ImageJ opens
them with the right calibration:

- pixel size as the X/Y resolution tags (``1 / scale``) with ``unit=`` in the description;
- Z spacing as ``spacing=``, the frame interval as ``finterval=`` (and ``tunit=`` for its unit);
- axes in ImageJ order (``TZCYX``);
- the colour the layer is shown in, where its colormap is a ramp from black to one colour
  (``"green"``, ``"magenta"``...: :func:`~napari_gpuscope.export.colours.colormap_hex`), as
  ImageJ's lookup table (``LUTs``), so Fiji opens each channel in its colour;
- the provenance record as one extra description line ``napari_gpuscope=<compact JSON>``.
  ImageJ and tifffile read unknown ``key=value`` lines as plain properties, so other readers
  still parse the description.

Two sample types are offered:

``"float32"``
    Intensities are stored exactly as float32.
``"uint16"``
    16-bit integers, with one of two documented scalings:

    - ``"clip"``: values are rounded to the nearest integer and clipped to ``[0, 65535]``;
      intensity units are kept (right for camera counts and photon numbers).
    - ``"minmax"``: ``[min, max]`` of the data is mapped linearly onto ``[0, 65535]``. The
      calibration ``value = offset + slope * stored`` is written as ImageJ's standard linear
      calibration (``cf=0``, ``c0=offset``, ``c1=slope``), so ImageJ shows calibrated values and
      :func:`~.tiff_read.read_tiff` recovers them to within one quantisation step (``slope``).

ImageJ drops axes of length 1, so a ``(1, Y, X)`` stack is read back as ``YX``.

The sample types are :mod:`.tiff_samples`'s, the axes and units :mod:`.tiff_axes`'s; reading a
file back is :mod:`.tiff_read`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.export.colours import colormap_hex
from napari_gpuscope.export.tiff_axes import (
    IMAGEJ_ORDER,
    axes_from_labels,
    default_axes,
    per_axis,
    unit_name,
    validate_axes,
)
from napari_gpuscope.export.tiff_samples import (
    DEFAULT_DTYPE,
    DEFAULT_SCALING,
    TiffOptions,
    TiffScaling,
    smallest_exact_dtype,
    to_uint16,
)
from napari_gpuscope.provenance import PROVENANCE_KEY, provenance_json

if TYPE_CHECKING:
    from napari.layers import Layer

    from napari_gpuscope.compute._types import ArrayLike

__all__ = ["save_layer_data_tiff", "save_layer_tiff", "save_tiff"]


def save_tiff(
    path: str | Path,
    data: ArrayLike,
    *,
    scale: Sequence[float] | None = None,
    units: str | Sequence[object] | None = None,
    axes: str | None = None,
    provenance: Mapping[str, object] | Sequence[object] | None = None,
    dtype: str = DEFAULT_DTYPE,
    uint16_scaling: str = DEFAULT_SCALING,
    colour: str | None = None,
) -> Path:
    """Write an ImageJ-compatible TIFF with calibration and provenance.

    Parameters
    ----------
    path : str or Path
        Output file (``.tif``/``.tiff``).
    data : array-like
        2D to 5D image (NumPy, dask...). Never modified.
    scale : sequence of float, optional
        Pixel spacing per axis of ``data`` (napari ``layer.scale``).
    units : str or sequence, optional
        One unit for the spatial axes (Z, Y, X), or one per axis (strings or pint units, e.g.
        ``"um"``, ``"micrometer"``). X/Y share ImageJ's single ``unit``; Z gets ``zunit`` when
        it differs; the T unit becomes ``tunit``.
    axes : str, optional
        Axis letters from ``TZCYX``, ending in ``YX`` (e.g. ``"TYX"``). Defaults to ``YX``,
        ``ZYX``, ``TZYX`` or ``TZCYX`` by dimension. Axes given in another order are transposed
        into ImageJ order.
    provenance : mapping or sequence, optional
        Provenance record, stored as JSON on a ``napari_gpuscope=`` description line.
    dtype : {"float32", "uint16"}
        Sample type of the file.
    uint16_scaling : {"clip", "minmax"}
        How floats become uint16 (see the module docstring). Ignored for float32.
    colour : str, optional
        ``"RRGGBB"``: every channel is shown as the ramp from black to this colour (ImageJ's
        ``LUTs``); ``None`` leaves ImageJ's default (gray).

    Returns
    -------
    Path
        The written file.

    Raises
    ------
    ValueError
        Unknown ``dtype`` or ``uint16_scaling``, mismatched ``axes``/``scale``/``units``, or
        non-finite data saved as uint16.
    """
    import tifffile

    TiffOptions(dtype=dtype, uint16_scaling=uint16_scaling)  # raises naming the bad one
    array = np.asarray(data)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"Cannot save data of dtype {array.dtype} as TIFF; expected numbers.")
    ndim = array.ndim
    axes = validate_axes(axes, ndim) if axes is not None else default_axes(ndim)
    scales = per_axis(scale, ndim, "scale")
    if isinstance(units, str):
        # One unit string describes space; it must not turn into a time unit for T.
        units = [units if letter in "ZYX" else None for letter in axes]
    unit_names = [unit_name(u) for u in per_axis(units, ndim, "units") or [None] * ndim]

    # ImageJ needs TZCYX order; transpose the metadata together with the pixels.
    order = sorted(range(ndim), key=lambda i: IMAGEJ_ORDER.index(axes[i]))
    array = np.transpose(array, order)
    axes = "".join(axes[i] for i in order)
    scales = [float(scales[i]) for i in order] if scales is not None else None
    unit_names = [unit_names[i] for i in order]
    for value in scales or []:
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"scale values must be positive and finite, got {scales}.")

    calibration: TiffScaling | None = None
    if dtype == "float32":
        stored = array.astype(np.float32)
    else:
        stored, calibration = to_uint16(array, uint16_scaling)

    metadata: dict[str, object] = {"axes": axes}
    axis_scale = dict(zip(axes, scales, strict=True)) if scales is not None else {}
    axis_unit = dict(zip(axes, unit_names, strict=True))
    plane_unit = axis_unit["X"] or axis_unit["Y"]
    if plane_unit is not None:
        metadata["unit"] = plane_unit
    if "Z" in axis_scale:
        metadata["spacing"] = axis_scale["Z"]
    if axis_unit.get("Z") and axis_unit["Z"] != plane_unit:
        metadata["zunit"] = axis_unit["Z"]
    if "T" in axis_scale:
        metadata["finterval"] = axis_scale["T"]
    if axis_unit.get("T"):
        metadata["tunit"] = axis_unit["T"]
    if calibration is not None:
        # ImageJ's own linear calibration (Calibration.STRAIGHT_LINE == 0).
        metadata.update(cf=0, c0=calibration.offset, c1=calibration.slope)
    if colour is not None:
        rgb = [int(colour[i : i + 2], 16) for i in (0, 2, 4)]
        ramp = np.linspace(0.0, 1.0, 256)
        lut = np.rint(np.outer(rgb, ramp)).astype(np.uint8)  # (3, 256): ImageJ's layout
        metadata["LUTs"] = [lut] * (stored.shape[axes.index("C")] if "C" in axes else 1)
    if provenance is not None:
        # Compact JSON has no newlines, so it stays on one description line.
        metadata[PROVENANCE_KEY] = provenance_json(provenance)

    resolution = (1.0 / axis_scale["X"], 1.0 / axis_scale["Y"]) if axis_scale else None
    path = Path(path)
    tifffile.imwrite(path, stored, imagej=True, resolution=resolution, metadata=metadata)
    return path


def save_layer_data_tiff(
    path: str | Path,
    data: ArrayLike,
    state: Mapping[str, object],
    *,
    dtype: str | None = DEFAULT_DTYPE,
    uint16_scaling: str = DEFAULT_SCALING,
) -> Path:
    """Save an image layer's data with its state: scale, units, axis labels and provenance.

    This is the one place that turns a layer into a TIFF: :func:`save_layer_tiff` (a layer
    object), napari's writer (data plus the layer state it passes) and the headless demo (a
    layer-data tuple) all call it.

    Parameters
    ----------
    path : str or Path
        Output file (``.tif``/``.tiff``).
    data : array-like or list of arrays
        The layer data; of a multiscale layer (a list), the full-resolution level is saved.
    state : Mapping
        The layer's state as napari passes it to writers and as layer-data tuples carry it:
        ``scale``, ``units``, ``axis_labels``, ``metadata`` (with the provenance record),
        ``name``, ``rgb``, ``multiscale``, ``colormap`` (its colour is kept where it is a ramp
        from black to one colour); missing keys mean napari's defaults.
    dtype : {"float32", "uint16"} or None
        Sample type; ``None`` picks the smallest exact one: uint16 for integer or boolean data
        within 0..65535, float32 otherwise.
    uint16_scaling : {"clip", "minmax"}
        See :func:`save_tiff`.

    Returns
    -------
    Path
        The written file.

    Raises
    ------
    ValueError
        RGB layers, or what :func:`save_tiff` refuses.

    Examples
    --------
    >>> import tempfile
    >>> from napari_gpuscope.export.tiff_read import read_tiff
    >>> folder = Path(tempfile.mkdtemp())
    >>> state = {"scale": (0.1, 0.1), "units": ("um", "um"), "axis_labels": ("y", "x")}
    >>> counts = np.arange(20, dtype=np.int64).reshape(4, 5)
    >>> contents = read_tiff(save_layer_data_tiff(folder / "a.tif", counts, state, dtype=None))
    >>> contents.data.dtype, contents.scale, contents.units
    (dtype('uint16'), (0.1, 0.1), ('um', 'um'))
    """
    if state.get("rgb"):
        name = state.get("name", "image")
        raise ValueError(f"Layer {name!r} is RGB; only intensity images can be saved as TIFF.")
    if state.get("multiscale") or isinstance(data, list | tuple):
        data = data[0]
    array = np.asarray(data)
    units = state.get("units")
    metadata = state.get("metadata") or {}
    return save_tiff(
        path,
        array,
        scale=state.get("scale"),
        units=tuple(units) if units is not None else None,
        axes=axes_from_labels(state.get("axis_labels") or (), array.ndim),
        provenance=metadata.get(PROVENANCE_KEY),
        dtype=smallest_exact_dtype(array) if dtype is None else dtype,
        uint16_scaling=uint16_scaling,
        colour=colormap_hex(state.get("colormap")),
    )


def save_layer_tiff(
    layer: Layer,
    path: str | Path,
    *,
    dtype: str = DEFAULT_DTYPE,
    uint16_scaling: str = DEFAULT_SCALING,
) -> Path:
    """Save a napari image layer with its scale, units, axis labels and provenance.

    Parameters
    ----------
    layer : napari.layers.Image
        The layer; multiscale layers are saved at full resolution. RGB layers are refused.
    path : str or Path
        Output file.
    dtype, uint16_scaling : str
        See :func:`save_tiff`.

    Returns
    -------
    Path
        The written file.

    Examples
    --------
    >>> save_layer_tiff(viewer.layers["TV denoised · cells [s=1]"], "cells.tif")  # doctest: +SKIP
    PosixPath('cells.tif')
    """
    state = {
        "name": layer.name,
        "rgb": getattr(layer, "rgb", False),
        "multiscale": getattr(layer, "multiscale", False),
        "scale": tuple(layer.scale),
        "units": getattr(layer, "units", None),
        "axis_labels": getattr(layer, "axis_labels", ()),
        "metadata": layer.metadata,
        "colormap": getattr(layer, "colormap", None),
    }
    return save_layer_data_tiff(path, layer.data, state, dtype=dtype, uint16_scaling=uint16_scaling)
