"""Every dock's "Live acquisition" part: follow a microscope (or a growing layer) with the
dock's parameters while it acquires.

The view over :class:`~napari_gpuscope.dock.live_follow.LiveFollow`: a choice of source
(:func:`~napari_gpuscope.dock.live_sources.source_choices`), Start, Stop & keep and Cancel, the
counters with the rate and latency, and one image layer updated in place. A timer on the GUI
thread polls the session (the session's worker never touches a layer). Stop & keep and Cancel
ask the session to stop and return at once (the GUI never waits for frames being processed):
the timer keeps or discards it once its worker has ended. The acquisition goes on. A session
that ends by itself (the MDA finished, frames were refused, the source failed) is kept as Stop &
keep keeps it, with the reason in the status line: the result's layers, with provenance,
replace the live layer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from qtpy.QtCore import Qt, QTimer, Signal
from qtpy.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.dock.live_follow import COUNTERS_TIP, LIVE_METHODS, LiveFollow, live_request
from napari_gpuscope.dock.live_sources import (
    FOLDER,
    SourceChoice,
    live_layer_geometry,
    source_choices,
)
from napari_gpuscope.dock.messages import plain_error_message, sentence
from napari_gpuscope.widgets._dock_parts import _wrapping_label
from napari_gpuscope.widgets._live_dock import (
    Ending,
    FolderButton,
    LiveDock,
    SourceBox,
    add_kept_layers,
    add_live_layer,
    live_buttons,
    section_header,
)
from napari_gpuscope.widgets._live_quality import LiveQualityView

if TYPE_CHECKING:
    import napari.layers
    import numpy as np

    from napari_gpuscope.compute.params import Params

__all__ = ["LiveAcquisition"]

POLL_MS = 100
"""How often the view reads the counters and shows the newest image (10 times a second: the
eye follows it, and napari redraws a layer at most that often without slowing the GUI)."""

_AUTO_CONTRAST_UPDATES = 10
"""Updates whose contrast limits follow the image (then the user's, or the settled ones)."""

GOES_ON = "The acquisition goes on."

GIVE_UP_S = 60.0
"""Seconds a stopping session's worker may take to finish its frame before the part stops
waiting for it (nothing kept; the worker thread ends by itself, disconnected)."""


class LiveAcquisition(QWidget):
    """The Live part of ``dock``: hidden under its header until opened.

    Parameters
    ----------
    dock : LiveDock
        The dock (a MethodDock) whose parameters, device and method the session runs.
    """

    result_kept = Signal(object)
    """The result a session kept, once its layers are added (the flat-field dock's Apply
    panel takes a kept profile)."""

    def __init__(self, dock: LiveDock) -> None:
        super().__init__()
        self.header = section_header(
            "Live acquisition", "Process the frames of an acquisition while it runs"
        )
        self.dock, self.viewer = dock, dock.viewer
        self._live_params: Callable[[], Params] = dock.params
        self._live_profile: Callable[[], object | None] = lambda: None
        self.follow: LiveFollow | None = None
        self.kept: list[napari.layers.Layer] = []
        """The result layers the last session kept (Stop & keep, or its own end)."""
        self._ending: Ending | None = None
        self.choice: SourceChoice | None = None
        self.layer: napari.layers.Image | None = None
        self._choices: list[SourceChoice] = []
        self._folders: list[str] = []
        self._updates = 0
        self.supported = dock.method_id in LIVE_METHODS

        body = QWidget()
        column = QVBoxLayout(body)
        column.setContentsMargins(0, 0, 0, 0)
        form = QFormLayout()
        column.addLayout(form)
        self.source_box = SourceBox(self.refresh_sources)
        source_row = QHBoxLayout()
        source_row.addWidget(self.source_box, stretch=1)
        self.folder_button = FolderButton(self.add_folder)
        source_row.addWidget(self.folder_button)
        form.addRow("Follow", source_row)
        self._form = form
        self.slices = QSpinBox()
        self.slices.setRange(1, 4096)
        self.slices.setValue(16)
        self.slices.setToolTip("Slices per z-stack: each stack is reconstructed once complete")
        # What a session starts with: fixed while one runs.
        self._fixed_while_running: list[QWidget] = [self.source_box, self.folder_button]
        if dock.method_id == "phase":
            self.add_row("Slices per stack", self.slices)
        buttons = live_buttons()
        self.start_button, self.stop_button, self.cancel_button = buttons
        row = QHBoxLayout()
        for button in buttons:
            row.addWidget(button)
        form.addRow(row)
        # eSRRF's resolution against the frames, and "Say when more frames stop helping".
        self.quality = LiveQualityView(self.viewer) if dock.method_id == "esrrf" else None
        if self.quality is not None:
            column.addWidget(self.quality)
        # Below the form, as the dock's own status line: a label in a form row is given one
        # line's height whatever its text wraps onto.
        self.counters = _wrapping_label()
        self.counters.setToolTip(COUNTERS_TIP)
        column.addWidget(self.counters)
        self.status = _wrapping_label(
            "Follow a microscope while it acquires."
            if self.supported
            else f"{dock.title} does not run live."
        )
        column.addWidget(self.status)
        self.body = body
        body.setVisible(False)
        # Never squeezed below what it needs when the dock is taller than its panel (the dock
        # scrolls instead): seen cut off on the flat-field dock, whose Apply panel follows.
        for widget in (self, body):
            widget.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.header)
        outer.addWidget(body)
        self.header.toggled.connect(self._opened)

        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.poll)
        self.start_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.stop_and_keep)
        self.cancel_button.clicked.connect(self.cancel)
        self.refresh_sources()
        self._update_buttons()

    # ---------------------------------------------------------------- public surface
    def expand(self) -> None:
        """Show the part (it starts hidden under its header)."""
        self.header.setChecked(True)

    def add_row(self, label: str, widget: QWidget) -> None:
        """A row of the dock's own under Follow (flat-field's Live choice), read at Start and
        so fixed while a session runs."""
        self._form.insertRow(1, label, widget)
        self._fixed_while_running.append(widget)

    def take_inputs_from(
        self, params: Callable[[], Params], profile: Callable[[], object | None]
    ) -> None:
        """Run live with ``params()`` and ``profile()`` when Start is pressed, instead of the
        dock's parameters and no profile (the flat-field dock: its Apply panel's options and
        the profile it holds)."""
        self._live_params, self._live_profile = params, profile

    def refresh_sources(self) -> None:
        """List what can be followed now (the current choice stays chosen if it still can)."""
        current = self.source_box.currentText()
        self._choices = source_choices(
            self.viewer.layers, follows=self._follows, folders=self._folders
        )
        self.source_box.clear()
        self.source_box.addItems([choice.label for choice in self._choices])
        if current in [choice.label for choice in self._choices]:
            self.source_box.setCurrentText(current)
        self._update_buttons()

    def add_folder(self, folder: str) -> None:
        """Offer ``folder`` (TIFF files written into it) as a source, and choose it."""
        self._folders = list(dict.fromkeys([*self._folders, folder]))
        self.refresh_sources()  # by the folder itself: two folders may share a last name
        targets = [(c.kind, c.target) for c in self._choices]
        self.source_box.setCurrentIndex(targets.index((FOLDER, folder)))

    def choose(self, label: str) -> None:
        """Choose the source whose label is ``label`` (KeyError when there is none)."""
        self.refresh_sources()
        labels = [choice.label for choice in self._choices]
        if label not in labels:
            raise KeyError(f"no live source {label!r}; there are {labels}")
        self.source_box.setCurrentIndex(labels.index(label))

    @property
    def running(self) -> bool:
        """Whether a live session is being followed (or is stopping)."""
        return self.follow is not None

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for and the session's worker is finishing its frame."""
        return self._ending is not None

    def start(self) -> bool:
        """Follow the chosen source with the dock's parameters; False (the status says why)
        when it cannot start."""
        if self.running or not self.supported:
            return False
        index = self.source_box.currentIndex()
        if not 0 <= index < len(self._choices):
            self._say("Nothing to follow: start an acquisition or add a layer, then choose it.")
            return False
        choice = self._choices[index]
        device = self.dock.device
        if device is None:
            self._say("No device: choose one in the Device row.")
            return False
        try:
            request = live_request(
                self.dock.method_id,
                self._live_params(),
                profile=self._live_profile(),
                frames_per_stack=self.slices.value() if self.dock.method_id == "phase" else None,
            )
            self.follow = LiveFollow(choice.source(), request, device=device)
        except (ValueError, TypeError) as exc:
            self._say(f"Not started: {plain_error_message(exc)}")
            return False
        self.choice, self._updates, self.kept = choice, 0, []
        if self.quality is not None:
            self.quality.follow(self.follow.session, choice.geometry())
        notes = "".join(f" ({note})" for note in request.notes)
        self._say(f"Following {choice.label}{notes}.")
        self._counters("waiting for frames")
        self._timer.start()
        self._update_buttons()
        return True

    def poll(self) -> None:
        """Show the counters and the newest image; keep the result when the session ended
        (or was stopped and its worker has finished). A timer's slot: never raises."""
        follow = self.follow
        if follow is None:
            return
        if self._ending is not None:
            self._finish_if_ended()
            return
        try:
            status = follow.poll()
            self._counters(status.describe())
            if status.image is not None:
                self._show(status.image)
            said = None if self.quality is None else self.quality.poll()
            if said:
                self._say(said)
        except Exception as exc:  # a slot must not raise into Qt: say it, and let go
            detail = sentence(plain_error_message(exc))
            self._end(keep=False, why="Stopped following", detail=detail)
            return
        if status.done:
            why, detail = status.ending()
            self._end(keep=True, why=why, detail=detail)

    def stop_and_keep(self) -> None:
        """Stop following; once the frames being processed are done, keep the result over the
        frames processed as result layers (with provenance; :attr:`kept`). Returns at once;
        the acquisition goes on."""
        self._end(keep=True, why="Stopped", detail=GOES_ON)

    def cancel(self) -> None:
        """Stop following and discard the live result. Returns at once; the acquisition goes
        on."""
        self._end(keep=False, why="Cancelled", detail=GOES_ON)

    def release(self) -> None:
        """The dock is closing: stop a session still followed and let it go (its worker ends
        by itself, disconnected; nothing is kept)."""
        if self._ending is None:
            self._end(keep=False, why="Cancelled", detail=GOES_ON)
        if self.running:  # not ended at once: the closing dock waits for nothing
            self._finish("nothing kept")

    # ---------------------------------------------------------------- internals
    def _follows(self, layer: napari.layers.Layer) -> bool:
        return layer is not self.layer and self.dock.follows(layer)

    def _show(self, image: np.ndarray) -> None:
        assert self.follow is not None and self.choice is not None
        layer = self.layer
        if layer is None or layer not in self.viewer.layers:
            frame_shape = self.follow.session.frame_shape or image.shape
            geometry = live_layer_geometry(self.choice.geometry(), frame_shape, image.shape)
            name = f"{self.dock.short_title or self.dock.title} live · {self.choice.name}"
            method, fit = self.dock.method_id, self.follow.request.job_id == "fit"
            self.layer = add_live_layer(self.viewer, image, name, method, fit, geometry)
        else:
            layer.data = image
        if self._updates < _AUTO_CONTRAST_UPDATES and self.layer is not None:
            self.layer.reset_contrast_limits()
        self._updates += 1

    def _end(self, *, keep: bool, why: str, detail: str = "") -> None:
        """Ask the session to stop (never waiting for its worker); the timer finishes."""
        follow = self.follow
        if follow is None or self._ending is not None:
            return
        try:
            follow.request_stop()
        except Exception as exc:  # a source that failed to disconnect: said, never raised
            detail = f"{detail} {sentence(plain_error_message(exc))}".strip()
        self._ending = Ending(keep, why, detail, time.monotonic())
        self._say(f"{why}: finishing the frames being processed...")
        self._update_buttons()
        self._timer.start()
        self._finish_if_ended()

    def _finish_if_ended(self) -> None:
        follow, ending = self.follow, self._ending
        if follow is None or ending is None:
            return
        if not follow.ended:
            waited = time.monotonic() - ending.since
            if waited < GIVE_UP_S:
                return
            self._finish(f"nothing kept (still processing a frame after {waited:.0f} s)")
            return
        if not ending.keep:
            return self._finish("nothing kept")
        assert self.choice is not None
        try:
            status = follow.poll()
            result = follow.result()
            tuples = follow.result_layers(result, self.choice.name, self.choice.geometry())
            self.kept = add_kept_layers(self.viewer, tuples)
            self._counters(status.describe())
            # describe() may start with a verb ("converged after ..."): it follows a dash
            outcome, kept = f"kept the result — {result.describe()}", [result]
        except Exception as exc:  # the job's error, or no frame processed: said, never raised
            outcome, kept = f"nothing kept ({plain_error_message(exc)})", []
        self._finish(outcome)
        for result in kept:
            self.result_kept.emit(result)

    def _finish(self, outcome: str) -> None:
        ending = self._ending
        fired = None if self.follow is None else self.follow.session.good_enough
        if self.quality is not None:
            self.quality.poll()  # the last points
            self.quality.release()
        self._timer.stop()
        self.follow, self._ending = None, None
        if self.layer is not None and self.layer in self.viewer.layers:
            self.viewer.layers.remove(self.layer)
        self.layer = None
        self._update_buttons()
        why, detail = (ending.why, ending.detail) if ending is not None else ("Stopped", "")
        enough = f" It was {fired.describe()}." if fired is not None else ""
        self._say(f"{why}: {outcome}.{enough} {detail}".strip())

    def _say(self, text: str) -> None:
        self.status.setText(text)

    def _counters(self, text: str) -> None:
        if text != self.counters.text():
            self.counters.setText(text)

    def _opened(self, opened: bool) -> None:
        self.body.setVisible(opened)
        self.header.setArrowType(Qt.ArrowType.DownArrow if opened else Qt.ArrowType.RightArrow)

    def _update_buttons(self) -> None:
        running, stopping = self.running, self.stopping
        self.start_button.setEnabled(self.supported and not running and bool(self._choices))
        self.stop_button.setEnabled(running and not stopping)
        self.cancel_button.setEnabled(running and not stopping)
        for widget in self._fixed_while_running:
            widget.setEnabled(not running)
