"""ImageJ-compatible TIFF files that keep pixel size, units, axes and provenance.

Files are written with :func:`tifffile.imwrite` in ImageJ hyperstack mode, so Fiji/ImageJ opens
them with the right calibration:

- pixel size as the X/Y resolution tags (``1 / scale``) with ``unit=`` in the description;
- Z spacing as ``spacing=``, the frame interval as ``finterval=`` (and ``tunit=`` for its unit);
- axes in ImageJ order (``TZCYX``);
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
      :func:`read_tiff` recovers them to within one quantisation step (``slope``).

ImageJ drops axes of length 1, so a ``(1, Y, X)`` stack is read back as ``YX``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.compute.params import Params, param
from napari_gpuscope.provenance import PROVENANCE_KEY, provenance_json

if TYPE_CHECKING:
    from napari.layers import Layer

    from napari_gpuscope.compute._types import ArrayLike, JSONDict, JSONValue

__all__ = [
    "DTYPES",
    "UINT16_SCALINGS",
    "TiffContents",
    "TiffOptions",
    "TiffScaling",
    "axes_from_labels",
    "read_tiff",
    "save_layer_data_tiff",
    "save_layer_tiff",
    "save_tiff",
]


class TiffOptions(Params):
    """Sample type and uint16 scaling of a TIFF file (see the module docstring).

    Examples
    --------
    >>> TiffOptions(dtype="uint16").uint16_scaling
    'clip'
    >>> try:
    ...     TiffOptions(dtype="uint8")
    ... except ValueError as error:
    ...     print(error)
    TiffOptions.dtype must be one of 'float32', 'uint16', got 'uint8'
    """

    dtype: str = param(
        "float32",
        choices=("float32", "uint16"),
        label="Sample type",
        help="Sample type of the file: float32 keeps intensities exactly",
    )
    uint16_scaling: str = param(
        "clip",
        choices=("clip", "minmax"),
        label="uint16 scaling",
        help="How values become uint16: clip to 0..65535, or map [min, max] onto it",
    )


DTYPES = tuple(TiffOptions.info("dtype").choices or ())
UINT16_SCALINGS = tuple(TiffOptions.info("uint16_scaling").choices or ())
_DEFAULT_DTYPE: str = TiffOptions.info("dtype").default
_DEFAULT_SCALING: str = TiffOptions.info("uint16_scaling").default

_IMAGEJ_ORDER = "TZCYX"
_DEFAULT_AXES = {2: "YX", 3: "ZYX", 4: "TZYX", 5: "TZCYX"}
_UINT16_MAX = 65535

# napari axis labels (lower-cased) -> ImageJ axis letters.
_LABEL_TO_AXIS = {
    "t": "T",
    "time": "T",
    "z": "Z",
    "c": "C",
    "channel": "C",
    "channels": "C",
    "y": "Y",
    "x": "X",
}

# pint unit names -> the ASCII spellings ImageJ understands ("um" is shown as µm by ImageJ).
_UNIT_ALIASES = {
    "micrometer": "um",
    "micron": "um",
    "µm": "um",
    "nanometer": "nm",
    "millimeter": "mm",
    "centimeter": "cm",
    "meter": "m",
    "angstrom": "A",
    "pixel": "pixel",
    "second": "s",
    "millisecond": "ms",
    "microsecond": "us",
    "minute": "min",
    "hour": "h",
}


@dataclass(frozen=True)
class TiffScaling:
    """Linear calibration of stored integers: ``value = offset + slope * stored``.

    Attributes
    ----------
    slope : float
        Physical value of one stored count (one quantisation step).
    offset : float
        Physical value of a stored 0.
    """

    slope: float
    offset: float

    def apply(self, stored: np.ndarray) -> np.ndarray:
        """Convert stored integers to calibrated float64 values."""
        return self.offset + self.slope * np.asarray(stored, dtype=np.float64)


@dataclass(frozen=True)
class TiffContents:
    """What :func:`read_tiff` found in a file.

    Attributes
    ----------
    data : numpy.ndarray
        Pixel data as stored (float32 or uint16), axes in ImageJ order.
    axes : str
        One letter per axis of ``data``, e.g. ``"ZYX"``.
    scale : tuple of float
        Pixel spacing per axis (1.0 where the file does not say; always 1.0 for ``C``).
    units : tuple of str or None
        Unit per axis (``None`` where the file does not say).
    provenance : dict or list or None
        The provenance record embedded by :func:`save_tiff`, if any.
    scaling : TiffScaling or None
        Linear calibration of uint16 data saved with ``uint16_scaling="minmax"``.
    """

    data: np.ndarray
    axes: str
    scale: tuple[float, ...]
    units: tuple[str | None, ...]
    provenance: JSONDict | list[JSONValue] | None
    scaling: TiffScaling | None

    def calibrated_data(self) -> np.ndarray:
        """Pixel values in intensity units (applies :attr:`scaling` when present)."""
        if self.scaling is None:
            return self.data
        return self.scaling.apply(self.data)


def _unit_name(unit: object) -> str | None:
    if unit is None:
        return None
    name = str(unit).strip()
    if not name:
        return None
    return _UNIT_ALIASES.get(name.lower(), _UNIT_ALIASES.get(name, name))


def axes_from_labels(labels: Sequence[str], ndim: int | None = None) -> str:
    """Map napari axis labels (``t``, ``z``, ``c``, ``y``, ``x``) to ImageJ axis letters.

    Parameters
    ----------
    labels : sequence of str
        napari ``layer.axis_labels``.
    ndim : int, optional
        Number of axes; defaults to ``len(labels)``.

    Returns
    -------
    str
        Axis letters, or the default for ``ndim`` (``YX``, ``ZYX``, ``TZYX``, ``TZCYX``) when
        the labels are napari's defaults (``"-2"``, ``"-1"``...) or not recognised.
    """
    ndim = len(labels) if ndim is None else ndim
    letters = [_LABEL_TO_AXIS.get(str(label).strip().lower()) for label in labels]
    if len(letters) == ndim and all(letters) and len(set(letters)) == ndim:
        return "".join(letters)  # type: ignore[arg-type]
    return _default_axes(ndim)


def _default_axes(ndim: int) -> str:
    try:
        return _DEFAULT_AXES[ndim]
    except KeyError:
        raise ValueError(f"TIFF export supports 2 to 5 dimensions, got {ndim}.") from None


def _validate_axes(axes: str, ndim: int) -> str:
    axes = axes.upper()
    if len(axes) != ndim:
        raise ValueError(f"axes {axes!r} has {len(axes)} letters but the data has {ndim} axes.")
    if set(axes) - set(_IMAGEJ_ORDER) or len(set(axes)) != ndim:
        raise ValueError(
            f"axes {axes!r} must use each of the letters {_IMAGEJ_ORDER!r} at most once."
        )
    if not axes.endswith("YX"):
        raise ValueError(f"axes {axes!r} must end with 'YX' (the image plane).")
    return axes


def _per_axis(value: object, ndim: int, name: str) -> list[object] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray):
        return [value] * ndim
    values = list(value)
    if len(values) != ndim:
        raise ValueError(f"{name} has {len(values)} entries but the data has {ndim} axes.")
    return values


def _to_uint16(data: np.ndarray, scaling: str) -> tuple[np.ndarray, TiffScaling | None]:
    if data.size and not np.all(np.isfinite(data)):
        raise ValueError(
            "Data contain NaN or infinite values, which uint16 cannot represent; "
            "save as float32 instead."
        )
    if scaling == "clip":
        # float64 first: rint of small integer types gives float16, which cannot hold 65535.
        values = np.rint(data.astype(np.float64))
        return np.clip(values, 0, _UINT16_MAX).astype(np.uint16), None
    low = float(data.min()) if data.size else 0.0
    high = float(data.max()) if data.size else 0.0
    # A constant image keeps a unit slope so the calibration stays invertible.
    slope = (high - low) / _UINT16_MAX if high > low else 1.0
    stored = np.clip(np.rint((data.astype(np.float64) - low) / slope), 0, _UINT16_MAX)
    return stored.astype(np.uint16), TiffScaling(slope=slope, offset=low)


def save_tiff(
    path: str | Path,
    data: ArrayLike,
    *,
    scale: Sequence[float] | None = None,
    units: str | Sequence[object] | None = None,
    axes: str | None = None,
    provenance: Mapping[str, object] | Sequence[object] | None = None,
    dtype: str = _DEFAULT_DTYPE,
    uint16_scaling: str = _DEFAULT_SCALING,
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
    axes = _validate_axes(axes, ndim) if axes is not None else _default_axes(ndim)
    scales = _per_axis(scale, ndim, "scale")
    if isinstance(units, str):
        # One unit string describes space; it must not turn into a time unit for T.
        units = [units if letter in "ZYX" else None for letter in axes]
    unit_names = [_unit_name(u) for u in _per_axis(units, ndim, "units") or [None] * ndim]

    # ImageJ needs TZCYX order; transpose the metadata together with the pixels.
    order = sorted(range(ndim), key=lambda i: _IMAGEJ_ORDER.index(axes[i]))
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
        stored, calibration = _to_uint16(array, uint16_scaling)

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
    if provenance is not None:
        # Compact JSON has no newlines, so it stays on one description line.
        metadata[PROVENANCE_KEY] = provenance_json(provenance)

    resolution = (1.0 / axis_scale["X"], 1.0 / axis_scale["Y"]) if axis_scale else None
    path = Path(path)
    tifffile.imwrite(path, stored, imagej=True, resolution=resolution, metadata=metadata)
    return path


def _smallest_exact_dtype(array: np.ndarray) -> str:
    """uint16 for integers (and booleans) within 0..65535, which it stores exactly; else float32."""
    if array.dtype.kind in "biu" and array.size:
        low, high = int(array.min()), int(array.max())
        if low >= 0 and high <= _UINT16_MAX:
            return "uint16"
    return "float32"


def save_layer_data_tiff(
    path: str | Path,
    data: ArrayLike,
    state: Mapping[str, object],
    *,
    dtype: str | None = _DEFAULT_DTYPE,
    uint16_scaling: str = _DEFAULT_SCALING,
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
        ``name``, ``rgb``, ``multiscale``; missing keys mean napari's defaults.
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
        dtype=_smallest_exact_dtype(array) if dtype is None else dtype,
        uint16_scaling=uint16_scaling,
    )


def save_layer_tiff(
    layer: Layer,
    path: str | Path,
    *,
    dtype: str = _DEFAULT_DTYPE,
    uint16_scaling: str = _DEFAULT_SCALING,
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
    }
    return save_layer_data_tiff(path, layer.data, state, dtype=dtype, uint16_scaling=uint16_scaling)


def read_tiff(path: str | Path) -> TiffContents:
    """Read a TIFF written by :func:`save_tiff` (or any ImageJ TIFF).

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    TiffContents
        Data as stored plus calibration, axes, units, provenance and uint16 scaling.
    """
    import tifffile

    with tifffile.TiffFile(path) as tif:
        series = tif.series[0]
        data = series.asarray()
        axes = series.axes.upper()
        info: dict[str, object] = dict(tif.imagej_metadata or {})
        page = tif.pages.first
        tags = page.tags
        xres = tags["XResolution"].value if "XResolution" in tags else None
        yres = tags["YResolution"].value if "YResolution" in tags else None

    def spacing_from(resolution: tuple[int, int] | None) -> float:
        if not resolution or not resolution[0] or not resolution[1]:
            return 1.0
        return resolution[1] / resolution[0]  # pixels per unit -> units per pixel

    plane_unit = info.get("unit")
    plane_unit = None if plane_unit in (None, "") else str(plane_unit)
    scale_of = {
        "X": spacing_from(xres),
        "Y": spacing_from(yres),
        "Z": float(info.get("spacing", 1.0)),
        "T": float(info.get("finterval", 1.0)),
        "C": 1.0,
    }
    unit_of = {
        "X": plane_unit,
        "Y": plane_unit,
        "Z": str(info["zunit"]) if info.get("zunit") else plane_unit,
        "T": str(info["tunit"]) if info.get("tunit") else None,
        "C": None,
    }

    scaling = None
    if data.dtype.kind in "iu" and str(info.get("cf", "")) == "0" and "c1" in info:
        scaling = TiffScaling(slope=float(info["c1"]), offset=float(info.get("c0", 0.0)))

    provenance = None
    if PROVENANCE_KEY in info:
        provenance = json.loads(str(info[PROVENANCE_KEY]))

    return TiffContents(
        data=data,
        axes=axes,
        scale=tuple(scale_of.get(a, 1.0) for a in axes),
        units=tuple(unit_of.get(a) for a in axes),
        provenance=provenance,
        scaling=scaling,
    )
