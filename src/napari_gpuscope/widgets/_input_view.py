"""A dock's input: the layer picker (it follows the layer selected or added, never the dock's
own results or preview) kept in step with the model's input."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtpy.QtCore import QObject, Signal
from qtpy.QtWidgets import QWidget

from napari_gpuscope.provenance import provenance_of
from napari_gpuscope.widgets._controls._layer_picker import LayerPicker

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.dock.model import DockModel

__all__ = ["InputView"]


class InputView(QObject):
    """The input row's picker and the model's input.

    Parameters
    ----------
    parent : QWidget
        The dock (owner of the picker).
    model : DockModel
        The dock's model, which holds the input (weakly) and the layers the dock made.
    viewer : napari.viewer.Viewer
        Whose image layers are offered.
    method_id : str
        The dock's method: layers another dock of it made are not followed either.

    Signals
    -------
    changed()
        The picker's layer changed; the model holds the new input.
    """

    changed = Signal()

    def __init__(
        self,
        parent: QWidget,
        model: DockModel,
        *,
        viewer: napari.viewer.Viewer,
        method_id: str,
    ) -> None:
        super().__init__(parent)
        self.model, self.method_id = model, method_id
        self.picker = LayerPicker(
            viewer,
            tooltip=(
                "Image layer to process. It follows the layer you select or add, and is never "
                "modified: results go to new layers."
            ),
            follow=self.follows,
            parent=parent,
        )
        self.picker.changed.connect(self._on_changed)

    @property
    def layer(self) -> napari.layers.Image | None:
        """The input layer (None when there is none); settable."""
        # The picker's combo can lose its layer without a signal (its choices emptied): hand
        # the model what it shows now.
        self.model.set_input(self.picker.layer)
        return self.model.input_layer

    @layer.setter
    def layer(self, layer: napari.layers.Image | None) -> None:
        self.picker.layer = layer
        self.model.set_input(self.picker.layer)  # also when the picker emits nothing

    def follows(self, layer: napari.layers.Layer) -> bool:
        """Whether selecting ``layer`` makes it the input: not our own results or preview."""
        if layer in self.model.owned:
            return False
        record = provenance_of(layer)
        return not (isinstance(record, dict) and record.get("method") == self.method_id)

    def _on_changed(self, *_: object) -> None:
        self.model.set_input(self.picker.layer)
        self.changed.emit()
