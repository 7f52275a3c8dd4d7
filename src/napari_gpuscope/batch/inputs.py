"""Batch inputs: the positions of an experiment, their facts and their identity.

An INPUT is a glob of TIFF files (one position per file, named by the file's stem), an OME-Zarr
image (one position), an OME-Zarr HCS plate (one position per field, named ``<row><col>-<field>``,
e.g. ``B03-0``) or a plain Zarr group of OME-Zarr images (e.g. an earlier batch output: one
position per image group).

A position's *identity* is what a completion marker is keyed on besides the recipe: the file's
absolute path, size and modification time (TIFF), or the image array's path, shape, dtype and the
modification time of its metadata (Zarr). Replacing a file therefore recomputes its position.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tifffile import TiffFile

    from napari_gpuscope.compute._types import ArrayLike, JSONDict

import numpy as np

__all__ = ["InputError", "InputInfo", "Position", "discover", "discover_all", "safe_name"]


class InputError(ValueError):
    """The INPUT names nothing usable; the message says what was looked for."""


@dataclass(frozen=True)
class InputInfo:
    """Facts read from a position's metadata (no pixels read).

    Attributes
    ----------
    shape : tuple of int
    dtype : str
    axes : tuple of str or None
        Lower-case axis labels (``"t"``, ``"c"``, ``"z"``, ``"y"``, ``"x"``) when known.
    pixel_size : tuple of float or None
        Physical step per axis when known.
    units : tuple of str or None
    """

    shape: tuple[int, ...]
    dtype: str
    axes: tuple[str, ...] | None = None
    pixel_size: tuple[float | None, ...] | None = None
    units: tuple[str | None, ...] | None = None

    def geometry_kwargs(self) -> dict[str, tuple[float, ...] | tuple[str, ...]]:
        """Layer kwargs (``scale``, ``units``, ``axis_labels``) for ``result.layers()``.

        An axis without a unit (an ImageJ TIFF's time axis) is in ``"pixel"`` (napari's own
        word for none; no NGFF unit is written for it), so the axes that have one keep it.

        Examples
        --------
        >>> info = InputInfo((5, 8, 8), "uint16", ("t", "y", "x"), (1.0, 0.1, 0.1),
        ...                  (None, "um", "um"))
        >>> info.geometry_kwargs()["units"]
        ('pixel', 'um', 'um')
        """
        kwargs: dict[str, tuple[float, ...] | tuple[str, ...]] = {}
        if self.pixel_size is not None and all(p is not None for p in self.pixel_size):
            kwargs["scale"] = tuple(float(p) for p in self.pixel_size)  # type: ignore[arg-type]
            if self.units is not None and any(self.units):
                kwargs["units"] = tuple(u or "pixel" for u in self.units)
        if self.axes is not None:
            kwargs["axis_labels"] = tuple(self.axes)
        return kwargs


@dataclass(frozen=True)
class Position:
    """One unit of batch work: a TIFF file or an OME-Zarr image.

    Attributes
    ----------
    name : str
        Output group name (``OUT.zarr/<name>/``): letters, digits, ``._-``.
    kind : {"tiff", "zarr"}
    path : str
        The TIFF file, or the OME-Zarr image group.
    array : str
        The full-resolution array inside the image group (Zarr only).
    """

    name: str
    kind: str
    path: str
    array: str = ""

    @property
    def source(self) -> str:
        """Where the pixels come from, for provenance and messages."""
        return self.path if self.kind == "tiff" else f"{self.path}/{self.array}"

    def identity(self) -> str:
        """What a completion marker is keyed on besides the recipe (see the module docstring)."""
        if self.kind == "tiff":
            stat = os.stat(self.path)
            return f"tiff:{os.path.abspath(self.path)}:{stat.st_size}:{stat.st_mtime_ns}"
        info = self.info()
        meta = _zarr_meta_file(Path(self.path) / self.array)
        mtime = os.stat(meta).st_mtime_ns if meta is not None else 0
        return f"zarr:{os.path.abspath(self.source)}:{info.shape}:{info.dtype}:{mtime}"

    def info(self) -> InputInfo:
        """Shape, dtype, axes and pixel size from the metadata."""
        if self.kind == "tiff":
            return _tiff_info(self.path)
        return _zarr_info(self.path, self.array)

    def open(self) -> ArrayLike:
        """The position's pixels for a job, read lazily where possible: the Zarr array itself
        (a method reads it chunk by chunk, e.g. eSRRF frames), a read-only memory map of an
        uncompressed TIFF, else the array read into memory."""
        if self.kind == "zarr":
            import zarr

            return zarr.open_array(str(Path(self.path) / self.array), mode="r")
        import tifffile

        try:
            return tifffile.memmap(self.path, mode="r")
        except ValueError:  # compressed or not contiguous: read it
            return self.read()

    def read(self) -> np.ndarray:
        """The position's pixels (the whole full-resolution array)."""
        if self.kind == "tiff":
            import tifffile

            with tifffile.TiffFile(self.path) as tif:
                return tif.series[0].asarray()
        import zarr

        return np.asarray(zarr.open_array(str(Path(self.path) / self.array), mode="r")[...])


def safe_name(name: str) -> str:
    """A group name from a file stem: characters other than letters, digits, ``._-`` become
    ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".")
    return cleaned or "position"


def discover(spec: str | os.PathLike[str], *, unique: bool = True) -> list[Position]:
    """The positions an INPUT names, in a stable order.

    Parameters
    ----------
    spec : str or PathLike
        A glob of TIFF files (``"data/*.tif"``), an OME-Zarr image or plate, or a Zarr group of
        OME-Zarr images.
    unique : bool
        Refuse two positions of one name (default); False lists them (a watch refuses each).

    Returns
    -------
    list of Position

    Raises
    ------
    InputError
        Nothing matches, names collide, or the Zarr group is neither an image nor a plate.

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np, tifffile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("b", "a"):
    ...     tifffile.imwrite(folder / f"{name}.tif", np.zeros((4, 4), np.uint16))
    >>> [p.name for p in discover(str(folder / "*.tif"))]
    ['a', 'b']
    """
    text = os.fspath(spec)
    path = Path(text)
    if path.is_dir() and _zarr_meta_file(path) is not None:
        positions = _zarr_positions(path)
    elif path.is_dir():
        raise InputError(
            f"INPUT {text!r} is a folder but not a Zarr group; for TIFF files give a glob, "
            f"e.g. '{text.rstrip('/')}/*.tif'"
        )
    else:
        files = sorted(
            f
            for f in glob.glob(text)
            if f.lower().endswith((".tif", ".tiff")) and Path(f).is_file()
        )
        if not files:
            raise InputError(f"INPUT {text!r} matches no TIFF file (*.tif, *.tiff)")
        positions = [Position(safe_name(Path(f).stem), "tiff", f) for f in files]
    return checked_unique(positions) if unique else positions


def discover_all(specs: Sequence[str | os.PathLike[str]], *, unique: bool = True) -> list[Position]:
    """The positions of several INPUTs (as :func:`discover`'s), each once.

    A shell expands an unquoted glob into its files, so ``data/*.tif`` quoted or not, or the
    files named one by one, give the same positions in the same order: TIFF files are sorted
    by path as one glob's are, Zarr positions follow in the order given. ``unique``: as for
    :func:`discover`.

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np, tifffile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("b", "a"):
    ...     tifffile.imwrite(folder / f"{name}.tif", np.zeros((4, 4), np.uint16))
    >>> [p.name for p in discover_all([str(folder / "b.tif"), str(folder / "*.tif")])]
    ['a', 'b']
    """
    if not specs:
        raise InputError("no INPUT given: name TIFF files, a glob, an OME-Zarr image or a plate")
    listed = (p for spec in specs for p in discover(spec, unique=unique))
    found = {(p.kind, os.path.abspath(p.source)): p for p in listed}
    tiffs = sorted((p for p in found.values() if p.kind == "tiff"), key=lambda p: p.source)
    positions = tiffs + [p for p in found.values() if p.kind != "tiff"]
    return checked_unique(positions) if unique else positions


def checked_unique(positions: list[Position]) -> list[Position]:
    """``positions``, refused (:class:`InputError`, ``run``'s words) when two have one name."""
    seen: dict[str, str] = {}
    for position in positions:
        if position.name in seen:
            raise InputError(
                f"two inputs map to the position name {position.name!r}: "
                f"{seen[position.name]!r} and {position.source!r}; rename one"
            )
        seen[position.name] = position.source
    return positions


# ---------------------------------------------------------------------------------- TIFF
def _tiff_info(path: str) -> InputInfo:
    import tifffile

    with tifffile.TiffFile(path) as tif:
        series = tif.series[0]
        shape, dtype = tuple(series.shape), str(series.dtype)
        axes = tuple(a.lower() for a in series.axes.replace("S", "C").replace("I", "T"))
        if len(axes) != len(shape):
            axes = None
        pixel_size, units = _tiff_pixel_size(tif, axes)
    return InputInfo(shape, dtype, axes, pixel_size, units)


def _tiff_pixel_size(
    tif: TiffFile, axes: tuple[str, ...] | None
) -> tuple[tuple[float | None, ...] | None, tuple[str | None, ...] | None]:
    """Pixel size from the resolution tags (x, y) and ImageJ's ``spacing`` (z)."""
    if axes is None:
        return None, None
    page = tif.pages[0]
    imagej = tif.imagej_metadata or {}
    unit = imagej.get("unit")
    steps: dict[str, float] = {}
    for axis, tag in (("x", "XResolution"), ("y", "YResolution")):
        value = page.tags.get(tag)
        if value is not None:
            num, den = value.value
            if num and (num, den) != (1, 1):
                steps[axis] = den / num
    if "spacing" in imagej:
        steps["z"] = float(imagej["spacing"])
    if not steps:
        return None, None
    sizes = tuple(steps.get(a, 1.0 if a in "ct" else None) for a in axes)
    units = tuple((unit if a in steps else None) for a in axes) if unit else None
    return sizes, units


# ---------------------------------------------------------------------------------- Zarr
def _zarr_meta_file(path: Path) -> Path | None:
    for name in ("zarr.json", ".zattrs", ".zgroup", ".zarray"):
        if (path / name).is_file():
            return path / name
    return None


def _ome_attrs(path: Path) -> JSONDict:
    """The OME attributes of a group (NGFF 0.5 ``attributes.ome`` or 0.4 ``.zattrs``)."""
    for name in ("zarr.json", ".zattrs"):
        file = path / name
        if not file.is_file():
            continue
        try:
            attrs = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            message = f"{file}: unreadable Zarr metadata ({exc}); fix or replace it"
            raise InputError(message) from None
        if not isinstance(attrs, dict):
            raise InputError(f"{file}: Zarr metadata is not a JSON object; fix or replace it")
        if name == "zarr.json":
            attrs = attrs.get("attributes", {})
            attrs = attrs.get("ome", attrs) if isinstance(attrs, dict) else {}
        return attrs if isinstance(attrs, dict) else {}
    return {}


def _zarr_positions(root: Path) -> list[Position]:
    attrs = _ome_attrs(root)
    if "multiscales" in attrs:
        return [_image_position(root, root.name.removesuffix(".zarr") or "image")]
    if "plate" in attrs:
        return _plate_positions(root, attrs["plate"])
    children = sorted(
        child for child in root.iterdir() if child.is_dir() and "multiscales" in _ome_attrs(child)
    )
    if not children:
        raise InputError(
            f"{str(root)!r} is a Zarr group but neither an OME-Zarr image, a plate, nor a group "
            "of OME-Zarr images"
        )
    return [_image_position(child, safe_name(child.name)) for child in children]


def _plate_positions(root: Path, plate: object) -> list[Position]:
    wells = plate.get("wells", []) if isinstance(plate, dict) else None
    if not isinstance(wells, list):
        raise InputError(f"{_meta_name(root)}: the plate's 'wells' is not a list; fix the plate")
    positions = []
    for index, well in enumerate(wells):
        if not isinstance(well, dict) or not isinstance(well.get("path"), str):
            raise InputError(
                f"{_meta_name(root)}: well {index} of the plate has no 'path'; fix the plate's "
                "metadata (each well names its folder, e.g. 'A/1')"
            )
        well_path = root / well["path"]
        well_attrs = _ome_attrs(well_path).get("well")
        images = well_attrs.get("images", []) if isinstance(well_attrs, dict) else []
        for field_index, image in enumerate(images if isinstance(images, list) else []):
            if not isinstance(image, dict) or not isinstance(image.get("path"), str):
                raise InputError(
                    f"{_meta_name(well_path)}: field {field_index} of well {well['path']!r} has "
                    "no 'path'; fix the well's metadata"
                )
            name = safe_name(f"{well['path'].replace('/', '')}-{image['path']}")
            positions.append(_image_position(well_path / image["path"], name))
    if not positions:
        raise InputError(f"the OME-Zarr plate {str(root)!r} lists no fields")
    return positions


def _meta_name(path: Path) -> str:
    """The metadata file of a group, for messages."""
    return str(_zarr_meta_file(path) or path)


def _image_position(path: Path, name: str) -> Position:
    try:
        multiscales = _ome_attrs(path)["multiscales"][0]
        array = multiscales["datasets"][0]["path"]
    except (KeyError, IndexError, TypeError, ValueError, OSError):
        raise InputError(
            f"{_meta_name(path)}: not a readable OME-Zarr image (its 'multiscales' needs at "
            "least one entry whose 'datasets' lists at least one array with a 'path'); fix "
            "its metadata or leave it out of INPUT"
        ) from None
    if not isinstance(array, str):
        raise InputError(f"{_meta_name(path)}: the first dataset's 'path' is not a string")
    return Position(safe_name(name), "zarr", str(path), array)


def _zarr_info(path: str, array: str) -> InputInfo:
    import zarr

    data = zarr.open_array(str(Path(path) / array), mode="r")
    multiscales = _ome_attrs(Path(path))["multiscales"][0]
    axes_meta = multiscales.get("axes")
    axes = units = None
    if axes_meta:
        axes = tuple((a["name"] if isinstance(a, dict) else a).lower() for a in axes_meta)
        units = tuple((a.get("unit") if isinstance(a, dict) else None) for a in axes_meta)
    pixel_size = None
    for dataset in multiscales["datasets"]:
        if dataset["path"] == array:
            for transform in dataset.get("coordinateTransformations", []):
                if transform.get("type") == "scale":
                    pixel_size = tuple(float(s) for s in transform["scale"])
    return InputInfo(tuple(data.shape), str(data.dtype), axes, pixel_size, units)
