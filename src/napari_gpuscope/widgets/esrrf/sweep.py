"""The eSRRF dock's "Parameter sweep" panel: radius x sensitivity heatmaps of FRC, RSP, QnR
and the decorrelation resolution.

The sweep (the registry's ``sweep`` job, :func:`~napari_gpuscope.compute.esrrf.iter_sweep` with
a :class:`~napari_gpuscope.compute.esrrf.SweepParams`) runs as one job of the
dock, on the dock's one runner (``start_job`` of
:class:`~napari_gpuscope.dock.context.DockContext`: refused while a run holds the device),
on the visible region of the input (at most 128 input pixels per side, as the live preview)
and the first N frames; each heatmap cell appears as soon as it is computed, Stop & keep ends
it keeping the cells done, and clicking a cell puts its radius and sensitivity into the dock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from qtpy.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from superqt import QCollapsible

from napari_gpuscope.compute.esrrf import visible_region
from napari_gpuscope.compute.jobs import Progress
from napari_gpuscope.dock.jobs import JobHandlers
from napari_gpuscope.dock.messages import plain_error_message
from napari_gpuscope.widgets._controls._plot import style_axes, theme_colors
from napari_gpuscope.widgets.esrrf.drift import channel_axis

if TYPE_CHECKING:
    from napari_gpuscope.compute.esrrf import SweepResult
    from napari_gpuscope.dock.context import DockContext

__all__ = ["SweepPanel", "parse_values"]

_MAPS = (
    ("frc_resolution", "FRC resolution ({unit}, lower is better)", "viridis_r"),
    ("rsp", "RSP (higher is better)", "viridis"),
    ("qnr", "QnR (higher is better)", "magma"),
    # From one image (the whole stack's), where the FRC needs two; not part of QnR.
    ("decorr_resolution", "Decorrelation resolution ({unit}, lower is better)", "viridis_r"),
)
# What a cell's text calls each map: the measure and its unit, not the heatmap's title.
_CELL_WORDS = {
    "frc_resolution": "FRC {value:.3g} {unit}",
    "rsp": "RSP {value:.3f}",
    "qnr": "QnR {value:.3f}",
    "decorr_resolution": "decorrelation {value:.3g} {unit}",
}


def parse_values(text: str, name: str) -> tuple[float, ...]:
    """``"1, 1.5 2"`` -> ``(1.0, 1.5, 2.0)``; a clear error otherwise.

    Examples
    --------
    >>> parse_values("1, 1.5 2", "radii")
    (1.0, 1.5, 2.0)
    """
    parts = [p for p in text.replace(";", ",").replace(",", " ").split() if p]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a list of numbers (e.g. '1, 1.5, 2')") from None
    if not values:
        raise ValueError(f"{name}: give at least one value (e.g. '1, 1.5, 2')")
    return values


class SweepPanel(QCollapsible):
    """The collapsible sweep section of the eSRRF dock.

    Parameters
    ----------
    dock : DockContext
        The dock as its parts see it: input, device, parameters and its one runner.
    """

    def __init__(self, dock: DockContext) -> None:
        super().__init__("Parameter sweep", expandedIcon="▾", collapsedIcon="▸")
        self.dock = dock
        self.running = False
        self.result: SweepResult | None = None
        self.radii: tuple[float, ...] = ()
        self.sensitivities: tuple[float, ...] = ()
        self.grids: dict[str, np.ndarray] = {}

        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 0, 0, 0)
        form = QFormLayout()
        self.radii_edit = QLineEdit("1, 1.5, 2, 2.5")
        self.radii_edit.setToolTip("Radii to try, in input pixels (comma-separated)")
        self.sensitivities_edit = QLineEdit("1, 2, 4")
        self.sensitivities_edit.setToolTip("Sensitivities to try (comma-separated)")
        self.frames_box = QSpinBox()
        self.frames_box.setRange(4, 100_000)
        self.frames_box.setValue(100)
        self.frames_box.setToolTip(
            "The first N frames are used: even and odd frames are reconstructed separately "
            "(their FRC is the resolution), all of them for RSP"
        )
        form.addRow("Radii", self.radii_edit)
        form.addRow("Sensitivities", self.sensitivities_edit)
        form.addRow("Frames", self.frames_box)
        layout.addLayout(form)
        buttons = QHBoxLayout()
        self.run_button = QPushButton("Run sweep")
        self.run_button.setToolTip("Sweep the visible region (at most 128 x 128 input pixels)")
        self.run_button.clicked.connect(self.run)
        self.stop_button = QPushButton("Stop && keep")
        self.stop_button.setToolTip("Stop after the current setting, keeping the cells done")
        self.stop_button.clicked.connect(self.stop)
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        layout.addLayout(buttons)
        self.status = QLabel("Click a cell to use its radius and sensitivity.")
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(self.status)
        self.colors = theme_colors(dock.viewer)
        self.unit = "px"
        self.figure = Figure(
            figsize=(3.2, 8.0), layout="constrained", facecolor=self.colors["background"]
        )
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setMinimumSize(160, 560)
        # The figure follows the dock's width instead of widening it.
        self.canvas.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.canvas.setFixedHeight(610)
        self.canvas.mpl_connect("button_press_event", self._on_click)
        layout.addWidget(self.canvas)
        self.addWidget(body)
        self._update_buttons()

    # ---------------------------------------------------------------- running
    def run(self) -> bool:
        """Start the sweep on the dock's input (visible region, first N frames); return whether
        it started (False: the status says why, e.g. a run holds the device)."""
        dock = self.dock
        layer = dock.input_layer
        try:
            if dock.device is None:
                raise ValueError("no usable CUDA GPU (see the device row)")
            if layer is None:
                raise ValueError("no input image")
            dock.validate_input(layer, check_values=False)
            radii = parse_values(self.radii_edit.text(), "radii")
            sensitivities = parse_values(self.sensitivities_edit.text(), "sensitivities")
            # The registry's sweep job with its own model: the grid and the dock's eSRRF
            # parameters, held fixed (what a recipe of job "sweep" holds too).
            sweep = dock.spec.job_spec("sweep")
            params = sweep.params_class().from_dict(
                {**dock.params().to_dict(), "radii": radii, "sensitivities": sensitivities}
            )
            data = layer.data
            if layer.ndim == 4:  # channels: the sweep tunes on channel 0
                data = data[0] if channel_axis(layer) == 0 else data[:, 0]
            shape = tuple(np.shape(data))
            corners = np.asarray(getattr(layer, "corner_pixels", np.zeros((2, 3))))[:, -3:]
            region = visible_region(shape, corners, 0)
            frames = min(self.frames_box.value(), shape[0])
            (r0, r1), (c0, c1) = region.rows, region.cols
            crop = data[:frames, r0:r1, c0:c1]
            # FRC resolutions come in the layer's x scale: its unit, or "px" at scale 1.
            units = getattr(layer, "units", None) or ()
            unit = str(units[-1]) if len(units) else "pixel"
            if unit == "pixel" and float(layer.scale[-1]) != 1.0:
                unit = "scale units"
            self.unit = {"micrometer": "µm", "nanometer": "nm", "pixel": "px"}.get(unit, unit)
            job = sweep.job_function()(
                crop,
                params=params,
                pixel_size=float(layer.scale[-1]),
                unit="" if self.unit in ("px", "scale units") else self.unit,
                device=dock.device,
            )
            handlers = JobHandlers(
                succeeded=self._on_done,
                failed=self._on_failed,
                progressed=self._on_progress,
                ended=self._on_ended,
            )
            dock.start_job(
                "sweep",
                job,
                title="The eSRRF sweep",
                description=f"eSRRF sweep: {layer.name}",
                handlers=handlers,
                layer=layer,
                params=params,
                wanted=lambda _: True,
            )
        except ValueError as exc:  # JobRefused included
            self.status.setText(f"The sweep cannot start: {exc}")
            return False
        self.running = True
        self.radii, self.sensitivities, self.result = radii, sensitivities, None
        self.grids = {name: np.full((len(sensitivities), len(radii)), np.nan) for name, *_ in _MAPS}
        self._draw()
        self.status.setText(
            f"Sweeping {len(radii) * len(sensitivities)} settings on {frames} frames of "
            f"{r1 - r0} x {c1 - c0} pixels..."
        )
        self._update_buttons()
        return True

    def _on_progress(self, update: Progress) -> None:
        changed = False
        for name, output in update.outputs.items():
            grid = self.grids.get(name)
            if grid is None or output.is_lazy:
                continue
            if output.region is None:
                grid[...] = output.array()
            else:
                grid[output.region] = output.array()
            changed = True
        if update.message:
            self.status.setText(update.message)
        if changed:
            self._draw()

    def _on_done(self, result: SweepResult, elapsed: float) -> None:
        self.result = result
        self.grids = {name: np.asarray(getattr(result, name)) for name, *_ in _MAPS}
        self._draw()
        self.status.setText(
            f"{result.describe()[:1].upper()}{result.describe()[1:]}. Took {elapsed:.1f} s. "
            "Click a cell to use it."
        )

    def _on_failed(self, exc: BaseException) -> None:
        self.status.setText(f"The sweep failed: {plain_error_message(exc)}")

    def _on_ended(self) -> None:
        self.running = False
        self._update_buttons()

    def stop(self) -> None:
        """Stop & keep: end the running sweep after the current setting, keeping its cells."""
        if self.running:
            self.dock.stop()

    def _update_buttons(self, *_: Any) -> None:
        self.run_button.setEnabled(not self.running)
        self.stop_button.setEnabled(self.running)

    # ---------------------------------------------------------------- heatmaps
    def _draw(self) -> None:
        self.figure.clear()
        if not self.grids:
            self.canvas.draw_idle()
            return
        best = None
        qnr = self.grids.get("qnr")
        if qnr is not None and np.isfinite(qnr).any():
            best = np.unravel_index(np.nanargmax(qnr), qnr.shape)
        shown = [entry for entry in _MAPS if entry[0] in self.grids]
        if not shown:
            self.canvas.draw_idle()
            return
        axes = np.atleast_1d(self.figure.subplots(len(shown), 1, sharex=True))
        for ax, (name, title, cmap) in zip(axes, shown, strict=True):
            grid = np.ma.masked_invalid(self.grids[name])
            image = ax.imshow(grid, cmap=cmap, origin="lower", aspect="auto")
            if grid.count():  # an empty grid's colorbar would read -0.1 .. 0.1
                bar = self.figure.colorbar(image, ax=ax, shrink=0.9)
                bar.ax.tick_params(colors=self.colors["text"], labelsize=7)
            ax.set_title(title.format(unit=self.unit), fontsize=8)
            ax.set_yticks(range(len(self.sensitivities)), [f"{s:g}" for s in self.sensitivities])
            ax.set_ylabel("sensitivity", fontsize=7)
            ax.tick_params(labelsize=7)
            if best is not None:
                i, j = best
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="cyan", lw=1.5))
        axes[-1].set_xticks(range(len(self.radii)), [f"{r:g}" for r in self.radii])
        axes[-1].set_xlabel("radius (px)", fontsize=7)
        style_axes(self.figure, axes, self.colors)
        self._axes = list(axes)
        self.canvas.draw_idle()

    def _on_click(self, event: Any) -> None:
        if event.inaxes is None or event.xdata is None or not self.radii:
            return
        self.apply_cell(round(event.ydata), round(event.xdata))

    def apply_cell(self, row: int, column: int) -> None:
        """Put the radius and sensitivity of heatmap cell ``(row, column)`` into the dock."""
        if not (0 <= row < len(self.sensitivities) and 0 <= column < len(self.radii)):
            return
        self.dock.set_param("radius", self.radii[column])
        self.dock.set_param("sensitivity", self.sensitivities[row])
        facts = ", ".join(
            _CELL_WORDS[name].format(value=self.grids[name][row, column], unit=self.unit)
            for name, _, _ in _MAPS
            if name in self.grids and np.isfinite(self.grids[name][row, column])
        )
        self.status.setText(
            f"Using radius {self.radii[column]:g}, sensitivity {self.sensitivities[row]:g}"
            + (f" ({facts})." if facts else ".")
        )
