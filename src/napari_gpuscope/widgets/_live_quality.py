"""The eSRRF dock's live quality: the running reconstruction's resolution (and its RSP error
and estimated error) against the frames processed, and "Say when more frames stop helping".

A part of the Live acquisition part (:mod:`._live_acquisition`), polled by its GUI timer: it
reads the session's quality track (:meth:`napari_gpuscope.live.LiveSession.track`, measured in
the session's worker) and plots the new points with the plugin's live plot
(:class:`~napari_gpuscope.widgets._controls._plot.MetricsPlot`). The checkbox applies the
plateau rule (:class:`napari_gpuscope.live.PlateauRule`) to the session, from the start or
while it runs; the status line says when it fires. Neither stops the acquisition.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from qtpy.QtWidgets import QCheckBox, QVBoxLayout, QWidget

from napari_gpuscope.export.lengths import unit_symbol
from napari_gpuscope.live import PlateauRule
from napari_gpuscope.widgets._controls._plot import MetricsPlot, theme_colors
from napari_gpuscope.widgets._dock_parts import _wrapping_label

if TYPE_CHECKING:
    from napari.components import ViewerModel

    from napari_gpuscope.compute.results import Geometry
    from napari_gpuscope.live import GoodEnough, LiveSession, QualityPoint

__all__ = ["LiveQualityView", "TrackPlot", "resolution_words"]

_MICRO = ("µm",)  # after unit_symbol: napari's "micrometer" and "um" are "µm"


def _scale(geometry: Geometry | None) -> tuple[float | None, str]:
    """The frames' pixel size and unit (None, "" when the source says none)."""
    if geometry is None or geometry.scale is None or len(geometry.scale) < 2:
        return None, ""
    pixel = float(geometry.scale[-1])
    unit = unit_symbol(geometry.units[-1]) if geometry.units else ""
    return (pixel, unit) if pixel > 0 and unit and unit != "px" else (None, "")


def resolution_words(point: QualityPoint, pixel: float | None, unit: str, m: int) -> str:
    """The point's decorrelation resolution in words: ``"84 nm"``, ``"2.1 output px (limited
    by the pixel grid)"``, ``"none (no peak)"``."""
    value = point.resolution_px
    if not math.isfinite(value):
        return f"none ({point.finding or 'no peak'})"
    if pixel is None:
        text = f"{value:.3g} output px"
    else:
        length = value * pixel / m
        text = f"{length * 1000:.3g} nm" if unit in _MICRO else f"{length:.3g} {unit}"
    return f"{text} ({point.finding})" if point.finding else text



def resolution_title(finding: str) -> str:
    """The resolution plot's title for the latest point's ``finding`` (``QualityPoint``):
    "Live" for a resolution, "Pixel-grid limited" at the grid's limit, "No resolution" when
    there is no peak or the measurement failed."""
    if not finding:
        return "Live"
    return "Pixel-grid limited" if finding == "limited by the pixel grid" else "No resolution"

class TrackPlot(MetricsPlot):
    """The plugin's live plot with a dot per measurement and the frames axis from 0: the
    first measurement alone drew nothing, on an axis of 9.45-10.50 frames."""

    def redraw(self) -> None:
        super().redraw()
        frames = [x for xs, _ in self.series.values() for x in xs if math.isfinite(x)]
        for line in self.axes.get_lines():
            line.set_marker("o")
            line.set_markersize(3)
        if frames:
            self.axes.set_xlim(0, max(frames) * 1.05)
        self.canvas.draw_idle()


class LiveQualityView(QWidget):
    """The plot and the checkbox; :meth:`follow` a session, :meth:`poll` it.

    Parameters
    ----------
    viewer : ViewerModel
        For the plot's colours (napari's theme).
    """

    def __init__(self, viewer: ViewerModel) -> None:
        super().__init__()
        self.good_enough_box = QCheckBox("Say when more frames stop helping")
        self.rule: PlateauRule | None = None
        """The rule applied when ticked (None: the session's default, :meth:`follow`)."""
        self.good_enough_box.setToolTip(
            "Measure the running reconstruction every few frames and say when "
            f"{PlateauRule().describe()}: the error against the truth estimated from the "
            "disagreement of two halves of the frames (the noise more frames remove) on a "
            "floor estimated from the RSP error (1 - the resolution-scaled Pearson correlation "
            f"with the widefield mean). For VAR and TAC2: when {PlateauRule.rsp().describe()}. "
            "The acquisition goes on; a script can stop it (session.on_good_enough)."
        )
        colors = theme_colors(viewer)
        self.plot = TrackPlot(colors)
        self.plot.setToolTip(
            "The running reconstruction's decorrelation resolution, measured every few frames "
            "(on an eSRRF image it mostly measures the output pixel grid: the status says so)"
        )
        self.error_plot = TrackPlot(colors)
        self.error_plot.setToolTip(
            "The running reconstruction's RSP error (1 - its resolution-scaled Pearson "
            "correlation with the widefield mean of the same frames) and, for AVG, its "
            "estimated error against the truth (1 - correlation; what the rule reads): both "
            "fall as the noise averages out and level off when more frames stop helping"
        )
        self.drift_label = _wrapping_label("")
        self.drift_label.setToolTip(
            "How far the sample has moved so far: each completed block of frames (the "
            "drift section's frames per block; 50 when automatic) correlated with the first, "
            "as the drift estimate does offline. Live results are not drift-corrected: the "
            "estimate over the whole stack needs every frame"
        )
        self.session: LiveSession | None = None
        self._shown = 0
        self._said: GoodEnough | None = None
        self._pixel: float | None = None
        self._unit = ""
        self._m = 1
        self._unit_words = "output px"
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.good_enough_box)
        layout.addWidget(self.drift_label)
        layout.addWidget(self.plot)
        layout.addWidget(self.error_plot)
        self.good_enough_box.toggled.connect(self._toggled)

    def follow(self, session: LiveSession, geometry: Geometry | None) -> None:
        """Plot ``session``'s track from now on (the plot is cleared), the resolution in the
        frames' unit (``geometry``'s pixel size) when there is one."""
        self.session, self._shown, self._said = session, 0, None
        self.drift_label.setText("")
        self._pixel, self._unit = _scale(geometry)
        if self._pixel is not None:  # the session's track_table says it in the layer's unit
            session.set_scale(self._pixel, self._unit)
        quality = session.quality
        self._m = 1 if quality is None else quality.magnification
        unit = (
            "output px" if self._pixel is None else ("nm" if self._unit in _MICRO else self._unit)
        )
        self._unit_words = unit
        self.plot.reset(f"Live ({unit}): ", step_label="frames processed")
        self.error_plot.reset("Live: ", step_label="frames processed")
        self._toggled(self.good_enough_box.isChecked())

    def release(self) -> None:
        """Stop following (the plot keeps its points)."""
        self.session = None

    def poll(self) -> str | None:
        """Plot the new points; the status line's words the first time the rule fired."""
        session = self.session
        if session is None:
            return None
        points = session.track()
        for point in points[self._shown :]:
            value = point.resolution_px
            if self._pixel is not None:
                value *= self._pixel / self._m * (1000 if self._unit in _MICRO else 1)
            # A rolling session's next time point starts a new segment (frames go back).
            self.plot.add(point.frames, {"decorrelation resolution": value})
            # "1 - RSP", not "RSP error": a log axis (MetricsPlot's for errors) over its narrow
            # range showed no tick labels.
            errors = {"1 - RSP": point.rsp_error}
            # Each point's estimate with its own floor: what the rule reads at that point.
            estimate = self._estimate(points, point)
            if math.isfinite(estimate):
                errors["estimated error"] = estimate
            self.error_plot.add(point.frames, errors)
        if points:  # the latest finding in the title: a grid-limited value is no resolution
            self.plot.retitle(f"{resolution_title(points[-1].finding)} ({self._unit_words}): ")
        self._shown = len(points)
        drift = session.drift_track()
        if drift is not None:
            pixel, unit = (self._pixel, self._unit) if self._pixel is not None else (1.0, "px")
            self.drift_label.setText(drift.describe(unit, pixel))
        fired = session.good_enough
        if fired is None or fired is self._said:
            return None
        self._said = fired
        words = resolution_words(fired.point, self._pixel, self._unit, self._m)
        return f"{fired.describe()[:1].upper()}{fired.describe()[1:]}; resolution {words}."

    @staticmethod
    def _estimate(points: list[QualityPoint], point: QualityPoint) -> float:
        same = [p for p in points if p.timepoint == point.timepoint and p.frames <= point.frames]
        return PlateauRule.estimates(same)[-1] if same else math.nan

    def _toggled(self, checked: bool) -> None:
        session = self.session
        quality = None if session is None else session.quality
        if quality is not None and quality.every > 0:
            quality.watch((self.rule or quality.default_rule()) if checked else None)
