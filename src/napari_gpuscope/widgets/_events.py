"""Connections from napari events (viewer, layers) to a widget, undone when the widget goes.

napari's event emitters hold strong references to their callbacks. A dock that connects bound
methods to ``viewer.dims`` or to a layer would be called after Qt deleted it (napari then drops
the callback only after it raised). :class:`Connections` records what a widget connected and
disconnects all of it when the widget is destroyed or closed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from qtpy.QtCore import QObject

__all__ = ["Connections"]


class Connections:
    """The napari event connections one Qt object made.

    Parameters
    ----------
    owner : QObject
        Its ``destroyed`` signal disconnects everything (the slot is a plain function holding
        this object, never the owner).

    Examples
    --------
    >>> from qtpy.QtCore import QObject
    >>> from napari.utils.events import EmitterGroup
    >>> events = EmitterGroup(source=None, changed=None)
    >>> seen = []
    >>> links = Connections(QObject())
    >>> links.connect(events.changed, lambda event: seen.append(1))
    >>> _ = events.changed()
    >>> links.disconnect_all()
    >>> _ = events.changed()
    >>> seen
    [1]
    """

    def __init__(self, owner: QObject) -> None:
        self._links: list[tuple[Any, Callable[..., Any]]] = []
        links = self._links

        def forget(*_: Any) -> None:
            _disconnect(links, lambda emitter: True)

        owner.destroyed.connect(forget)

    def connect(self, emitter: Any, callback: Callable[..., Any]) -> None:
        """Connect ``callback`` to a napari event emitter and remember it."""
        emitter.connect(callback)
        self._links.append((emitter, callback))

    def disconnect_source(self, source: Any) -> None:
        """Disconnect what was connected to the emitters of ``source`` (e.g. a layer)."""
        _disconnect(self._links, lambda emitter: getattr(emitter, "source", None) is source)

    def disconnect_all(self) -> None:
        """Disconnect everything."""
        _disconnect(self._links, lambda emitter: True)


def _disconnect(links: list[tuple[Any, Callable[..., Any]]], which: Callable[[Any], bool]) -> None:
    keep = []
    for emitter, callback in links:
        if which(emitter):
            with contextlib.suppress(Exception):  # already gone with its source
                emitter.disconnect(callback)
        else:
            keep.append((emitter, callback))
    links[:] = keep
