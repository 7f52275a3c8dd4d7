"""The input-layer picker: a combo of image layers that follows what the user works on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeGuard

from magicgui.widgets import ComboBox
from qtpy.QtCore import QObject, Signal
from qtpy.QtWidgets import QComboBox

from napari_gpuscope.dock.connections import Connections

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer
    from napari.utils.events import Event

__all__ = ["LayerPicker"]


def _is_image(layer: napari.layers.Layer | None) -> TypeGuard[napari.layers.Image]:
    from napari.layers import Image

    return isinstance(layer, Image)


class LayerPicker(QObject):
    """A combo of the viewer's image layers that follows the selected and newly added layer.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
    tooltip : str
        Tooltip of the combo.
    follow : callable, optional
        ``follow(layer) -> bool``: whether selecting (or adding) ``layer`` makes it the input.
        The docks exclude their own results and preview, so looking at a result does not
        turn it into the input.

    Attributes
    ----------
    combo : magicgui.widgets.ComboBox
        The combo (``combo.native`` goes into a form).

    Signals
    -------
    changed(object)
        The new input layer (or None).
    """

    changed = Signal(object)

    def __init__(
        self,
        viewer: napari.viewer.Viewer,
        tooltip: str = "",
        follow: Callable[[napari.layers.Layer], bool] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.viewer = viewer
        self.follow = follow or (lambda layer: True)
        self.combo = ComboBox(choices=self._choices, tooltip=tooltip)
        native: QComboBox = self.combo.native
        native.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        native.setMinimumContentsLength(12)
        self.combo.changed.connect(lambda *_: self.changed.emit(self.layer))
        self._links = Connections()
        layers = viewer.layers
        self._links.connect(layers.events.inserted, self._on_inserted)
        self._links.connect(layers.events.removed, self.reset_choices)
        self._links.connect(layers.events.moved, self.reset_choices)
        self._links.connect(layers.events.renamed, self.reset_choices)
        self._links.connect(layers.selection.events.active, self._on_active)
        self._take(layers.selection.active)

    def _choices(self, *_: object) -> list[tuple[str, napari.layers.Image]]:
        return [(layer.name, layer) for layer in self.viewer.layers if _is_image(layer)]

    @property
    def layer(self) -> napari.layers.Image | None:
        """The selected input layer (the combo lists only image layers)."""
        return self.combo.value

    @layer.setter
    def layer(self, layer: napari.layers.Image | None) -> None:
        self.reset_choices()
        if layer is not None:
            self.combo.value = layer

    def reset_choices(self, *_: object) -> None:
        """Re-read the layer list, keeping the current layer while it exists (also when it was
        renamed: the combo would otherwise match entries by their old text)."""
        current = self.combo.value
        with self.combo.changed.blocked():
            self.combo.reset_choices()
            if current is not None and current in self.viewer.layers and _is_image(current):
                self.combo.value = current
        if self.combo.value is not current:
            self.changed.emit(self.combo.value)

    def _take(self, layer: napari.layers.Layer | None) -> None:
        if layer is not None and _is_image(layer) and self.follow(layer):
            self.layer = layer

    def _on_inserted(self, event: Event) -> None:
        self.reset_choices()
        self._take(event.value)

    def _on_active(self, event: Event) -> None:
        self._take(event.value)

    def stop_following(self) -> None:
        """Disconnect from the viewer (the dock is closing)."""
        self._links.disconnect_all()
