"""The result protocol every method's result follows, and napari layer-data helpers.

A method's job returns a result object with

- ``stopped_early`` -- True when the user asked to stop and keep the best so far;
- ``summary()`` -- JSON-able facts for provenance (parameters used, iterations, convergence,
  which compute path ran...);
- ``describe()`` -- the same facts in one line of plain words (status lines, consoles);
- ``layers(name, geometry, metadata)`` -- napari layer-data tuples ``(data, kwargs, type)``
  with names, scale/translate, display settings and metadata;
- optionally ``files(geometry)`` -- ``{file name: text}``: what a batch run writes beside the
  position's images (eSRRF's drift trace as ``"drift.csv"``); a batch run looks it up with
  ``getattr``, so results without files need not define it. A non-image layer whose
  ``metadata["quantity"]`` is a file's stem (the ``"drift"`` track, ``drift.csv``) is recorded
  as written in that file.

Every result layer is named ``"<kind> · <input> [<settings>]"`` (:func:`result_name`), e.g.
``"phase · cells [reg=0.001]"``: the kind comes first because napari's layer list elides the
middle of a long name and keeps its start, and "brightfi...ion reg=0.001]" could be phase or
absorption.

The dock, the headless demo, the CLI and (later) the batch writer all go through ``layers()``,
so the mapping from a result to what a user sees exists once. Nothing here imports napari:
layer-data tuples are plain tuples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ._types import ArrayLike, JSONDict

__all__ = [
    "NAME_SEPARATOR",
    "Geometry",
    "LayerDataTuple",
    "MethodResult",
    "image_layer",
    "result_name",
    "split_result_name",
    "vectors_layer",
]

LayerDataTuple = tuple[ArrayLike, dict[str, object], str]
"""``(data, kwargs, layer_type)`` as napari's ``Layer.create`` and sample-data functions use."""

NAME_SEPARATOR = " · "
"""Between a result layer's kind and its input's name (:func:`result_name`)."""


def result_name(kind: str, input_name: str, settings: str = "") -> str:
    """The name of a result layer: what it shows first, then its input, then its settings.

    Parameters
    ----------
    kind : str
        What the layer shows (``"phase"``, ``"flatfield"``, ``"TV denoised"``...).
    input_name : str
        The input layer's name.
    settings : str
        The parameters that tell runs apart (``"reg=0.001"``); omitted when empty.

    Returns
    -------
    str
        ``"<kind> · <input> [<settings>]"``.

    Examples
    --------
    >>> result_name("phase", "cells", "reg=0.001")
    'phase · cells [reg=0.001]'
    >>> result_name("tilt", "cells")
    'tilt · cells'
    """
    tail = f" [{settings}]" if settings else ""
    return f"{kind}{NAME_SEPARATOR}{input_name}{tail}"


def split_result_name(name: str) -> tuple[str, str, str] | None:
    """``(kind, input, settings)`` of a name made by :func:`result_name`, else ``None``.

    Examples
    --------
    >>> split_result_name("absorption · cells [tilt est. reg=0.001]")
    ('absorption', 'cells', 'tilt est. reg=0.001')
    >>> split_result_name("widefield mean · frames")
    ('widefield mean', 'frames', '')
    >>> split_result_name("phase · TV denoised · cells [s=1] [reg=0.001]")  # a result's result
    ('phase', 'TV denoised · cells [s=1]', 'reg=0.001')
    >>> split_result_name("cells") is None
    True
    """
    kind, separator, rest = name.partition(NAME_SEPARATOR)
    if not separator or not kind:
        return None
    if rest.endswith("]") and " [" in rest:
        input_name, _, settings = rest[:-1].rpartition(" [")
        return kind, input_name, settings
    return kind, rest, ""


def _tuple(values: Sequence[float] | Sequence[str] | None, cast: type) -> tuple | None:
    return None if values is None else tuple(cast(v) for v in values)


@dataclass(frozen=True)
class Geometry:
    """Where an array sits in world coordinates: napari's per-axis layer geometry.

    Attributes
    ----------
    scale, translate : tuple of float, optional
        Physical step and origin per axis.
    units : tuple of str, optional
        Unit per axis (e.g. ``"µm"``, ``"s"``).
    axis_labels : tuple of str, optional
        Label per axis (e.g. ``"z"``, ``"y"``, ``"x"``).

    Examples
    --------
    >>> g = Geometry(scale=(0.4, 0.1, 0.1), axis_labels=("z", "y", "x"))
    >>> g.trailing(2).as_kwargs()
    {'scale': (0.1, 0.1), 'axis_labels': ('y', 'x')}
    """

    scale: tuple[float, ...] | None = None
    translate: tuple[float, ...] | None = None
    units: tuple[str, ...] | None = None
    axis_labels: tuple[str, ...] | None = None

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, object]) -> Geometry:
        """The geometry part of a layer-data kwargs dict (or of a layer's attributes)."""
        units = kwargs.get("units")
        if isinstance(units, str):
            units = None if "scale" not in kwargs else (units,) * len(kwargs["scale"])
        return cls(
            scale=_tuple(kwargs.get("scale"), float),
            translate=_tuple(kwargs.get("translate"), float),
            units=_tuple(units, str),
            axis_labels=_tuple(kwargs.get("axis_labels"), str),
        )

    @classmethod
    def of_layer(cls, layer: object) -> Geometry:
        """The geometry of a napari layer (read-only use of its attributes)."""
        return cls.from_kwargs(
            {
                key: getattr(layer, key)
                for key in ("scale", "translate", "units", "axis_labels")
                if getattr(layer, key, None) is not None
            }
        )

    def select(self, axes: Sequence[int]) -> Geometry:
        """The geometry of the given axes (e.g. a plane of a volume)."""
        axes = list(axes)

        def pick(values: tuple | None) -> tuple | None:
            return None if values is None else tuple(values[a] for a in axes)

        return Geometry(
            pick(self.scale), pick(self.translate), pick(self.units), pick(self.axis_labels)
        )

    def trailing(self, ndim: int) -> Geometry:
        """The geometry of the last ``ndim`` axes (napari aligns layers on trailing axes)."""
        known = next(
            (len(v) for v in (self.scale, self.translate, self.units, self.axis_labels) if v),
            ndim,
        )
        return self.select(range(max(0, known - ndim), known))

    def as_kwargs(self) -> dict[str, tuple[float, ...] | tuple[str, ...]]:
        """Layer kwargs holding the known fields only."""
        fields = {
            "scale": self.scale,
            "translate": self.translate,
            "units": self.units,
            "axis_labels": self.axis_labels,
        }
        return {key: value for key, value in fields.items() if value is not None}


@runtime_checkable
class MethodResult(Protocol):
    """What every method's result offers (see the module docstring).

    A result may also define ``files(geometry: Geometry | None) -> dict[str, str]``: text
    files (name -> content) that a batch run writes into the position's group. It is optional,
    so it is not a member of this protocol (``isinstance`` checks stay true without it); the
    names are plain file names (letters, digits, ``._-``; see
    :func:`napari_gpuscope.batch.ngff.check_file_name`).
    """

    stopped_early: bool

    def summary(self) -> JSONDict:
        """JSON-able facts for provenance."""
        ...

    def describe(self) -> str:
        """One line of plain words: converged or stopped, and the numbers that say so."""
        ...

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> list[LayerDataTuple]:
        """napari layer-data tuples of the result, named after the input ``name``."""
        ...


def _layer_tuple(
    data: ArrayLike,
    name: str,
    geometry: Geometry | None,
    ndim: int,
    metadata: Mapping[str, object] | None,
    display: Mapping[str, object],
    layer_type: str,
) -> LayerDataTuple:
    kwargs: dict[str, object] = {"name": name}
    if geometry is not None:
        kwargs.update(geometry.trailing(ndim).as_kwargs())
    kwargs.update(display)
    kwargs["metadata"] = dict(metadata or {})
    return data, kwargs, layer_type


def image_layer(
    data: ArrayLike,
    name: str,
    geometry: Geometry | None = None,
    *,
    metadata: Mapping[str, object] | None = None,
    **display: object,
) -> LayerDataTuple:
    """An image layer-data tuple; the geometry is that of ``data``'s trailing axes.

    Parameters
    ----------
    data : array-like
        The image.
    name : str
        Layer name.
    geometry : Geometry, optional
        Geometry of the input the image came from (its trailing axes are used).
    metadata : Mapping, optional
        Layer metadata (provenance goes here).
    **display
        Further layer kwargs (``colormap``, ``contrast_limits``, ``blending``...).

    Returns
    -------
    tuple
        ``(data, kwargs, "image")``.

    Examples
    --------
    >>> import numpy as np
    >>> data, kwargs, kind = image_layer(np.zeros((4, 4)), "cells", Geometry(scale=(2.0, 1.0, 1.0)))
    >>> kwargs["scale"], kind
    ((1.0, 1.0), 'image')
    """
    return _layer_tuple(data, name, geometry, len(data.shape), metadata, display, "image")


def vectors_layer(
    data: ArrayLike,
    name: str,
    geometry: Geometry | None = None,
    *,
    metadata: Mapping[str, object] | None = None,
    **display: object,
) -> LayerDataTuple:
    """A vectors layer-data tuple: ``data`` is ``(N, 2, D)`` (start point, direction).

    The geometry of the trailing ``D`` axes is used, like :func:`image_layer`.
    """
    return _layer_tuple(data, name, geometry, int(data.shape[-1]), metadata, display, "vectors")
