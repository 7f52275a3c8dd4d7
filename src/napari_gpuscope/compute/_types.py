"""Type aliases of the public compute signatures: what an image argument and a device are.

Imports nothing heavy (no torch, dask or zarr): the aliases are used in annotations, which
are strings under ``from __future__ import annotations``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    import torch

__all__ = ["ArrayLike", "Device", "JSONDict", "JSONValue"]


@runtime_checkable
class ArrayLike(Protocol):
    """An array of pixels: a NumPy, torch, dask or zarr array, or anything with ``shape``,
    ``dtype`` and ``__array__``."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> object: ...

    # NumPy's own takes optional dtype and copy arguments, which a no-argument method admits.
    def __array__(self) -> object: ...


Device: TypeAlias = "str | torch.device"
"""A compute device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... or a ``torch.device``."""


JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
"""A value JSON can hold (provenance, run records, result summaries)."""

JSONDict: TypeAlias = "dict[str, JSONValue]"
"""A JSON object: a record or summary, keys are strings."""
