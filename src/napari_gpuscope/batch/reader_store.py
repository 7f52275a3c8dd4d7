"""Opening a batch store's root in napari: every position of a small store, each named by it.

``napari OUT.zarr`` opens each position as
:func:`~napari_gpuscope.batch.reader_position.read_position`
opens it (result, extra layers, drift track; each at its own scale), the first position as it
would open alone and the others hidden: the positions of a plate are different fields of view
at the same coordinates, so shown together they would only cover each other (napari's grid
mode, or the eye icons, show them side by side or one by one). Every layer's name names its
position. A store of more than :data:`MAX_POSITIONS` positions opens nothing: the
:class:`TooManyPositions` error lists them and says how to open one.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.reader_layout import store_positions
from napari_gpuscope.batch.reader_position import read_position

if TYPE_CHECKING:
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["MAX_POSITIONS", "TooManyPositions", "read_store"]

MAX_POSITIONS = 16
"""The most positions a store's root opens at once (a few rows of a plate); a larger store is
opened one position at a time."""

_LISTED = 48
"""The most position names an error message lists."""


class TooManyPositions(ValueError):
    """A store's root holds more positions than :data:`MAX_POSITIONS`; the message lists them
    and says how to open one."""


def _listing(positions: list[str]) -> str:
    shown = ", ".join(positions[:_LISTED])
    more = f" and {len(positions) - _LISTED} more" if len(positions) > _LISTED else ""
    return f"{shown}{more}"


def _named(layer: LayerDataTuple, position: str, visible: bool) -> LayerDataTuple:
    """``layer`` with its position in its name (when the run's name lacks it) and hidden
    unless ``visible``."""
    data, kwargs, kind = layer
    kwargs = dict(kwargs)
    name = str(kwargs.get("name") or "")
    if position not in name:
        kwargs["name"] = f"{name} ({position})" if name else position
    if not visible:
        kwargs["visible"] = False
    return data, kwargs, kind


def read_store(path: str | list[str]) -> list[LayerDataTuple]:
    """Every position of the store at ``path`` (its root), in name order.

    Returns
    -------
    list of tuple
        napari layer-data tuples: the first position's as it opens alone, the others' hidden.

    Raises
    ------
    TooManyPositions
        More than :data:`MAX_POSITIONS` positions; nothing is opened.
    ValueError
        No position could be read (each one's error is named); a damaged position among
        readable ones is named in a warning and the rest open.
    """
    root = Path(path[0] if isinstance(path, list) else path)
    positions = store_positions(root)
    if not positions:
        raise ValueError(f"{root} is not the root of a napari-gpuscope batch store")
    if len(positions) > MAX_POSITIONS:
        raise TooManyPositions(
            f"{root} holds {len(positions)} positions, more than the {MAX_POSITIONS} opened at "
            f"once; open one position's folder instead, e.g. `napari {root / positions[0]}` "
            f"(viewer.open('{root / positions[0]}') in a script). Its positions: "
            f"{_listing(positions)}"
        )
    layers: list[LayerDataTuple] = []
    skipped: list[str] = []
    for position in positions:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                opened = read_position(str(root / position))
            except ValueError as exc:  # nothing of it readable: the others still open
                skipped.append(f"position {position!r} not opened: {exc}")
                continue
        skipped.extend(str(w.message) for w in caught)
        first = not layers
        layers.extend(_named(layer, position, visible=first) for layer in opened)
    if not layers:
        raise ValueError(f"{root}: no position could be opened: " + "; ".join(skipped))
    if skipped:
        warnings.warn("; ".join(skipped), stacklevel=2)
    return layers
