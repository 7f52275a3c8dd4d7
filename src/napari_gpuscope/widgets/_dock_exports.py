"""A dock's export row: "Figure..." and "Save TIFF..." (the File-menu commands, on the latest
result) and "Link display" (the results' and previews' contrast follows the input's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from qtpy.QtCore import QObject

from napari_gpuscope.dock.outputs import relink_display

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.dock.model import DockModel
    from napari_gpuscope.widgets._dock_parts import DockPanel

__all__ = ["ExportRow"]


class ExportRow(QObject):
    """The export buttons' and the link box's reactions.

    Parameters
    ----------
    parent : QObject
        The dock (owner).
    model : DockModel
        The dock's model (the layers it made: results and previews).
    viewer : napari.viewer.Viewer
        The viewer drawn and saved.
    panel : DockPanel
        The buttons and the "Link display" box.
    last_result : callable
        The main layer of the latest full run still in the viewer (or None).
    """

    def __init__(
        self,
        parent: QObject,
        model: DockModel,
        *,
        viewer: napari.viewer.Viewer,
        panel: DockPanel,
        last_result: Callable[[], napari.layers.Layer | None],
    ) -> None:
        super().__init__(parent)
        self.model, self.viewer, self.last_result = model, viewer, last_result
        panel.link_display.toggled.connect(self.link)
        panel.figure_button.clicked.connect(self.export_figure)
        panel.save_tiff_button.clicked.connect(self.save_tiff)

    def link(self, checked: bool) -> None:
        """Link (or unlink) the display of every result and preview of this dock."""
        relink_display(self.viewer, self.model.owned, link=checked)

    # The export commands report their own failures as notifications (they are File-menu
    # commands too), so the buttons just call them.
    def export_figure(self) -> None:
        """The File menu's screenshot dialog."""
        from napari_gpuscope.export.commands import export_screenshot_dialog

        export_screenshot_dialog(self.viewer)

    def save_tiff(self) -> None:
        """The File menu's TIFF dialog, on the latest result."""
        from napari_gpuscope.export.commands import save_tiff_dialog

        save_tiff_dialog(self.viewer, layer=self.last_result())
