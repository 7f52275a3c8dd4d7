"""When a dock asks for a live preview: its box turned on, the displayed plane moved (the dock
relays the viewer's dims events, which it disconnects on release), the dock shown again; and
what stops one: the box turned off, the dock hidden (a full run goes on)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from qtpy.QtCore import QObject

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.dock.model import DockModel
    from napari_gpuscope.widgets._dock_parts import DockPanel
    from napari_gpuscope.widgets._job_control import JobControl
    from napari_gpuscope.widgets._preview_schedule import PreviewScheduler
    from napari_gpuscope.widgets._status_view import StatusView

__all__ = ["LivePreview"]


class LivePreview(QObject):
    """The live preview's triggers.

    Parameters
    ----------
    parent : QObject
        The dock (owner).
    model : DockModel
        The dock's model (whether a job runs).
    viewer : napari.viewer.Viewer
        Whose displayed plane a preview shows.
    panel : DockPanel
        The "Live preview" box.
    schedule : PreviewScheduler
        The preview's debounce.
    jobs : JobControl
        Stops a preview.
    status : StatusView
        The buttons and the status line.
    input_layer : callable
        The dock's input layer now (or None).
    """

    def __init__(
        self,
        parent: QObject,
        model: DockModel,
        *,
        viewer: napari.viewer.Viewer,
        panel: DockPanel,
        schedule: PreviewScheduler,
        jobs: JobControl,
        status: StatusView,
        input_layer: Callable[[], napari.layers.Image | None],
    ) -> None:
        super().__init__(parent)
        self.model, self.viewer, self.schedule = model, viewer, schedule
        self.jobs, self.status, self.input_layer = jobs, status, input_layer
        panel.live_preview.toggled.connect(self._on_toggled)

    def hidden(self) -> None:
        """The dock's panel was hidden (napari's hide button, another tab in front): no live
        preview until it is shown again."""
        self.schedule.hidden = True
        self.jobs.stop_preview()
        self.status.update_buttons()

    def shown(self) -> None:
        """Shown again: the live preview (if on) catches up with the displayed plane."""
        if self.schedule.hidden:
            self.schedule.hidden = False
            self.schedule.request()

    def _on_toggled(self, checked: bool) -> None:
        if checked:
            self.schedule.request()
            return
        self.jobs.stop_preview()
        self.status.update_buttons()
        if not self.model.is_running():  # the status described the preview, which is gone
            layer = self.input_layer()
            ready = f" Ready: Run processes '{layer.name}'." if layer is not None else ""
            self.status.show_idle(f"Live preview off.{ready}")

    def dims_changed(self) -> None:
        """The displayed plane moved: a preview of a stack follows it."""
        layer = self.input_layer()
        if layer is not None and layer in self.viewer.layers and layer.ndim > 2:
            self.schedule.request()
