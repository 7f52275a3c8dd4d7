"""A drift trace over the stack it is of: the stack's frames, unit and channel axis, a trace
checked against them, and the trace's layers drawn over the input.

The eSRRF dock's drift section (:mod:`.drift`), its estimate (:mod:`.drift_estimate`) and its
CSV files (:mod:`.drift_files`) share these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtCore import QObject

from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.dock.outputs import add_replacing
from napari_gpuscope.export.lengths import layer_unit, pixel_of
from napari_gpuscope.provenance import provenance_of

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.compute.esrrf import DriftResult

__all__ = [
    "TraceLayers",
    "channel_axis",
    "check_frames",
    "layer_unit",
    "pixel_of",
    "same_layer",
]


def channel_axis(layer: napari.layers.Layer) -> int:
    """The channel axis of a 4D layer: 0 (C, T, Y, X) or 1 (T, C, Y, X), from its shape and
    axis labels (:func:`~napari_gpuscope.compute.esrrf.guess_channel_axis`)."""
    from napari_gpuscope.compute.esrrf import guess_channel_axis

    return guess_channel_axis(np.shape(layer.data), getattr(layer, "axis_labels", None))


def same_layer(a: Any, b: Any) -> bool:
    """Whether two layer handles are one layer (napari's proxies compare by the layer)."""
    return a is b or bool(a == b)


def _frames(layer: napari.layers.Layer | None) -> int | None:
    """Frames of a (T, Y, X) stack or of each channel of a 4D one."""
    shape = np.shape(getattr(layer, "data", None)) if layer is not None else ()
    if len(shape) == 4:
        return int(shape[1 - channel_axis(layer)])
    return int(shape[-3]) if len(shape) == 3 else None


def check_frames(trace: DriftResult, layer: napari.layers.Layer | None) -> None:
    """Raise ValueError, in words, unless ``trace`` has one row per frame of ``layer``."""
    frames = _frames(layer)
    if frames is not None and trace.shifts.shape[0] != frames and trace.stopped_early:
        raise ValueError(
            f"The drift trace covers frames 0-{trace.shifts.shape[0] - 1} only (its "
            f"estimate was stopped early) but '{layer.name}' has {frames}: estimate again, "
            "or load a saved trace, to correct every frame."
        )
    if frames is not None and trace.shifts.shape[0] != frames:
        raise ValueError(
            f"The drift trace has {trace.shifts.shape[0]} frames but '{layer.name}' has "
            f"{frames}: a trace needs one (dy, dx) row per frame of the stack it corrects."
        )


def _an_esrrf_result(layer: napari.layers.Layer) -> bool:
    record = provenance_of(layer)
    return isinstance(record, dict) and record.get("method") == "esrrf"


class TraceLayers(QObject):
    """The layers of the latest trace drawn over its input: the track, and the
    drift-corrected mean (hidden: it would cover the stack).

    Parameters
    ----------
    parent : QObject
        The drift section.
    viewer : napari.viewer.Viewer
        Where the layers are drawn.
    """

    def __init__(self, parent: QObject, viewer: napari.viewer.Viewer) -> None:
        super().__init__(parent)
        self.viewer = viewer
        # The layers of the latest trace shown (held, not weakly: napari's public-only proxy
        # hands out a new wrapper per call, which a weak reference would lose at once).
        self._made: list[tuple[str, Any]] = []  # (layer type, layer)

    def show(
        self, trace: DriftResult, layer: napari.layers.Image, metadata: dict[str, Any]
    ) -> None:
        """The track over the input (and the drift-corrected mean, hidden: it would cover the
        stack), replacing the previous trace's; the input stays selected."""
        from napari.layers import Layer

        for _, old in self._made:
            if old in self.viewer.layers:
                self.viewer.layers.remove(old)
        self._made = []
        for data, kwargs, layer_type in trace.layers(
            layer.name, Geometry.of_layer(layer), metadata
        ):
            if layer_type == "image":
                kwargs["visible"] = False
                kwargs.setdefault("colormap", getattr(layer.colormap, "name", "gray"))
            # An earlier eSRRF layer of this name (a run's own track) gives way: no "[1]".
            added = add_replacing(
                self.viewer, Layer.create(data, kwargs, layer_type), _an_esrrf_result
            )
            self._made.append((layer_type, added))
        self.viewer.layers.selection.active = layer

    def remove_track(self) -> None:
        """Remove the drawn track (a run's result layers draw their own)."""
        for kind, old in self._made:
            if kind == "tracks" and old in self.viewer.layers:
                self.viewer.layers.remove(old)
