"""The lower part of every dock: buttons, options, progress in words, status line, metrics
plot and export buttons.

:class:`DockPanel` is a view: it knows nothing of the dock. The dock connects to its buttons'
and boxes' Qt signals (``run_button.clicked``, ``live_preview.toggled``...) and tells it what to
show (:meth:`DockPanel.update_buttons`, :meth:`DockPanel.show_progress`...)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from qtpy.QtCore import QObject, Qt, QTimer
from qtpy.QtWidgets import (
    QAbstractButton,
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLayout,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.dock.messages import progress_text
from napari_gpuscope.widgets._controls import MetricsPlot
from napari_gpuscope.widgets._controls._plot import theme_colors

if TYPE_CHECKING:
    import napari.viewer

    from napari_gpuscope.compute.jobs import Progress
    from napari_gpuscope.widgets._runner import JobRunner

__all__ = ["DockPanel", "focus_chain"]

_STEPS = 1000


def _wrapping_label(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    # Copyable (users paste it into notes and bug reports), and a long text wraps instead of
    # widening the dock.
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    label.setMinimumWidth(100)
    return label


def _button(text: str, tooltip: str) -> QPushButton:
    button = QPushButton(text)
    button.setToolTip(tooltip)
    return button


class DockPanel:
    """The widgets below a dock's parameters (and its "Reset to defaults" button).

    Parameters
    ----------
    title : str
        The method's title (tooltips).
    viewer : napari.viewer.Viewer
        For the plot's theme colours.
    supports_stop : bool
        Whether the method's run can stop early and keep its result (shows Stop & keep).
    parent : QObject
        Owner of the elapsed-time clock.
    """

    def __init__(
        self, title: str, viewer: napari.viewer.Viewer, *, supports_stop: bool, parent: QObject
    ) -> None:
        self.live_preview = QCheckBox("Live preview")
        self.live_preview.setToolTip(
            "Re-run a quick preview of the displayed plane whenever a parameter or the plane "
            "changes (Enter refreshes it)"
        )
        self.run_button = _button("Run", f"Run {title} on the whole input layer (Enter)")
        self.stop_button = _button(
            "Stop && keep",
            "Finish the running job now and keep its result so far (marked as stopped early)",
        )
        self.stop_button.setVisible(supports_stop)
        self.cancel_button = _button(
            "Cancel",
            "Stop the running job and discard its partial result; earlier results are kept (Esc)",
        )
        self.replace_last = QCheckBox("Replace last result")
        self.replace_last.setToolTip(
            "Off: every Run makes a new layer named after its key parameter, so results can be "
            "compared. On: Run overwrites the previous result layer."
        )
        self.link_display = QCheckBox("Link display to input")
        self.link_display.setChecked(True)
        self.link_display.setToolTip(
            "Results and preview use the input's colormap and contrast limits, linked: changing "
            "one changes all, so comparisons are honest. Untick to adjust them separately."
        )
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, _STEPS)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setMaximumHeight(12)
        self.progress_bar.setToolTip("Progress of the running job (preview or full run)")
        self.elapsed = QLabel("")
        self.elapsed.setToolTip("Elapsed time of the running (or last) job")
        self.progress = _wrapping_label()
        self.progress.setToolTip("How far the running job is, in words")
        self.progress.setVisible(False)
        self.status = _wrapping_label("Ready.")
        self.plot = MetricsPlot(theme_colors(viewer))
        self.plot.setToolTip("Convergence of the running (or last) job")
        self.plot.setVisible(False)
        self.figure_button = _button(
            "Export figure...",
            "Save the visible panels as a PNG figure at a whole zoom (chosen DPI or print width), "
            "with scale bar, colorbar and the processing parameters (provenance) alongside",
        )
        self.save_tiff_button = _button(
            "Save TIFF...",
            "Save the latest result layer as a TIFF file (float32 or uint16), with its pixel "
            "size and processing parameters",
        )
        self.reset_button = _button(
            "Reset to defaults",
            "Set every parameter to its default (the spacing comes from the layer again) and "
            "forget the saved settings",
        )
        self._clock = QTimer(parent)
        self._clock.setInterval(200)
        self._clock.timeout.connect(self._tick)
        self._runner: JobRunner | None = None

    def add_to(self, layout: QVBoxLayout) -> None:
        """Lay the panel out below the parameters."""
        buttons = QHBoxLayout()
        buttons.addWidget(self.live_preview)
        buttons.addStretch(1)
        for button in (self.run_button, self.stop_button, self.cancel_button):
            buttons.addWidget(button)
        options = QHBoxLayout()
        options.addWidget(self.replace_last)
        options.addWidget(self.link_display)
        options.addStretch(1)
        bar = QHBoxLayout()
        bar.addWidget(self.progress_bar, stretch=1)
        bar.addWidget(self.elapsed)
        exports = QHBoxLayout()
        exports.addWidget(self.figure_button)
        exports.addWidget(self.save_tiff_button)
        for row in (buttons, options, bar):
            layout.addLayout(row)
        for widget in (self.progress, self.status, self.plot):
            layout.addWidget(widget)
        layout.addLayout(exports)

    # -- state --------------------------------------------------------------------------------
    def update_buttons(
        self,
        *,
        can_run: bool,
        running: bool,
        full_run: bool,
        preview_supported: bool,
        preview_possible: bool,
        reason: str | None,
    ) -> None:
        """Enable what can be used now; a disabled Run says why in its tooltip. A method
        without a preview shows no live-preview toggle."""
        self.run_button.setEnabled(can_run)
        self.run_button.setToolTip(reason or "Run on the whole input layer (Enter)")
        self.cancel_button.setEnabled(running)
        self.stop_button.setEnabled(full_run)
        self.live_preview.setVisible(preview_supported)
        self.live_preview.setEnabled(preview_supported and preview_possible)
        if not (preview_supported and preview_possible) and self.live_preview.isChecked():
            self.live_preview.setChecked(False)

    def options(self) -> dict[str, bool]:
        """The dock options worth saving."""
        return {
            "replace_last": self.replace_last.isChecked(),
            "link_display": self.link_display.isChecked(),
        }

    def apply_options(self, options: Mapping[str, object]) -> None:
        """Restore saved options (unknown or invalid entries are ignored)."""
        for key, box in (("replace_last", self.replace_last), ("link_display", self.link_display)):
            if isinstance(options.get(key), bool):
                box.setChecked(options[key])

    # -- progress -----------------------------------------------------------------------------
    def show_progress(self, update: Progress) -> None:
        """A percentage, or Qt's busy bar and "no estimate" when the job cannot say."""
        if update.fraction is None:
            self.progress_bar.setRange(0, 0)
        else:
            self.progress_bar.setRange(0, _STEPS)
            self.progress_bar.setValue(round(update.fraction * _STEPS))
        self._progress_text(progress_text(update))

    def show_done(self) -> None:
        """The job finished: a full bar, no progress text."""
        self.progress_bar.setRange(0, _STEPS)
        self.progress_bar.setValue(_STEPS)
        self._progress_text("")

    def start_clock(self, runner: JobRunner) -> None:
        """Show the elapsed time of ``runner``'s job until :meth:`stop_clock`."""
        self._runner = runner
        self.progress_bar.setRange(0, _STEPS)
        self.progress_bar.setValue(0)
        self._progress_text("starting")
        self._clock.start()
        self._tick()

    def stop_clock(self, elapsed: float | None = None) -> None:
        """Stop the clock; show the final time (or nothing)."""
        self._clock.stop()
        self.elapsed.setText("" if elapsed is None else f"{elapsed:.2f} s")
        if elapsed is None:
            self.progress_bar.setRange(0, _STEPS)
            self.progress_bar.setValue(0)
            self._progress_text("")

    def _progress_text(self, text: str) -> None:
        self.progress.setText(text)
        self.progress.setVisible(bool(text))  # no empty line between the bar and the status

    def _tick(self) -> None:
        started = self._runner.started_at if self._runner is not None else None
        if started is not None:
            self.elapsed.setText(f"{time.perf_counter() - started:.1f} s")

    # -- keyboard -----------------------------------------------------------------------------
    def set_tab_order(self, dock: QWidget) -> None:
        """Tab moves through the dock top to bottom, left to right."""
        chain = focus_chain(dock.layout())
        for first, second in itertools.pairwise(chain):
            QWidget.setTabOrder(first, second)


def focus_chain(layout: QLayout | None) -> list[QWidget]:
    """The focusable widgets of ``layout``, in reading order."""
    if layout is None:
        return []
    if isinstance(layout, QFormLayout):
        items = [
            layout.itemAt(row, role)
            for row in range(layout.rowCount())
            for role in (
                QFormLayout.ItemRole.LabelRole,
                QFormLayout.ItemRole.FieldRole,
                QFormLayout.ItemRole.SpanningRole,
            )
        ]
    else:
        items = [layout.itemAt(index) for index in range(layout.count())]
    chain: list[QWidget] = []
    for item in items:
        if item is None:
            continue
        if item.layout() is not None:
            chain += focus_chain(item.layout())
            continue
        widget = item.widget()
        if widget is None:
            continue
        if widget.layout() is not None:
            chain += focus_chain(widget.layout())
        elif widget.focusPolicy() & Qt.FocusPolicy.TabFocus or isinstance(widget, QAbstractButton):
            chain.append(widget)
    return chain
