"""Reading an ImageJ TIFF back: its data as stored, with the calibration, axes, units,
provenance and uint16 scaling that :func:`~napari_gpuscope.export.tiff.save_tiff` wrote.

ImageJ drops axes of length 1, so a ``(1, Y, X)`` stack is read back as ``YX``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.export.tiff_samples import TiffScaling
from napari_gpuscope.provenance import PROVENANCE_KEY

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict, JSONValue

__all__ = ["TiffContents", "read_tiff"]


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
