"""A small live plot of a job's metrics (duality gap, loss...) against its step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter
from qtpy.QtCore import QSize, QTimer
from qtpy.QtWidgets import QSizePolicy, QVBoxLayout, QWidget

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from napari.components import ViewerModel

__all__ = ["MetricsPlot", "is_log_metric"]

_LOG_WORDS = ("gap", "loss", "residual", "error", "cost")


DARK = {"background": "#262930", "foreground": "#414851", "text": "#f0f1f2"}
"""Colours when napari's theme cannot be read (napari's dark theme)."""


def theme_colors(viewer: ViewerModel) -> dict[str, str]:
    """``{"background", "foreground", "text"}`` of the viewer's napari theme (CSS colours)."""
    try:
        from napari.utils.theme import get_theme

        theme = get_theme(viewer.theme)
        return {
            "background": theme.background.as_hex(),
            "foreground": theme.primary.as_hex(),
            "text": theme.text.as_hex(),
        }
    except Exception:  # a theme napari cannot resolve
        return dict(DARK)


def style_axes(figure: Figure, axes: Axes, colors: Mapping[str, str], *, size: int = 7) -> None:
    """A matplotlib figure and its axes in napari's theme (no white panel on the dark one)."""
    figure.set_facecolor(colors["background"])
    for ax in axes:
        ax.set_facecolor(colors["background"])
        for spine in ax.spines.values():
            spine.set_color(colors["foreground"])
        ax.tick_params(colors=colors["text"], labelsize=size)
        ax.xaxis.label.set_color(colors["text"])
        ax.yaxis.label.set_color(colors["text"])
        ax.title.set_color(colors["text"])
        legend = ax.get_legend()
        if legend is not None:
            legend.get_frame().set_facecolor(colors["background"])
            legend.get_frame().set_edgecolor(colors["foreground"])
            for text in legend.get_texts():
                text.set_color(colors["text"])


def is_log_metric(name: str) -> bool:
    """Whether a metric spans decades (a gap, a loss...) and is best read on a log axis."""
    return any(word in name.lower() for word in _LOG_WORDS)


def _words(name: str) -> str:
    return name.replace("_", " ")


class MetricsPlot(QWidget):
    """Plots ``Progress.metrics`` live against ``Progress.step``.

    One line per metric (a metric equal to the step, such as ``"iteration"``, is not plotted).
    Metrics that are gaps or losses (:func:`is_log_metric`) use a log axis when all of them do.
    A step that goes backwards (the next chunk of a chunked run) starts a new segment. Redraws
    are throttled, so a fast job does not flood the GUI.

    Parameters
    ----------
    colors : mapping, optional
        ``{"background", "foreground", "text"}`` colours (napari's theme), as CSS strings.
    """

    def __init__(self, colors: Mapping[str, str] | None = None) -> None:
        super().__init__()
        colors = DARK | dict(colors or {})
        self.figure = Figure(figsize=(3.2, 1.5), dpi=90, facecolor=colors["background"])
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.canvas.setFixedHeight(130)
        self.axes = self.figure.add_subplot()
        self._colors = colors
        self.series: dict[str, tuple[list[float], list[float]]] = {}
        self.targets: dict[str, float] = {}
        self.title = ""
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(150)
        self._timer.timeout.connect(self.redraw)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.canvas)
        self.reset()

    def reset(
        self,
        title: str = "",
        targets: Mapping[str, float] | None = None,
        step_label: str = "step",
    ) -> None:
        """Clear the plot for a new job.

        ``title`` prefixes the metric names above the plot, ``targets`` draws a dashed line per
        metric (a tolerance it must reach), ``step_label`` names the x axis.
        """
        self.series = {}
        self.targets = dict(targets or {})
        self.title = title
        self.step_label = step_label
        self.redraw()

    def retitle(self, title: str) -> None:
        """Change the title's prefix, keeping the series (e.g. "Last run: " once a preview's
        status replaces the run's)."""
        if title != self.title:
            self.title = title
            self.redraw()

    def add(self, step: float | None, metrics: Mapping[str, float]) -> None:
        """Append one update's metrics (``step`` None: the update's index)."""
        for name, value in metrics.items():
            if step is not None and name in ("iteration", "step") and value == step:
                continue
            xs, ys = self.series.setdefault(name, ([], []))
            x = float(step) if step is not None else float(len(xs))
            if xs and not math.isnan(xs[-1]) and x < xs[-1]:  # a new chunk: new segment
                xs.append(math.nan)
                ys.append(math.nan)
            xs.append(x)
            ys.append(float(value))
        if not self._timer.isActive():
            self._timer.start()

    @property
    def log_scale(self) -> bool:
        """Whether the y axis is logarithmic."""
        return bool(self.series) and all(is_log_metric(name) for name in self.series)

    def redraw(self) -> None:
        """Draw the current series now."""
        axes, colors = self.axes, self._colors
        axes.clear()
        axes.set_facecolor(colors["background"])
        for spine in axes.spines.values():
            spine.set_color(colors["foreground"])
        axes.tick_params(colors=colors["text"], labelsize=7)
        log = self.log_scale
        for name, (xs, ys) in self.series.items():
            if log:
                ys = [y if y > 0 else math.nan for y in ys]
            axes.plot(xs, ys, linewidth=1.2, label=_words(name))
            if name in self.targets and self.targets[name] > 0:
                axes.axhline(
                    self.targets[name], linestyle="--", linewidth=0.8, color=colors["text"]
                )
        axes.set_yscale("log" if log else "linear")
        if log:  # labelled minor ticks ("6x10^-3 ... 2x10^-3") overlapped in 130 px
            axes.yaxis.set_minor_formatter(NullFormatter())
        axes.set_xlabel(self.step_label if self.series else "", color=colors["text"], fontsize=7)
        if self.series and all(
            float(x).is_integer() for xs, _ in self.series.values() for x in xs if math.isfinite(x)
        ):  # counted steps (passes, iterations): no "2.25" pass between two
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        if self.series:
            names = ", ".join(_words(name) for name in self.series)
            axes.set_title(f"{self.title}{names}", color=colors["text"], fontsize=8)
        if len(self.series) > 1:  # which line is which: the title's order is not the colours'
            axes.legend(
                fontsize=6, frameon=False, handlelength=1.2, labelcolor=colors["text"], loc="best"
            )
        self.figure.tight_layout(pad=0.4)
        self.canvas.draw_idle()

    def values(self, name: str) -> list[float]:
        """The plotted values of one metric (NaN separates segments)."""
        return list(self.series.get(name, ([], []))[1])

    def sizeHint(self) -> QSize:
        """Narrow: the plot follows the dock's width, never sets it."""
        hint = super().sizeHint()
        hint.setWidth(200)
        return hint
