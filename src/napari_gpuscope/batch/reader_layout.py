"""Which folders a batch run wrote: a position group, or the store's root that holds them.

One idea: recognise our folders from their metadata alone, cheaply and without raising, as
napari's ``get_reader`` must (it is asked about every folder a user opens). A position group
(``OUT.zarr/<position>``, and each layer group under its ``extra/``) has the attribute
:data:`~napari_gpuscope.batch.ngff.ATTRIBUTE` in its ``zarr.json``; the store's root is a zarr
group without it whose children include at least one position. Reading the layers is
:mod:`napari_gpuscope.batch.reader`'s business.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.ngff import ATTRIBUTE

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict

__all__ = ["group_attributes", "store_positions", "store_root"]


def _document(folder: Path) -> JSONDict | None:
    """``folder``'s ``zarr.json`` as a mapping; None when it is missing or not JSON."""
    try:
        document = json.loads((folder / "zarr.json").read_text())
    except (OSError, ValueError):  # not a folder, no zarr.json, not JSON, not UTF-8
        return None
    return document if isinstance(document, dict) else None


def group_attributes(folder: Path) -> JSONDict | None:
    """The group attributes of ``folder`` when this package wrote it (its ``zarr.json`` has
    our attribute), else None; never raises.

    Examples
    --------
    >>> group_attributes(Path("/nowhere/out.zarr/A01")) is None
    True
    """
    document = _document(folder)
    attrs = document.get("attributes") if document is not None else None
    if not isinstance(attrs, dict) or ATTRIBUTE not in attrs:
        return None
    return attrs


def store_positions(folder: Path) -> list[str]:
    """The positions of the batch store whose root is ``folder``, sorted; ``[]`` when it is
    no store's root (a position itself, another zarr group, any other folder or file).

    A position is a child group with our attribute; staging folders of a running or
    interrupted run (``.writing-*``) and other hidden entries are not, nor the layer groups
    under a position's ``extra/``. Never raises.

    Examples
    --------
    >>> store_positions(Path("/nowhere/out.zarr"))
    []
    """
    document = _document(folder)
    if document is None or document.get("node_type") != "group":
        return []
    attrs = document.get("attributes")
    if isinstance(attrs, dict) and ATTRIBUTE in attrs:
        return []  # a position (or an extra layer) is not a root
    if group_attributes(folder.parent) is not None:
        return []  # the extra/ group of a position: its children are layers, not positions
    try:
        children = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    except OSError:
        return []
    return [child.name for child in children if group_attributes(child) is not None]


def store_root(folder: Path) -> Path | None:
    """The root of the batch store ``folder`` belongs to (itself, or the parent of a
    position); None when it is no part of one. Never raises.

    Examples
    --------
    >>> store_root(Path("/nowhere/out.zarr/A01")) is None
    True
    """
    if store_positions(folder):
        return folder
    if group_attributes(folder) is not None and store_positions(folder.parent):
        return folder.parent
    return None
