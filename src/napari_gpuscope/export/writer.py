"""The npe2 writer: File > Save Selected Layers writes one image layer as a provenance TIFF.

napari calls :func:`write_image_tiff` with the layer's data and its state (``scale``, ``units``,
``axis_labels``, ``metadata``...) when the user saves exactly one image layer to ``.tif`` or
``.tiff`` and picks this plugin's writer (``napari.yaml``, ``contributions.writers``). The file is
the same ImageJ TIFF as "Save result as TIFF": calibration, axes and the provenance record.

Sample type: integer and boolean data within ``0..65535`` is stored as uint16 (exact); all other
data as float32 (exact for float32 input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from napari_gpuscope.export.tiff import save_layer_data_tiff

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import ArrayLike

__all__ = ["WRITER_COMMAND", "write_image_tiff"]

WRITER_COMMAND = "napari-gpuscope.write_tiff"


def write_image_tiff(path: str, data: ArrayLike, attributes: Mapping[str, object]) -> list[str]:
    """Write one image layer as an ImageJ TIFF with calibration and provenance.

    Parameters
    ----------
    path : str
        Output file (``.tif``/``.tiff``), chosen in napari's save dialog.
    data : array-like or list of arrays
        The layer data (a multiscale layer's list: its full-resolution level is written).
    attributes : Mapping
        The layer state napari passes (``scale``, ``units``, ``axis_labels``, ``metadata``,
        ``rgb``, ``multiscale``, ``name``).

    Returns
    -------
    list of str
        The written path.

    Raises
    ------
    ValueError
        RGB layers, or data that is not 2D to 5D numbers.

    Examples
    --------
    napari calls it for File > Save Selected Layers; scripts can name the plugin:

    >>> viewer.layers.save("cells.tif", selected=True, plugin="napari-gpuscope")  # doctest: +SKIP
    ['cells.tif']
    """
    # dtype=None: uint16 for integer data within 0..65535 (exact), float32 otherwise.
    return [str(save_layer_data_tiff(path, data, attributes, dtype=None))]
