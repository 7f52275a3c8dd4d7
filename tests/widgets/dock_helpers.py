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


class WorkerGate:
    """Pauses every dock job's worker thread after it has handed its ``after``-th update to the
    GUI, until released.

    A test that stops a running job presses Stop while the worker waits, so the job receives
    the stop at its next resume whatever the machine's speed (without the gate, a fast or idle
    CPU runs past the point the test means before the stop is set). Only updates for which
    ``counting(update)`` is true count (default: every update).

    Use it as ``gate = WorkerGate(monkeypatch, after=1)``; ``gate.wait_paused()``, then the
    dock's Stop, then ``gate.release()``.
    """

    def __init__(
        self, monkeypatch: Any, *, after: int = 1, counting: Any = lambda update: True
    ) -> None:
        import threading

        from napari_gpuscope.widgets import _runner

        self.after = after
        self.paused = threading.Event()
        self._released = threading.Event()
        drive = _runner._drive

        def gated_drive(job: Any, control: Any) -> Any:
            inner = drive(job, control)
            counted = 0
            update = next(inner)
            while True:
                yield update
                counted += bool(counting(update))
                if counted == self.after and not self.paused.is_set():
                    self.paused.set()
                    self._released.wait(timeout=120)
                try:  # _drive reads the stop flag as it resumes: after the gate opened
                    update = inner.send(None)
                except StopIteration as done:
                    return done.value

        monkeypatch.setattr(_runner, "_drive", gated_drive)

    def wait_paused(self, timeout: float = 120) -> None:
        """Block until a worker waits at the gate."""
        assert self.paused.wait(timeout), "no job reached the gate"

    def release(self) -> None:
        """Let the paused worker go on."""
        self._released.set()
