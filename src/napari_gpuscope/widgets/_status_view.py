"""A dock's state as the user sees it: which buttons are enabled, the status line, and errors.

An error is said once. What the user can fix in the dock (an input the method does not take,
a parameter out of range:
:func:`~napari_gpuscope.dock.messages.is_expected`) is said in the dock's status line only; a job
that crashed is said there and as a napari notification (once per distinct live-preview
problem), since it may need a bug report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtpy.QtCore import QObject

from napari_gpuscope.dock.jobs import RUN

if TYPE_CHECKING:
    from napari_gpuscope.dock.context import MethodView
    from napari_gpuscope.dock.model import DockModel
    from napari_gpuscope.widgets._dock_parts import DockPanel

__all__ = ["StatusView"]

_READY = "Ready: Run processes "


class StatusView(QObject):
    """The dock's buttons, status line and error reports.

    Parameters
    ----------
    parent : QObject
        The dock (owner).
    model : DockModel
        The dock's model (what runs).
    panel : DockPanel
        The buttons and the status line.
    dock : MethodView
        The method's side of the dock (its device, input and input check).
    """

    def __init__(
        self, parent: QObject, model: DockModel, *, panel: DockPanel, dock: MethodView
    ) -> None:
        super().__init__(parent)
        self.dock, self.model, self.panel = dock, model, panel
        self._last_preview_error: str | None = None

    def set_status(self, text: str) -> None:
        """Write the status line."""
        self.panel.status.setText(text)

    def input_problem(self) -> str | None:
        """Why Run cannot start now, in words (None when it can)."""
        if self.dock.device is None:
            return "Run is disabled: no usable CUDA GPU (see the message above)."
        layer = self.dock.input_layer
        if layer is None:
            return (
                "Run is disabled: no input image. Open an image (File > Open) or select an "
                "image layer."
            )
        try:
            self.dock.validate_input(layer, check_values=False)
        except ValueError as exc:
            return f"Run is disabled: {exc}"
        return None

    def update_buttons(self, *_: object) -> None:
        """Enable what may start now; say why Run is disabled, or that it is ready again."""
        problem = self.input_problem()
        busy = self.model.holds_device()
        running = self.model.is_running()
        self.panel.update_buttons(
            can_run=problem is None and not busy,
            running=running,
            full_run=busy and self.model.kind == RUN,
            preview_supported=self.dock.supports_preview,
            preview_possible=self.dock.device is not None,
            reason=problem,
        )
        if running:
            return
        layer = self.dock.input_layer
        if problem is not None:
            self.set_status(problem)
        elif layer is not None and self.panel.status.text().startswith(
            ("Run is disabled", _READY)
        ):  # and when the input changed since it was said: never a layer that is no longer it
            self.set_status(f"{_READY}'{layer.name}'.")

    def show_idle(self, text: str) -> None:
        """``text`` in the status line, unless Run cannot start (then why not)."""
        self.set_status(self.input_problem() or text or "Ready.")

    def forget_preview_error(self) -> None:
        """A later live-preview failure is news again (a preview has succeeded)."""
        self._last_preview_error = None

    def report_error(self, message: str, *, preview: bool = False, expected: bool = False) -> None:
        """Show an error in the status line and, unless it is ``expected`` (the user can fix
        it in the dock: said there once), as a napari notification (never raise)."""
        self.set_status(message)
        if expected:
            return
        if preview:
            # A live preview re-fires on every slider move: notify once per distinct problem.
            if message == self._last_preview_error:
                return
            self._last_preview_error = message
        from napari.utils import notifications

        notifications.show_error(message)
