"""Type aliases of the public compute signatures: what an image argument and a device are.

Imports nothing heavy (no torch, dask or zarr): the aliases are used in annotations, which
are strings under ``from __future__ import annotations``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    import torch

__all__ = ["ArrayLike", "Device"]


@runtime_checkable
class ArrayLike(Protocol):
    """An array of pixels: a NumPy, torch, dask or zarr array, or anything with ``shape``,
    ``dtype`` and ``__array__``."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> Any: ...

    def __array__(self, *args: Any, **kwargs: Any) -> Any: ...


Device: TypeAlias = "str | torch.device"
"""A compute device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... or a ``torch.device``."""
