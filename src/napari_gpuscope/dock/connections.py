"""Connections from napari events (viewer, layers) to a widget, undone when it closes.

napari's event emitters keep a widget's bound methods as weak references and drop a callback
whose Qt object was deleted (when calling it raises "wrapped C/C++ object ... has been
deleted"). :class:`Connections` records what a widget connected so that it can disconnect all
of it itself when it closes or follows another layer, instead of waiting for that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

__all__ = ["Connections", "Emitter"]


class Emitter(Protocol):
    """A napari event emitter (``viewer.dims.events.current_step``...) or a psygnal signal."""

    def connect(self, callback: Callable[..., object]) -> object: ...

    def disconnect(self, callback: Callable[..., object]) -> object: ...


class Connections:
    """The napari event connections one widget made.

    Examples
    --------
    >>> from napari.utils.events import EmitterGroup
    >>> events = EmitterGroup(source=None, changed=None)
    >>> seen = []
    >>> links = Connections()
    >>> links.connect(events.changed, lambda event: seen.append(1))
    >>> _ = events.changed()
    >>> links.disconnect_all()
    >>> _ = events.changed()
    >>> seen
    [1]
    """

    def __init__(self) -> None:
        self._links: list[tuple[Emitter, Callable[..., object]]] = []

    def connect(self, emitter: Emitter, callback: Callable[..., object]) -> None:
        """Connect ``callback`` to a napari event emitter and remember it."""
        emitter.connect(callback)
        self._links.append((emitter, callback))

    def disconnect_all(self) -> None:
        """Disconnect everything."""
        links, self._links = self._links, []
        for emitter, callback in links:
            with contextlib.suppress(Exception):  # already gone with its source
                emitter.disconnect(callback)
