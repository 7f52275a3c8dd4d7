"""napari reader of batch results: a store's root or one position, at its true scale, with
provenance.

``napari OUT.zarr/<position>`` opens the position (:mod:`.reader_position`: its result, extra
layers and drift track, each at the pixel size, axis labels and units of its OME-Zarr metadata,
with its provenance); ``napari OUT.zarr`` opens every position of a small store
(:mod:`.reader_store`). napari's built-in reader ignores the OME-Zarr scale (0.1 um pixels shown
at 1), which is why the plugin contributes its own. Only folders this package wrote are claimed
(:mod:`.reader_layout`): any other path gets ``None`` and napari asks its other readers.

napari's entry point is :func:`napari_gpuscope.napari_reader.get_reader`, which also records
napari's reader preference for the store (napari asks which reader to use for a folder until
one is preferred); this module imports no napari, as the whole batch package (its workers run
without a GUI).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.reader_layout import group_attributes, store_positions
from napari_gpuscope.batch.reader_position import DRIFT_FILE, DamagedPosition, read_position
from napari_gpuscope.batch.reader_store import read_store

if TYPE_CHECKING:
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["DRIFT_FILE", "DamagedPosition", "get_reader", "read_position", "read_store"]


def get_reader(path: str | list[str]) -> Callable[[str], list[LayerDataTuple]] | None:
    """:func:`read_position` for a position group of a batch store, :func:`read_store` for a
    store's root, else None; never raises.

    Examples
    --------
    >>> get_reader("/nowhere/out.zarr/A01") is None
    True
    """
    if isinstance(path, list):
        if len(path) != 1:
            return None
        path = path[0]
    if not isinstance(path, (str, Path)):
        return None
    folder = Path(path)
    if group_attributes(folder) is not None:
        return read_position
    return read_store if store_positions(folder) else None
