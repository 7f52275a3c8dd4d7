"""The plane a live preview computes: the one the viewer shows, in whatever axis order.

A preview solves the displayed plane (for methods that couple neighbouring planes, a thin slab
around it) and shows the result as a layer with the input's dimensionality, one plane thick on
every axis that is not displayed, placed at the current position. So a z-x view previews a z-x
plane, and a preview never shows up on a plane it was not computed for.

Plain array code (the method packages' preview jobs use it, the docks call them):
:meth:`PlaneView.of` reads a viewer's and a layer's attributes and imports no napari, so it is
described by the small protocols below.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ._types import ArrayLike

if TYPE_CHECKING:
    from ._types import JSONDict
    from .results import MethodResult

__all__ = ["DataIdentity", "PlaneView", "PreviewResult", "Slab"]


class _Dims(Protocol):
    """What :meth:`PlaneView.of` reads of ``viewer.dims`` (napari's ``Dims``)."""

    @property
    def ndim(self) -> int: ...

    @property
    def displayed(self) -> Sequence[int]: ...

    @property
    def point(self) -> Sequence[float]: ...


class _Viewer(Protocol):
    """What :meth:`PlaneView.of` reads of a viewer (napari's ``Viewer``)."""

    @property
    def dims(self) -> _Dims: ...


class _Layer(Protocol):
    """What a :class:`PlaneView` reads of a layer (napari's ``Layer``)."""

    @property
    def data(self) -> ArrayLike: ...

    @property
    def scale(self) -> Sequence[float]: ...

    @property
    def translate(self) -> Sequence[float]: ...

    def world_to_data(self, position: Sequence[float]) -> Sequence[float]: ...


@dataclass(frozen=True)
class Slab:
    """Where a preview reads its input and finds its plane.

    Attributes
    ----------
    selection : tuple of int or slice
        Index into the layer data: the displayed axes whole, a few planes around the current
        one on coupled axes, the current index on uncoupled axes (those axes are dropped).
    centre : tuple of int or slice
        Index into the slab array that picks the displayed plane.
    spacing : tuple of float
        Spacing weights of the slab's axes.
    """

    selection: tuple[int | slice, ...]
    centre: tuple[int | slice, ...]
    spacing: tuple[float, ...]


@dataclass(frozen=True)
class PlaneView:
    """The displayed plane of a layer.

    Attributes
    ----------
    shape : tuple of int
        The layer's data shape.
    axes : tuple of int
        The two displayed layer axes, ascending.
    index : tuple of int
        The current data index on every axis (clamped to the shape).

    Examples
    --------
    >>> view = PlaneView(shape=(5, 6, 7), axes=(0, 2), index=(2, 3, 0))
    >>> view.slab((0.5, 1.0, 1.0), half=1)
    Slab(selection=(slice(None, None, None), slice(2, 5, None), slice(None, None, None)), \
centre=(slice(None, None, None), 1, slice(None, None, None)), spacing=(0.5, 1.0, 1.0))
    >>> view.embed(np.zeros((5, 7))).shape
    (5, 1, 7)
    """

    shape: tuple[int, ...]
    axes: tuple[int, int]
    index: tuple[int, ...]

    @classmethod
    def of(cls, viewer: _Viewer, layer: _Layer) -> PlaneView:
        """The plane of ``layer`` that ``viewer`` shows now (the last two displayed axes in a
        3D view)."""
        shape = tuple(int(n) for n in np.shape(layer.data))
        ndim = len(shape)
        offset = viewer.dims.ndim - ndim  # napari aligns layers on their trailing axes
        displayed = [axis - offset for axis in viewer.dims.displayed[-2:] if axis >= offset]
        axes = tuple(sorted(displayed)) if len(displayed) == 2 else (ndim - 2, ndim - 1)
        point = tuple(viewer.dims.point)[-ndim:]
        coords = np.asarray(layer.world_to_data(point), dtype=float)
        index = tuple(int(np.clip(round(c), 0, n - 1)) for c, n in zip(coords, shape, strict=True))
        return cls(shape, axes, index)  # type: ignore[arg-type]

    @property
    def hidden_axes(self) -> tuple[int, ...]:
        """The axes that are not displayed."""
        return tuple(a for a in range(len(self.shape)) if a not in self.axes)

    def slab(self, spacing: Sequence[float], half: int) -> Slab:
        """The slab around the plane: ``half`` planes each side on coupled hidden axes.

        Parameters
        ----------
        spacing : sequence of float
            Spacing weight of every layer axis (0 = uncoupled: only the current plane).
        half : int
            Planes on each side of the current one.
        """
        selection: list[int | slice] = []
        centre: list[int | slice] = []
        kept: list[float] = []
        for axis, n in enumerate(self.shape):
            if axis in self.axes:
                selection.append(slice(None))
                centre.append(slice(None))
                kept.append(float(spacing[axis]))
            elif spacing[axis] == 0:
                selection.append(self.index[axis])
            else:
                lo = max(0, self.index[axis] - half)
                hi = min(n, self.index[axis] + half + 1)
                selection.append(slice(lo, hi))
                centre.append(self.index[axis] - lo)
                kept.append(float(spacing[axis]))
        return Slab(tuple(selection), tuple(centre), tuple(kept))

    def embed(self, plane: np.ndarray) -> np.ndarray:
        """The plane with a length-1 axis for every hidden axis (the layer's dimensionality)."""
        return np.expand_dims(np.asarray(plane), self.hidden_axes)

    def translate(self, layer: _Layer) -> tuple[float, ...]:
        """Layer translate that puts an embedded plane at the current position."""
        translate = [float(t) for t in layer.translate]
        for axis in self.hidden_axes:
            translate[axis] += self.index[axis] * float(layer.scale[axis])
        return tuple(translate)


@dataclass(frozen=True)
class PreviewResult:
    """What a preview job returns: the method's result and the planes to show.

    Attributes
    ----------
    result : object
        The method's result for the slab or plane it solved (result protocol).
    planes : dict of str to numpy.ndarray
        The displayed plane of each output, over the view's two axes.
    note : str
        What was previewed, in words (e.g. ``"displayed plane (3D slab, at most 50
        iterations)"``).
    """

    result: MethodResult
    planes: dict[str, np.ndarray]
    note: str = "displayed plane"

    @property
    def stopped_early(self) -> bool:
        """Whether the preview was stopped early."""
        return bool(getattr(self.result, "stopped_early", False))

    def summary(self) -> JSONDict:
        """The result's summary, marked as a preview."""
        return {**self.result.summary(), "preview": True, "previewed": self.note}

    def describe(self) -> str:
        """The result's description, after what was previewed."""
        return f"preview of the {self.note}: {self.result.describe()}"


_SAMPLED_VALUES = 1 << 16


def _sample_digest(data: ArrayLike) -> bytes | None:
    """A digest of an in-memory array's shape, dtype and an even sample of its values.

    Whole-image estimates (a noise level, say) are cached per array; a user who edits the array
    in place (painting, ``layer.data[...] = ...`` then ``refresh()``) keeps the same object, so
    the object alone cannot tell the cache that its answer is stale. Hashing every value would
    cost a pass over a possibly huge volume on the GUI thread; 65,536 evenly spaced values (every
    64th pixel of a 2048 x 2048 image) catch any edit larger than a few pixels, which is what can
    move a whole-image estimate. Lazy arrays (Dask, Zarr) are not read: None.
    """
    if not isinstance(data, np.ndarray):
        return None
    flat = data.reshape(-1) if data.flags.c_contiguous else data.ravel(order="K")
    sample = np.ascontiguousarray(flat[:: max(1, flat.size // _SAMPLED_VALUES)])
    digest = hashlib.blake2b(digest_size=16)
    digest.update(repr((data.shape, data.dtype.str)).encode())
    digest.update(sample.tobytes())
    return digest.digest()


class DataIdentity:
    """Which array (weakly held) with which content a cached whole-image answer belongs to.

    Parameters
    ----------
    data : array-like
        The layer data the answer was computed from.

    Examples
    --------
    >>> image = np.zeros((256, 256), np.float32)
    >>> known = DataIdentity(image)
    >>> known.matches(image)
    True
    >>> image[100:110, 100:110] = 5.0  # edited in place: same object, other content
    >>> known.matches(image)
    False
    """

    def __init__(self, data: ArrayLike) -> None:
        self._ref: weakref.ref[ArrayLike] | None
        try:
            self._ref = weakref.ref(data)
        except TypeError:  # not weakly referable: never matches (nothing is remembered)
            self._ref = None
        self._digest = _sample_digest(data)

    @property
    def alive(self) -> bool:
        """Whether the array can still be matched (it exists and could be weakly held)."""
        return self._ref is not None and self._ref() is not None

    def matches(self, data: ArrayLike) -> bool:
        """Whether ``data`` is the same array with (by the sample) the same content."""
        return (
            self._ref is not None and self._ref() is data and _sample_digest(data) == self._digest
        )
