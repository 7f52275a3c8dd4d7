"""The pymmcore-plus cores of this Python session that a dock can follow.

A dock offers the cores a script registered (:func:`register_core`) and pymmcore-plus's global
core (``CMMCorePlus.instance()``, the one napari-micromanager drives) once one exists. Nothing
here imports pymmcore-plus: a session that never loaded it has no core to offer.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

__all__ = ["register_core", "session_cores", "unregister_core"]

_registered: dict[str, weakref.ref[Any]] = {}
_lock = threading.Lock()


def register_core(core: Any, name: str | None = None) -> str:
    """Offer ``core`` to the docks' Live part under ``name``; returns the name used.

    The registry holds the core weakly: a core the script drops leaves the list.

    Parameters
    ----------
    core : pymmcore_plus.CMMCorePlus
        A ``CMMCorePlus`` or ``UniMMCore`` (anything with ``mda.events.frameReady``).
    name : str, optional
        What the dock shows (default: ``"core"``, numbered when taken).

    Examples
    --------
    >>> class Core:  # stands for a CMMCorePlus
    ...     class mda:
    ...         class events:
    ...             frameReady = None
    >>> core = Core()
    >>> register_core(core, "scope")
    'scope'
    >>> session_cores()["scope"] is core
    True
    >>> unregister_core(core); "scope" in session_cores()
    False
    """
    events = getattr(getattr(core, "mda", None), "events", None)
    if not hasattr(events, "frameReady"):
        raise TypeError(
            f"register_core takes a pymmcore-plus core (CMMCorePlus, UniMMCore), got "
            f"{type(core).__name__}"
        )
    with _lock:
        for known, ref in list(_registered.items()):
            if ref() is core:
                del _registered[known]
        base = name or "core"
        chosen, number = base, 2
        while chosen in _registered and _registered[chosen]() is not None:
            chosen, number = f"{base} {number}", number + 1
        _registered[chosen] = weakref.ref(core)
    return chosen


def unregister_core(core: Any) -> None:
    """Stop offering ``core`` (a registered core that is gone leaves by itself)."""
    with _lock:
        for known, ref in list(_registered.items()):
            if ref() is core:
                del _registered[known]


def session_cores() -> dict[str, Any]:
    """The cores a dock can follow, by name: the registered ones, then pymmcore-plus's global
    core (``"pymmcore-plus instance"``, napari-micromanager's) if one was made and is not
    registered under another name."""
    with _lock:
        cores = {name: core for name, ref in _registered.items() if (core := ref()) is not None}
    module = sys.modules.get("pymmcore_plus.core._mmcore_plus")
    reference = getattr(module, "_instance", None)  # the first core made, held weakly
    instance = reference() if callable(reference) else None
    if instance is not None and all(core is not instance for core in cores.values()):
        cores["pymmcore-plus instance"] = instance
    return cores
