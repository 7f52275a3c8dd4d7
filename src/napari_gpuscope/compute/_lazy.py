"""Lazy package exports (PEP 562): a package names what it exports, a name imports its module
only when it is first used.

The method packages (one per method of the registry) export their parameter models beside
their jobs. The jobs import torch (about 2 s, more on a busy machine);
the models do not. With eager ``from ._job import ...`` lines, reading a recipe
(``napari-gpuscope recipe``, ``validate``, ``status``) or the registry's parameter models paid
for torch. With :func:`attach`, ``from napari_gpuscope.compute.tv import TVParams`` imports
``tv._params`` and what it needs, nothing else; ``from ... import denoise`` imports the job
(and torch) as before. ``__all__``, ``dir()``, ``help()`` and ``pydoc`` see every name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["attach"]


def attach(
    package: str,
    namespace: dict[str, Any],
    exports: Mapping[str, Iterable[str]],
    *,
    modules: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module ``__getattr__`` and ``__dir__`` that import exports on first use.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    namespace : dict
        The package's ``globals()``: a resolved name is stored there, so the next lookup is an
        ordinary attribute (``__getattr__`` runs once per name).
    exports : mapping of str to iterable of str
        Module (relative to ``package``, e.g. ``"._job"`` or ``"..geometry"``) -> the names it
        exports, as the package's ``from ._job import a, b`` lines were.
    modules : mapping of str to str, optional
        Names that are modules themselves, e.g. ``{"batch_hooks": "._batch"}`` for
        ``from . import _batch as batch_hooks``.

    Returns
    -------
    (__getattr__, __dir__)
        Assign them in the package: ``__getattr__, __dir__ = attach(__name__, globals(), ...)``.

    Raises
    ------
    ValueError
        A name is exported twice, or a name of the package's ``__all__`` is not exported.

    Examples
    --------
    >>> import types
    >>> package = types.ModuleType("napari_gpuscope.compute.demo")
    >>> package.__all__ = ["MAX_SPACING"]
    >>> getattr_, dir_ = attach(package.__name__, vars(package), {"..geometry": ["MAX_SPACING"]})
    >>> "MAX_SPACING" in dir_(), "MAX_SPACING" in vars(package)
    (True, False)
    >>> getattr_("MAX_SPACING") > 1, "MAX_SPACING" in vars(package)
    (True, True)
    >>> getattr_("nothing")
    Traceback (most recent call last):
    ...
    AttributeError: module 'napari_gpuscope.compute.demo' has no attribute 'nothing'
    """
    table: dict[str, tuple[str, str | None]] = {}
    for module, names in exports.items():
        for name in names:
            _add(table, package, name, (module, name))
    for name, module in (modules or {}).items():
        _add(table, package, name, (module, None))
    missing = sorted(set(namespace.get("__all__", ())) - table.keys() - namespace.keys())
    if missing:
        raise ValueError(f"{package}: __all__ names {missing}, which nothing exports")

    def __getattr__(name: str) -> Any:
        try:
            module, attribute = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = importlib.import_module(module, package)
        if attribute is not None:
            value = getattr(value, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(namespace.keys() | table.keys())

    return __getattr__, __dir__


def _add(
    table: dict[str, tuple[str, str | None]], package: str, name: str, entry: tuple[str, Any]
) -> None:
    if name in table:
        raise ValueError(f"{package}: {name!r} is exported twice ({table[name][0]}, {entry[0]})")
    table[name] = entry
