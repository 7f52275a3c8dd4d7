"""What a dock's Live part (:mod:`._live_acquisition`) uses of its dock, and its list of
sources."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from qtpy.QtCore import Qt
from qtpy.QtWidgets import QComboBox, QFileDialog, QPushButton, QToolButton

from napari_gpuscope.provenance import PROVENANCE_KEY

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer
    import numpy as np

    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = [
    "Ending",
    "FolderButton",
    "LiveDock",
    "SourceBox",
    "add_kept_layers",
    "add_live_layer",
    "live_buttons",
    "section_header",
]


def section_header(text: str, tip: str) -> QToolButton:
    """A header that shows or hides a part below it (not superqt's QCollapsible: it fixes its
    content's height when it opens, and wrapped counters were cut off)."""
    header = QToolButton()
    header.setText(text)
    header.setCheckable(True)
    header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    header.setArrowType(Qt.ArrowType.RightArrow)
    header.setStyleSheet("QToolButton { border: none; }")
    header.setToolTip(tip)
    return header


def add_kept_layers(
    viewer: napari.viewer.Viewer, tuples: list[LayerDataTuple]
) -> list[napari.layers.Layer]:
    """Add a kept live result's layers; its first picture goes over the others (eSRRF's image
    over its widefield mean, as a run puts it), under its marks (arrows, tracks)."""
    kept = [getattr(viewer, f"add_{kind}")(data, **kwargs) for data, kwargs, kind in tuples]
    pictures = [layer for layer, (_, _, kind) in zip(kept, tuples, strict=True) if kind == "image"]
    if len(pictures) > 1:
        top = max(viewer.layers.index(layer) for layer in pictures)
        viewer.layers.move(viewer.layers.index(pictures[0]), top + 1)
    if pictures:  # its controls shown, as after a run
        viewer.layers.selection.active = pictures[0]
    return kept


def add_live_layer(
    viewer: napari.viewer.Viewer,
    image: np.ndarray,
    name: str,
    method_id: str,
    fit: bool,
    geometry: dict[str, Any],
) -> napari.layers.Image:
    """The layer a live session's image updates in place, coloured as its kept result will be
    (eSRRF magma; a live fit's flatfield viridis) and marked as the method's, as its results
    are: the dock's input never follows its own live layer."""
    colormap = {"esrrf": "magma"}.get(method_id, "viridis" if fit else "gray")
    metadata = {PROVENANCE_KEY: {"method": method_id, "live": "running"}}
    return viewer.add_image(image, name=name, colormap=colormap, metadata=metadata, **geometry)


def live_buttons() -> tuple[QPushButton, QPushButton, QPushButton]:
    """Start, Stop & keep and Cancel, each saying what it does to the acquisition (nothing)."""
    tips = {
        "Start": "Process the source's frames as they arrive, with the dock's parameters now",
        "Stop && keep": "Stop following and keep the result over the frames processed as a "
        "result layer; the acquisition goes on",
        "Cancel": "Stop following and discard the live result; the acquisition goes on",
    }
    start, stop, cancel = (QPushButton(text) for text in tips)
    for button, tip in zip((start, stop, cancel), tips.values(), strict=True):
        button.setToolTip(tip)
    return start, stop, cancel


@dataclass(frozen=True)
class Ending:
    """A stop asked for, waiting for the session's worker to finish its frame."""

    keep: bool
    why: str
    detail: str
    since: float


class LiveDock(Protocol):
    """What the Live part uses of its dock (a :class:`~napari_gpuscope.widgets.MethodDock`;
    a protocol, so that the dock's module and this one do not import each other). A dock
    whose live job takes other inputs (flat-field's profile) hands them over with
    :meth:`~napari_gpuscope.widgets._live_acquisition.LiveAcquisition.take_inputs_from`."""

    viewer: napari.viewer.Viewer
    method_id: str
    title: str
    short_title: str

    @property
    def device(self) -> str | None: ...

    def params(self) -> Params: ...

    def follows(self, layer: napari.layers.Layer) -> bool: ...


class SourceBox(QComboBox):
    """A combo box that refreshes its choices when it opens (cores and layers come and go)."""

    def __init__(self, refresh: Callable[[], None]) -> None:
        super().__init__()
        self._refresh = refresh
        self.setToolTip(
            "What to follow: a pymmcore-plus core of this session (napari-micromanager's, or "
            "one a script registered with napari_gpuscope.live.register_core) through its MDA "
            "or its continuous acquisition, an image layer that grows, or a folder chosen with "
            "Folder..."
        )
        # A long source name must not widen the dock past its panel (it clipped every row).
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(12)

    def showPopup(self) -> None:
        self._refresh()
        super().showPopup()


class FolderButton(QPushButton):
    """ "Folder...": asks for a folder an acquisition program writes TIFF files into and hands
    its path to ``chosen`` (nothing when the dialog is cancelled)."""

    def __init__(self, chosen: Callable[[str], None]) -> None:
        super().__init__("Folder...")
        self.setToolTip(
            "Follow a folder that another program (Micro-Manager, a camera's software) writes "
            "TIFF files into: each file's frames once it has stopped changing for 2 s"
        )
        self.clicked.connect(lambda *_: self._ask(chosen))

    def _ask(self, chosen: Callable[[str], None]) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder to follow")
        if folder:
            chosen(folder)
