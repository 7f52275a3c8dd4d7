"""The layers one job writes: streamed partial outputs, the final result, and rollback.

Every named output a job streams (``Progress.outputs``) gets a layer on its first update: a
reused layer (the live preview's, or the last result's when the user ticked "replace last
result") or a new one. Later updates replace its data, or fill a host buffer region by region.
When the job succeeds, its result's layer tuples take over these layers in order (names
included: the result names its layers); when it is cancelled or fails,
:meth:`OutputLayers.rollback` removes what it created and gives reused layers their previous data
back. The input layer is never modified. A live preview's planes are placed at the displayed
position here, and only here.

A result layer never takes napari's "[1]" suffix: a layer of the same name that the caller
calls ``replaceable`` (the dock's: an earlier result of its method) is the same result again
(same kind, input and settings: the name says them), so the new layer takes its place in the
layer list; a re-run with other settings gets other names and stays beside the earlier one.

Image results that set no colormap or contrast limits of their own are shown like their input:
same colormap, contrast limits and gamma, linked to the input (napari's layer linking; the dock
can unlink them), so an input and its result are always compared on the same display range.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.compute.jobs import Output
from napari_gpuscope.compute.preview import PlaneView
from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer
    from numpy.typing import ArrayLike

__all__ = [
    "DISPLAY_ATTRIBUTES",
    "OutputLayers",
    "add_replacing",
    "link_display",
    "relink_display",
    "unlink_display",
]

DISPLAY_ATTRIBUTES = ("colormap", "contrast_limits", "gamma")
REFIT_SECONDS = 0.5
"""A streamed result's display is fitted to its data at most this often (and once at the
end), unless linked to the input's or changed by the user."""
"""What a result shares with its input (and keeps in step with it while linked)."""

_GEOMETRY = ("scale", "translate", "units", "axis_labels")


def _is_image(layer: napari.layers.Layer) -> bool:
    return layer.__class__.__name__ == "Image"


def link_display(source: napari.layers.Layer, result: napari.layers.Layer) -> None:
    """Show ``result`` like ``source`` and link their display settings."""
    from napari.experimental import link_layers

    if not (_is_image(source) and _is_image(result)):
        return
    result.colormap = source.colormap
    result.contrast_limits = source.contrast_limits
    result.gamma = source.gamma
    link_layers([source, result], DISPLAY_ATTRIBUTES)


def unlink_display(source: napari.layers.Layer, result: napari.layers.Layer) -> None:
    """Undo :func:`link_display` (the result keeps its current display settings)."""
    from napari.experimental import unlink_layers

    unlink_layers([source, result], DISPLAY_ATTRIBUTES)


def relink_display(
    viewer: napari.viewer.Viewer,
    sources: Mapping[napari.layers.Layer, weakref.ref[napari.layers.Layer]],
    *,
    link: bool,
) -> None:
    """Link or unlink each result still in the viewer with the layer it was made from.

    ``sources`` maps a result layer to a weak reference to its input layer (the object, so a
    renamed input is still found).
    """
    for result, source_ref in list(sources.items()):
        source = source_ref()
        if result not in viewer.layers or source is None or source not in viewer.layers:
            continue
        if link:
            link_display(source, result)
        else:
            unlink_display(source, result)


def add_replacing(
    viewer: napari.viewer.Viewer,
    layer: napari.layers.Layer,
    replaceable: Callable[[napari.layers.Layer], bool],
) -> napari.layers.Layer:
    """Add ``layer`` (returned); a ``replaceable`` layer of its name goes, and ``layer`` takes
    its place in the list (napari would otherwise add it as "name [1]")."""
    index = _free_name(viewer, layer.name, replaceable, keep=None)
    added = viewer.add_layer(layer)
    if index is not None:
        viewer.layers.move(viewer.layers.index(added), index)
    return added


def _free_name(
    viewer: napari.viewer.Viewer,
    name: str,
    replaceable: Callable[[napari.layers.Layer], bool],
    *,
    keep: napari.layers.Layer | None,
) -> int | None:
    """Remove a ``replaceable`` layer called ``name`` (never ``keep``); returns where it was."""
    for index, other in enumerate(viewer.layers):
        if other.name == name and other is not keep and replaceable(other):
            viewer.layers.remove(other)
            return index
    return None


@dataclass
class _Target:
    """The layer of one streamed output."""

    layer: napari.layers.Layer
    created: bool
    name: str
    previous: tuple[ArrayLike, dict[str, object], tuple[float, ...]] | None = None
    buffer: np.ndarray | None = None
    limits: tuple[float, float] | None = None
    """The contrast limits this job last set (None: not its to set, e.g. linked to the input);
    once the user changes them, they are the user's."""
    refitted: float = 0.0

    def refit(self, *, force: bool = False, limits: tuple[float, float] | None = None) -> None:
        """Fit the display to the data streamed so far (at most every ``REFIT_SECONDS``
        unless ``force``), or set ``limits``; never over the user's own choice."""
        layer = self.layer
        if self.limits is None or tuple(layer.contrast_limits) != self.limits:
            return
        now = time.monotonic()
        if not force and now - self.refitted < REFIT_SECONDS:
            return
        if limits is not None:
            layer.contrast_limits = tuple(limits)
        else:
            layer.reset_contrast_limits()
        self.limits, self.refitted = tuple(layer.contrast_limits), now


class OutputLayers:
    """The layers of one job's outputs.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
    source : napari.layers.Layer
        The input layer (geometry and display are inherited from it).
    name_of : callable
        ``name_of(output_name) -> layer name`` for layers this job creates.
    reuse : mapping of str to layer, optional
        Existing layers to stream into, by output name (their data is restored on rollback).
    view : PlaneView, optional
        For a live preview: outputs are planes of the displayed axes and are shown in place.
    link : bool
        Link the display of new image layers to the input.
    owned : mutable mapping, optional
        Receives every layer this job creates, mapped to a weak reference to the input layer,
        *before* it enters the viewer (napari selects a new layer at once; the dock's input
        picker must already know it is a result).
    geometry : callable, optional
        ``geometry(kwargs, ndim) -> kwargs``: adjusts the geometry a streamed or preview layer
        takes from the input (e.g. a super-resolved output's finer scale); default: unchanged.
        Display kwargs it adds (``colormap``, ``contrast_limits``) are applied to new layers,
        which are then not linked to the input's display (other intensity units).
    display : mapping of str to mapping, optional
        Layer keywords for the streamed layer of an output, by output name (e.g. a ratio's
        ``{"colormap": "viridis"}``); an output given a colormap or contrast limits here is
        not linked to the input's display.
    replaceable : callable, optional
        ``replaceable(layer)``: whether a layer named as one of the result's may give way to
        it (an earlier result of the same method, run with the same settings); default: none
        (napari then adds "name [1]").
    """

    def __init__(
        self,
        viewer: napari.viewer.Viewer,
        source: napari.layers.Layer,
        name_of: Callable[[str], str],
        *,
        reuse: dict[str, napari.layers.Layer] | None = None,
        view: PlaneView | None = None,
        link: bool = True,
        owned: MutableMapping[napari.layers.Layer, weakref.ref[napari.layers.Layer]] | None = None,
        geometry: Callable[[dict[str, object], int], dict[str, object]] | None = None,
        display: Mapping[str, Mapping[str, object]] | None = None,
        replaceable: Callable[[napari.layers.Layer], bool] | None = None,
    ) -> None:
        self.display = dict(display or {})
        self.replaceable = replaceable or (lambda layer: False)
        self.viewer = viewer
        self.source = source
        self.name_of = name_of
        self.reuse = {k: v for k, v in (reuse or {}).items() if v in viewer.layers}
        self.view = view
        self.link = link
        self.targets: dict[str, _Target] = {}
        self.owned = owned if owned is not None else {}
        self.adjust_geometry = geometry

    @property
    def order(self) -> list[str]:
        """Output names in the order they first streamed."""
        return list(self.targets)

    # -- streaming ----------------------------------------------------------------------------
    def show(self, name: str, output: Output) -> None:
        """Put one materialised output on screen."""
        data = output.array()
        target = self.targets.get(name)
        if output.kind == "image" and output.region is not None:
            shape = output.shape or self._full_shape(data)
            if target is None or target.buffer is None or target.buffer.shape != tuple(shape):
                buffer = np.zeros(shape, dtype=data.dtype)
            else:
                buffer = target.buffer
            buffer[output.region] = data
            data = buffer
        else:
            buffer = None
        if output.kind == "image" and self.view is not None:
            data = self.view.embed(data)
        if target is None:
            target = self._claim(name, data, output.kind)
        elif target.layer not in self.viewer.layers:
            return  # the user deleted it mid-run; the final result is added afresh
        elif data is target.layer.data:
            target.layer.refresh()
        else:
            target.layer.data = data
        target.buffer = buffer
        if output.kind == "image":
            # The first update (a few frames of eSRRF) would fix the display for the whole run.
            target.refit()

    def _full_shape(self, data: np.ndarray) -> tuple[int, ...]:
        if self.view is not None:
            return tuple(self.view.shape[a] for a in self.view.axes)
        return tuple(np.shape(self.source.data))

    def _claim(self, name: str, data: ArrayLike, kind: str) -> _Target:
        layer = self.reuse.get(name)
        if layer is not None and layer.ndim == np.ndim(data) - (kind == "vectors"):
            target = _Target(layer, False, layer.name)
            target.previous = (layer.data, dict(layer.metadata), tuple(layer.translate))
            if self.view is not None and layer.ndim == len(self.view.shape):
                layer.translate = self._geometry(layer.ndim)["translate"]
            layer.data = data
        else:
            layer_name = self.name_of(name)
            geometry = self._geometry(np.ndim(data) if kind == "image" else data.shape[-1])
            extra = dict(self.display.get(name, {}))
            inherit = not {"colormap", "contrast_limits"} & (set(geometry) | set(extra))
            layer = self._add(
                data, {"name": layer_name, **geometry, **extra}, kind, inherit=inherit
            )
            target = _Target(layer, True, layer_name)
            linked = inherit and self.link
            if kind == "image" and not linked and "contrast_limits" not in extra:
                target.limits = tuple(layer.contrast_limits)  # this job's to refit
                target.refitted = time.monotonic()
        self.targets[name] = target
        return target

    def _add(
        self,
        data: ArrayLike,
        kwargs: dict[str, object],
        kind: str,
        *,
        inherit: bool,
        replace: bool = False,
    ) -> napari.layers.Layer:
        """A new layer (a result's, when ``replace``: it takes the place of an earlier result
        of its name)."""
        from napari.layers import Layer

        layer = Layer.create(data, kwargs, kind)
        self.owned[layer] = weakref.ref(self.source)
        if inherit and self.link:  # shown like the input from its first frame on
            link_display(self.source, layer)
        if replace:
            return add_replacing(self.viewer, layer, self.replaceable)
        return self.viewer.add_layer(layer)

    def _geometry(self, ndim: int) -> dict[str, object]:
        """The input's geometry for an output of ``ndim`` axes; a preview plane (embedded in
        the input's dimensionality) is translated to the displayed position."""
        geometry = Geometry.of_layer(self.source).trailing(ndim).as_kwargs()
        if self.view is not None and ndim == len(self.view.shape):
            geometry["translate"] = self.view.translate(self.source)
        if self.adjust_geometry is not None:
            geometry = self.adjust_geometry(geometry, ndim)
        return geometry

    # -- the end ------------------------------------------------------------------------------
    def finish_planes(
        self, planes: Mapping[str, np.ndarray], metadata: Mapping[str, object]
    ) -> list[napari.layers.Layer]:
        """Show a live preview's planes (over the view's two displayed axes) in place.

        Returns the preview layers, in the order of ``planes``.
        """
        if self.view is None:
            raise ValueError("planes need the view they were taken from")
        tuples = []
        for name, plane in planes.items():
            data = self.view.embed(plane)
            data, kwargs, kind = image_layer(data, self.name_of(name), metadata=metadata)
            tuples.append((data, {**kwargs, **self._geometry(data.ndim)}, kind))
        return self.finish(tuples, list(planes))

    def finish(
        self, tuples: Sequence[LayerDataTuple], order: Sequence[str]
    ) -> list[napari.layers.Layer]:
        """Show the result's layer tuples; tuple ``k`` takes over the layer of ``order[k]``.

        Returns the result layers, in the order of ``tuples``.
        """
        layers = []
        for index, (data, kwargs, layer_type) in enumerate(tuples):
            kwargs = dict(kwargs)
            name = order[index] if index < len(order) else None
            target = self.targets.pop(name, None) if name is not None else None
            if target is None and self.reuse.get(name) in self.viewer.layers:
                layer = self.reuse[name]
                target = _Target(layer, False, layer.name)
            layer = target.layer if target is not None else None
            fits = (
                layer is not None
                and layer in self.viewer.layers
                and layer.__class__.__name__.lower() == layer_type
                and layer.ndim == _ndim(data, layer_type)
            )
            if fits:
                layer.data = data
                layer.metadata = dict(kwargs.get("metadata") or {})
                for key in _GEOMETRY:
                    if key in kwargs:
                        setattr(layer, key, kwargs[key])
                if kwargs.get("name") and kwargs["name"] != target.name:
                    index = _free_name(self.viewer, kwargs["name"], self.replaceable, keep=layer)
                    layer.name = kwargs["name"]
                    if index is not None:  # where the result it replaces was
                        self.viewer.layers.move(self.viewer.layers.index(layer), index)
                if layer_type == "image":  # the whole result, once: the result's limits or fitted
                    target.refit(force=True, limits=kwargs.get("contrast_limits"))
            else:
                if target is not None and target.created and layer in self.viewer.layers:
                    self.viewer.layers.remove(layer)
                inherit = not {"colormap", "contrast_limits"} & set(kwargs)
                layer = self._add(data, kwargs, layer_type, inherit=inherit, replace=True)
            layers.append(layer)
        self.rollback()  # outputs the result did not claim
        return layers

    def rollback(self) -> None:
        """Remove the layers this job created; give reused layers their previous data."""
        targets, self.targets = self.targets, {}
        for target in targets.values():
            layer = target.layer
            if layer not in self.viewer.layers:
                continue
            if target.created:
                self.viewer.layers.remove(layer)
            elif target.previous is not None:
                layer.data, layer.metadata, layer.translate = target.previous

    def layers(self) -> dict[str, napari.layers.Layer]:
        """The streamed layers by output name (for reuse by the next job)."""
        return {name: target.layer for name, target in self.targets.items()}


def _ndim(data: ArrayLike, layer_type: str) -> int:
    return int(np.shape(data)[-1]) if layer_type == "vectors" else np.ndim(data)
