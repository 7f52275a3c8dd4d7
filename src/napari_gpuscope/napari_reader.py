"""napari's reader of batch stores, and the preference that makes napari use it unasked.

:func:`get_reader` is the manifest's reader command: it claims what
:func:`napari_gpuscope.batch.reader.get_reader` claims (a store's root, a position) and, once
it has opened one, saves napari's reader preference for the whole store (:func:`prefer_store`).

Why a preference: npe2 offers a folder to every reader that accepts folders, whatever its
``filename_patterns`` (those match files only), and napari's builtins reader (and
napari-ome-zarr, when installed) accept folders too. ``napari OUT.zarr``, File > Open and drag
and drop (``viewer.open(path, plugin=None)``) then ask which reader to use, unless
``settings.plugins.extension2reader`` has a pattern matching the folder; a plugin cannot
declare a priority. The one mechanism napari honours is that setting: an ``fnmatch`` pattern
against the folder's real path with a trailing separator, the most specific (an absolute
path) first. napari's reader dialog saves such an absolute pattern when a user ticks "Remember
this choice", but only for the folder opened.

:func:`prefer_store` saves one pattern per store, ``<real path of OUT.zarr>/*``, which matches
the root and every position in it (and nothing outside it), for this plugin: after a store or
one of its positions was opened with this reader once (``--plugin napari-gpuscope``, or the
reader dialog's choice), every later open of any part of it goes straight to this reader.
``napari-gpuscope run`` calls it when it finishes, and a script may call it after
``run_batch``, so that even the first open asks nothing. A pattern the user
saved for the store naming another reader is kept. (A script's ``viewer.open(path)`` names
napari's builtins reader by default: it opens a store with this one given
``plugin="napari-gpuscope"``, or ``plugin=None`` once the store is preferred.)

Lives outside :mod:`napari_gpuscope.batch`, which imports no napari (its workers run without
a GUI); napari imports this module only when it tries this reader on a folder.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch import reader
from napari_gpuscope.batch.reader_layout import store_root

if TYPE_CHECKING:
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["PLUGIN", "get_reader", "open_position", "open_store", "prefer_store", "store_pattern"]

PLUGIN = "napari-gpuscope"
"""The plugin's name, as napari's reader preferences name it."""


def store_pattern(root: str | os.PathLike[str]) -> str:
    """The ``extension2reader`` pattern of a store: its real path (``fnmatch``'s special
    characters escaped), a separator and ``*``.

    Examples
    --------
    >>> store_pattern("/data/plate[1].zarr") == os.sep.join(["", "data", "plate[[]1].zarr", "*"])
    True
    """
    return glob.escape(os.path.realpath(root)) + os.sep + "*"


def prefer_store(root: str | os.PathLike[str]) -> bool:
    """Make napari open the store at ``root`` (its root and every position) with this plugin,
    in napari's persistent settings; returns whether the preference now names this plugin.

    Nothing is changed when the user saved this store's pattern for another reader. Never
    raises (a preference is a convenience: an unwritable settings file must not stop a store
    from opening).
    """
    try:
        from napari.settings import get_settings

        plugins = get_settings().plugins
        pattern = store_pattern(Path(root))
        current = plugins.extension2reader.get(pattern)
        if current is None:
            plugins.extension2reader = {**plugins.extension2reader, pattern: PLUGIN}
            current = PLUGIN
        return current == PLUGIN
    except Exception:  # napari's settings unreadable or unwritable
        return False


def _path(path: str | list[str]) -> Path:
    return Path(path[0] if isinstance(path, list) else path)


def _prefer(path: str | list[str]) -> None:
    root = store_root(_path(path))
    if root is not None:
        prefer_store(root)


def open_position(path: str | list[str]) -> list[LayerDataTuple]:
    """:func:`~napari_gpuscope.batch.reader.read_position`; its store is then preferred."""
    layers = reader.read_position(path)
    _prefer(path)
    return layers


def open_store(path: str | list[str]) -> list[LayerDataTuple]:
    """:func:`~napari_gpuscope.batch.reader.read_store`; the store is then preferred."""
    layers = reader.read_store(path)
    _prefer(path)
    return layers


def get_reader(path: str | list[str]) -> Callable[[str], list[LayerDataTuple]] | None:
    """napari's reader hook: :func:`open_position` for a position of a batch store,
    :func:`open_store` for a store's root, else None; never raises.

    Examples
    --------
    >>> get_reader("/nowhere/out.zarr/A01") is None
    True
    """
    claimed = reader.get_reader(path)
    if claimed is reader.read_position:
        return open_position
    return open_store if claimed is reader.read_store else None
