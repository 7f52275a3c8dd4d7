"""What the dock tests share: a dock ready to use, and choosing its input layer by name."""

from __future__ import annotations

from typing import Any


def open_dock(dock_class: type, viewer: Any, qtbot: Any) -> Any:
    """A ``dock_class`` dock on ``viewer`` whose kernel warm-up has finished."""
    widget = dock_class(viewer)
    qtbot.addWidget(widget)
    qtbot.waitUntil(lambda: not widget.is_running(), timeout=10_000)  # kernel warm-up
    return widget


def select_input(dock: Any, layer_name: str) -> None:
    """Make the layer called ``layer_name`` the dock's input, as a user picks it."""
    dock.reset_choices()
    dock.input_layer = next(c for c in dock.input.combo.choices if c.name == layer_name)
