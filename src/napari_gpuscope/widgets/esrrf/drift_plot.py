"""The eSRRF dock's drift plot: dy and dx (input pixels) against the frame, live and final.

While drift is estimated, each finished block's shift appears at its centre frame; the finished
trace (every frame, interpolated between the blocks) replaces them, with the measured blocks as
dots. With a physical pixel size the right axis reads the same drift in the layer's unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
from matplotlib.figure import Figure
from qtpy.QtWidgets import QSizePolicy

from napari_gpuscope.widgets._controls._plot import DARK, style_axes

if TYPE_CHECKING:
    from napari_gpuscope.compute.esrrf import DriftResult

__all__ = ["DriftPlot"]

_COLOURS = {"dy": "#4fc3f7", "dx": "#ffb74d"}
"""dy and dx: distinguishable on napari's dark and light themes, and for most colour vision."""


class DriftPlot(FigureCanvasQTAgg):
    """dy, dx (px) against the frame.

    Parameters
    ----------
    colors : mapping, optional
        ``{"background", "foreground", "text"}`` of napari's theme
        (:func:`~napari_gpuscope.widgets._controls._plot.theme_colors`).

    Attributes
    ----------
    frames, dy, dx : numpy.ndarray
        What the lines show now (block centres while estimating, every frame once finished).
    """

    def __init__(self, colors: Mapping[str, str] | None = None) -> None:
        self.colors = {**DARK, **dict(colors or {})}
        self.figure = Figure(figsize=(3.4, 1.9), dpi=90, layout="constrained")
        super().__init__(self.figure)
        self.setMinimumSize(120, 170)  # never wider than the dock: the figure follows it
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.frames = self.dy = self.dx = np.zeros(0)
        self._live: list[tuple[float, float, float]] = []
        self._blocks: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._pixel: tuple[float, str] | None = None
        self.title = ""
        self._draw()

    def start(self, title: str) -> None:
        """Clear for a new estimate titled ``title``."""
        self._live, self._blocks, self.title = [], None, title
        self._set(np.zeros(0), np.zeros((0, 2)))

    def add_block(self, frame: float, dy: float, dx: float) -> None:
        """One measured block (its centre frame and shift, px) while the estimate runs."""
        self._live.append((float(frame), float(dy), float(dx)))
        live = np.array(self._live)
        self._set(live[:, 0], live[:, 1:])

    def show_trace(
        self, trace: DriftResult, title: str, pixel: tuple[float, str] | None = None
    ) -> None:
        """The finished trace: every frame, the measured blocks as dots and the blocks without
        structure (interpolated, :attr:`DriftResult.measured` False) as hollow circles
        (estimated traces); ``pixel`` = (size, unit) adds the right axis in that unit."""
        self.title, self._pixel, self._live = title, pixel, []
        shifts = np.asarray(trace.shifts, dtype=np.float64)
        self._blocks = None
        if trace.params is not None and len(trace.block_frames) < len(shifts):
            centres = np.array([(a + b - 1) / 2 for a, b in trace.block_frames], np.float64)
            measured = trace.measured
            if measured is None:
                measured = np.ones(len(centres), bool)
            self._blocks = (
                centres,
                np.asarray(trace.block_shifts, np.float64),
                np.asarray(measured, bool),
            )
        self._set(np.arange(len(shifts), dtype=np.float64), shifts)

    def _set(self, frames: np.ndarray, shifts: np.ndarray) -> None:
        self.frames = frames
        shifts = np.asarray(shifts, np.float64).reshape(-1, 2)
        self.dy, self.dx = shifts[:, 0].copy(), shifts[:, 1].copy()
        self._draw()

    def _draw(self) -> None:
        self.figure.clear()
        axes = self.figure.add_subplot()
        live = bool(self._live)
        for name, values in (("dy", self.dy), ("dx", self.dx)):
            style = ".-" if live else "-"
            axes.plot(self.frames, values, style, color=_COLOURS[name], lw=1.3, ms=4, label=name)
        if self._blocks is not None:
            centres, shifts, measured = self._blocks
            for k, name in enumerate(("dy", "dx")):
                colour = _COLOURS[name]
                axes.plot(centres[measured], shifts[measured, k], "o", color=colour, ms=3)
                axes.plot(
                    centres[~measured],
                    shifts[~measured, k],
                    "o",
                    color=colour,
                    markerfacecolor="none",
                    ms=5,
                    label="not measured (interpolated)" if k == 0 and (~measured).any() else None,
                )
        axes.axhline(0.0, color=self.colors["foreground"], lw=0.8)
        axes.set_xlabel("frame", fontsize=8)
        axes.set_ylabel("drift (px)", fontsize=8)
        if self.title:
            axes.set_title(self.title, fontsize=8)
        if len(self.frames):
            axes.legend(fontsize=7, loc="best", ncols=2)
        if self._pixel is not None and not live:
            size, unit = self._pixel
            right = axes.secondary_yaxis(
                "right", functions=(lambda v, s=size: v * s, lambda v, s=size: v / s)
            )
            right.set_ylabel(f"drift ({unit})", fontsize=8, color=self.colors["text"])
            # Not style_axes: a secondary axis's own background would cover the lines.
            right.tick_params(colors=self.colors["text"], labelsize=7)
            right.spines["right"].set_color(self.colors["foreground"])
        style_axes(self.figure, (axes,), self.colors)
        self.draw_idle()
