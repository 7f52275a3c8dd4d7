"""A dock's state as the user sees it: which buttons are enabled, the status line, errors
(also as napari notifications) and the settings written on every change.

:class:`DockStatus` is a mixin of :class:`~napari_gpuscope.widgets.MethodDock`.
"""

from __future__ import annotations

from typing import Any

from napari_gpuscope.widgets._controller import RUN
from napari_gpuscope.widgets._controls._changes import mark_labels

__all__ = ["DockStatus"]


class DockStatus:
    """Buttons, status line, errors and settings (mixin of ``MethodDock``)."""

    # ---------------------------------------------------------------- settings
    def _load_settings(self: Any) -> None:
        """Show the saved parameters (the fields the form has; the others come from the
        layer or keep their defaults) and options; then save every later change."""
        saved, options = self.jobs.load_settings(self.params_class)
        if saved is not None:
            self.form.set_values({name: getattr(saved, name) for name in self.form.widgets})
        self.panel.apply_options(options)
        if options.get("advanced_open") is True:
            self.form.advanced.expand(animate=False)
        self.jobs.saving = True
        self.show_changes()

    def show_changes(self: Any) -> list[str]:
        """Mark the fields whose value differs from the default (restored settings included)
        and say which in the form's changes row; returns their names."""
        infos = {info.name: info for info in self.params_class.param_info()}
        names = [name for name in self.form.widgets if name not in self.layer_fields]
        defaults = self.defaults()
        changed = self.changes.show_changes(
            {name: infos[name].label for name in names},
            {name: self.form.value(name) for name in names},
            {name: defaults[name] for name in names},
        )
        for name in names:
            mark_labels([self.form.label_of(name)], name in changed)
        return changed

    def _save_settings(self: Any, *_: Any) -> None:
        options = {**self.panel.options(), "advanced_open": self.form.advanced.isExpanded()}
        self.jobs.save_settings(self.params, options)

    # ---------------------------------------------------------------- state and messages
    def input_problem(self: Any) -> str | None:
        """Why Run cannot start now, in words (None when it can)."""
        if self.device is None:
            return "Run is disabled: no usable CUDA GPU (see the message above)."
        layer = self.input_layer
        if layer is None:
            return (
                "Run is disabled: no input image. Open an image (File > Open) or select an "
                "image layer."
            )
        try:
            self.validate_input(layer, check_values=False)
        except ValueError as exc:
            return f"Run is disabled: {exc}"
        return None

    def _update_buttons(self: Any, *_: Any) -> None:
        problem = self.input_problem()
        busy = self.jobs.holds_device()
        self.panel.update_buttons(
            can_run=problem is None and not busy,
            running=self.runner.running,
            full_run=busy and self.jobs.kind == RUN,
            preview_supported=self.supports_preview,
            preview_possible=self.device is not None,
            reason=problem,
        )
        if self.runner.running:
            return
        if problem is not None:
            self.set_status(problem)
        elif self.panel.status.text().startswith("Run is disabled"):
            self.set_status(f"Ready: Run processes '{self.input_layer.name}'.")

    def _show_idle_status(self: Any, text: str) -> None:
        problem = self.input_problem()
        self.set_status(problem or text or "Ready.")

    def _report_error(self: Any, message: str, *, preview: bool = False) -> None:
        """Show an error in the status line and as a napari notification (never raise)."""
        self.set_status(message)
        if preview:
            # A live preview re-fires on every slider move: notify once per distinct problem.
            if message == self._last_preview_error:
                return
            self._last_preview_error = message
        from napari.utils import notifications

        notifications.show_error(message)
