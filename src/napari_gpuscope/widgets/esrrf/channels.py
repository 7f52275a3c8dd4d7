"""The eSRRF dock's "More channels" row: other layers reconstructed as channels of the input.

napari opens the channels of a multi-channel file as one layer each (an OME-Zarr image, a
batch result, a plugin reader's ``channel_axis``). This row lists the other image layers of the
input's shape (not the plugin's own results); the ones checked become channels 1, 2, ... of one
multi-channel job with the input as channel 0 (its reference for registration and drift):
:class:`~napari_gpuscope.compute.esrrf.StackedChannels` reads each layer lazily, and
:func:`~napari_gpuscope.compute.esrrf.iter_channels` does the rest, as for a 4D layer.

Each channel's result keeps its input layer's colormap (:func:`with_input_colormaps`): the
layers of a multi-channel file come with the file's colours (napari gives a file's channels
their own, or the reader their recorded ones), and the reconstructions overlay in the same
colours. Where the input layers' colormaps do not tell the channels apart (all gray, as
layers added one by one are; or one 4D layer, whose single colormap is every channel's), the
channels keep the distinct colours of
:data:`~napari_gpuscope.compute.esrrf.CHANNEL_COLORMAPS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtCore import Qt, Signal
from qtpy.QtWidgets import QListWidget, QListWidgetItem, QSizePolicy

from napari_gpuscope.compute.esrrf import CHANNEL_COLORMAPS, MAX_CHANNELS, ChannelsResult
from napari_gpuscope.dock.connections import Connections
from napari_gpuscope.provenance import PROVENANCE_KEY

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer
    from napari.utils.colormaps import Colormap

    from napari_gpuscope.compute.jobs import Job
    from napari_gpuscope.compute.results import Geometry, LayerDataTuple

__all__ = ["ChannelLayers", "ColouredChannels", "input_colormaps", "with_input_colormaps"]


def input_colormaps(layers: Sequence[napari.layers.Image]) -> tuple[Colormap, ...] | None:
    """The colormaps of the layers that are a job's channels 0, 1, ..., when they tell the
    channels apart (two or more layers, no two with one colormap); else None."""
    colormaps = tuple(layer.colormap for layer in layers)
    names = {colormap.name for colormap in colormaps}
    return colormaps if len(colormaps) >= 2 and len(names) == len(colormaps) else None


@dataclasses.dataclass(frozen=True)
class ColouredChannels(ChannelsResult):
    """A :class:`~napari_gpuscope.compute.esrrf.ChannelsResult` whose channel ``c``'s layers
    have ``colormaps[c]`` (its input layer's) instead of the default colour of channel ``c``;
    the same result otherwise (pixels, summary, files)."""

    colormaps: tuple[Any, ...] = ()

    def layers(
        self,
        name: str = "stack",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """:meth:`ChannelsResult.layers`, each channel in its input layer's colormap."""
        # The default colour of channel c names it: one colour per channel, none repeated.
        by_default = dict(zip(CHANNEL_COLORMAPS, self.colormaps, strict=False))
        layers = []
        for data, kwargs, kind in super().layers(name, geometry, metadata):
            colour = kwargs.get("colormap")
            if isinstance(colour, str) and colour in by_default:
                kwargs = {**kwargs, "colormap": by_default[colour]}
            layers.append((data, kwargs, kind))
        return layers


def with_input_colormaps(
    job: Job[ChannelsResult], layers: Sequence[napari.layers.Image]
) -> Job[ChannelsResult]:
    """``job`` (an eSRRF job of the channels ``layers`` hold, in order), whose result's
    channels are shown in the layers' colormaps (:func:`input_colormaps`; the default colours
    when those do not tell them apart). Updates and commands pass through unchanged."""
    colormaps = input_colormaps(layers)
    result = yield from job
    if colormaps is None or not isinstance(result, ChannelsResult):
        return result
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(ChannelsResult)}
    return ColouredChannels(**fields, colormaps=colormaps)


def _candidate(layer: Any, reference: Any) -> bool:
    """An image layer of ``reference``'s shape that is not it and not one of our results."""
    from napari.layers import Image

    return (
        isinstance(layer, Image)
        and layer is not reference
        and np.shape(layer.data) == np.shape(reference.data)
        and PROVENANCE_KEY not in (layer.metadata or {})
    )


class ChannelLayers(QListWidget):
    """Checkable list of the layers that can be channels of the input (same shape).

    Signals
    -------
    changed()
        The checked layers changed.
    """

    changed = Signal()

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        super().__init__()
        self.viewer = viewer
        self.reference: napari.layers.Image | None = None
        self.title: Any = None
        self._layers: list[napari.layers.Image] = []
        self.setToolTip(
            "Other layers of the input's shape to reconstruct as channels 1, 2, ... of the "
            "input (channel 0, the reference of 'Register channels' and of the drift); napari "
            f"opens a multi-channel file as one layer per channel. Up to {MAX_CHANNELS - 1}."
        )
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMaximumHeight(76)  # three rows; more scroll
        self.itemChanged.connect(lambda *_: self.changed.emit())
        self._links = Connections()
        layers = viewer.layers
        for emitter in (layers.events.inserted, layers.events.removed, layers.events.renamed):
            self._links.connect(emitter, self._refresh)

    def add_to(self, form: Any, after: str) -> None:
        """A row "More channels" of ``form`` (a ParamForm) under field ``after``."""
        form.add_row("More channels", self, self.toolTip(), after=after)
        self.title = form.main.labels[id(self)]

    def follow(self, layer: napari.layers.Image | None) -> None:
        """List the candidates for a new input (none for a 4D input: it has its channels)."""
        self.reference = layer if layer is not None and layer.ndim == 3 else None
        self._refresh()

    @property
    def selected(self) -> list[napari.layers.Image]:
        """The checked layers, in list order (channels 1, 2, ...)."""
        return [
            layer
            for index, layer in enumerate(self._layers)
            if self.item(index).checkState() == Qt.CheckState.Checked
        ]

    def select(self, layers: list[napari.layers.Image]) -> None:
        """Check exactly ``layers`` (tests, restoring a choice)."""
        for index, layer in enumerate(self._layers):
            state = Qt.CheckState.Checked if layer in layers else Qt.CheckState.Unchecked
            self.item(index).setCheckState(state)

    def _refresh(self, *_: Any) -> None:
        checked = self.selected
        reference = self.reference
        candidates = (
            []
            if reference is None
            else [layer for layer in self.viewer.layers if _candidate(layer, reference)]
        )
        self.blockSignals(True)
        try:
            self.clear()
            self._layers = candidates[: MAX_CHANNELS - 1]
            for layer in self._layers:
                item = QListWidgetItem(layer.name)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                on = layer in checked
                item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
                self.addItem(item)
        finally:
            self.blockSignals(False)
        visible = bool(self._layers)
        self.setVisible(visible)
        if self.title is not None:
            self.title.setVisible(visible)
        if checked != self.selected:
            self.changed.emit()

    def stop_following(self) -> None:
        """Disconnect from the viewer (the dock is closing)."""
        self._links.disconnect_all()
