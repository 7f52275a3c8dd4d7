"""The flat-field dock's "Apply profile" panel: a fitted or loaded profile onto any layer.

The correction runs in its own :class:`~napari_gpuscope.widgets._runner.JobRunner` (a fit and
an apply never share a worker); when it finishes, the corrected layer is added with its
provenance and the figure shows the shading left (the mean image's centre lines, before and
after) and, for time-lapses, each frame's mean before and after (the baseline).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from magicgui.widgets import CheckBox, ComboBox
from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
from matplotlib.figure import Figure
from qtpy.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
)

from napari_gpuscope.compute.devices import device_label
from napari_gpuscope.compute.flatfield import ShadingProfile, iter_correct
from napari_gpuscope.compute.jobs import Job, Progress
from napari_gpuscope.compute.results import Geometry, image_layer
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets._controls._layer_picker import LayerPicker
from napari_gpuscope.widgets._dock_parts import plain_error_message
from napari_gpuscope.widgets._runner import JobRunner

if TYPE_CHECKING:
    import napari.viewer

__all__ = ["ApplyPanel", "CorrectionResult", "ShadingFigure", "correction_job", "shading_stats"]


def _centre_lines(mean_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    normalised = mean_image / mean_image.mean()
    y, x = normalised.shape
    band_y, band_x = max(1, y // 20), max(1, x // 20)
    row = normalised[y // 2 - band_y // 2 : y // 2 + band_y // 2 + 1].mean(axis=0)
    column = normalised[:, x // 2 - band_x // 2 : x // 2 + band_x // 2 + 1].mean(axis=1)
    return row, column


def shading_stats(stack: Any) -> dict[str, Any]:
    """Mean image, its centre lines, coefficient of variation and per-frame means of a
    ``(T, Y, X)`` stack (float64 sums, frame by frame)."""
    total = np.zeros(stack.shape[-2:], dtype=np.float64)
    frame_means = np.empty(stack.shape[0], dtype=np.float64)
    for t in range(stack.shape[0]):
        frame = np.asarray(stack[t], dtype=np.float64)
        total += frame
        frame_means[t] = frame.mean()
    mean_image = total / stack.shape[0]
    row, column = _centre_lines(mean_image)
    cv = float(mean_image.std() / abs(mean_image.mean())) if mean_image.mean() else float("nan")
    return {"row": row, "column": column, "cv": cv, "frame_means": frame_means}


@dataclass(frozen=True)
class CorrectionResult:
    """A corrected stack and the before/after numbers the figure shows."""

    corrected: np.ndarray
    before: dict[str, Any]
    after: dict[str, Any]
    timelapse: bool

    def describe(self) -> str:
        return (
            f"corrected {self.corrected.shape[0]} images: shading of the mean image (CV) "
            f"{self.before['cv']:.3f} -> {self.after['cv']:.3f}"
        )


def correction_job(images: Any, profile: ShadingProfile, **options: Any) -> Job[CorrectionResult]:
    """Correct, then measure the shading before and after (in the worker thread).

    The shading after is measured on ``(image - darkfield) / flatfield`` also in timelapse
    mode: subtracting each frame's baseline moves the mean image towards 0, which says nothing
    about flatness. The frame means (the baseline plot) are those of the output.
    """
    corrected = yield from iter_correct(images, profile, **options)
    yield Progress(None, "measuring the shading left")
    stack = corrected if corrected.ndim == 3 else corrected.reshape(-1, *corrected.shape[-2:])
    source = images if getattr(images, "ndim", 3) == 3 else np.asarray(images).reshape(stack.shape)
    dark = np.asarray(profile.darkfield, dtype=np.float64)
    flat = np.asarray(profile.flatfield, dtype=np.float64)
    if dark.ndim == 3:  # several problems: the first one's profile shows the idea
        dark, flat = dark[0], flat[0]
    before = shading_stats(_Frames(source, dark, None))
    after = shading_stats(_Frames(source, dark, flat))
    after["frame_means"] = shading_stats(stack)["frame_means"]
    return CorrectionResult(corrected, before, after, options.get("timelapse", False))


class _Frames:
    """``(stack - dark) [/ flat]`` frame by frame, in float64."""

    def __init__(self, stack: Any, dark: np.ndarray, flat: np.ndarray | None) -> None:
        self.stack, self.dark, self.flat, self.shape = stack, dark, flat, stack.shape

    def __getitem__(self, t: int) -> np.ndarray:
        frame = np.asarray(self.stack[t], dtype=np.float64) - self.dark
        return frame if self.flat is None else frame / self.flat


class ShadingFigure(FigureCanvasQTAgg):
    """Two panels: the mean image's centre lines before/after, and per-frame means (baseline)."""

    def __init__(self) -> None:
        self.figure = Figure(figsize=(4.2, 2.4), dpi=90, layout="constrained")
        super().__init__(self.figure)
        self.setMinimumSize(120, 210)  # never wider than the dock: the figure follows it
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def show_profile(self, profile: ShadingProfile) -> None:
        """The fitted flatfield's centre lines and the fitted baseline."""
        self.figure.clear()
        flat = profile.flatfield if profile.flatfield.ndim == 2 else profile.flatfield[0]
        row, column = _centre_lines(flat.astype(np.float64))
        left, right = self.figure.subplots(1, 2)
        left.plot(np.linspace(0, 1, row.size), row, label="x centre line")
        left.plot(np.linspace(0, 1, column.size), column, label="y centre line")
        left.set_title("fitted flatfield", fontsize=9)
        left.set_xlabel("position (fraction of the image)", fontsize=8)
        left.legend(fontsize=7)
        baseline = np.atleast_2d(profile.baseline)
        if baseline.size:
            right.plot(baseline[0], ".-", markersize=3)
        right.set_title("fitted baseline", fontsize=9)
        right.set_xlabel("image", fontsize=8)
        right.set_ylabel("background level", fontsize=8)
        for axes in (left, right):
            axes.tick_params(labelsize=7)
        self.draw_idle()

    def show_correction(self, result: CorrectionResult) -> None:
        """Residual shading (centre lines of the normalised mean image) and frame means."""
        self.figure.clear()
        left, right = self.figure.subplots(1, 2)
        for stats, label, style in ((result.before, "raw", "--"), (result.after, "corrected", "-")):
            left.plot(
                np.linspace(0, 1, stats["row"].size),
                stats["row"],
                style,
                label=f"{label} (CV {stats['cv']:.3f})",
            )
        left.axhline(1.0, color="0.6", lw=0.8)
        left.set_title("shading left (mean image)", fontsize=8)
        left.set_xlabel("position (fraction of the image)", fontsize=8)
        left.legend(fontsize=7)
        right.plot(result.before["frame_means"], "--", label="raw")
        right.plot(result.after["frame_means"], "-", label="corrected")
        title = "frame means" + (", baseline removed" if result.timelapse else "")
        right.set_title(title, fontsize=8)
        right.set_xlabel("frame", fontsize=8)
        right.legend(fontsize=7)
        for axes in (left, right):
            axes.tick_params(labelsize=7)
        self.draw_idle()


class ApplyPanel(QGroupBox):
    """Apply the fitted or a loaded :class:`ShadingProfile` to a layer; save and load."""

    def __init__(self, viewer: napari.viewer.Viewer, dock: Any) -> None:
        super().__init__("Apply profile")
        self.viewer, self.dock = viewer, dock
        self.profile: ShadingProfile | None = None
        self.profile_source = ""
        self.runner = JobRunner(self)
        self.runner.succeeded.connect(self._on_succeeded)
        self.runner.failed.connect(self._on_failed)
        self.runner.stopped.connect(self._update_buttons)
        self.target = LayerPicker(
            viewer, tooltip="Layer to correct (never modified)", follow=dock._follows, parent=self
        )
        self.timelapse = CheckBox(text="Timelapse: remove each frame's baseline")
        self.timelapse.tooltip = (
            "Also fit and subtract each frame's background level (photobleaching, drift), as "
            "BaSiCPy's is_timelapse transform; the result's background is about 0"
        )
        self.clip = CheckBox(text="Clip negative values at 0")
        self.dtype = ComboBox(choices=["float32", "uint16"], value="float32")
        self.dtype.tooltip = "uint16 rounds and clips to [0, 65535]"
        self.profile_label = QLabel("No profile yet: fit one above, or load one.")
        self.profile_label.setWordWrap(True)
        self.load_button = QPushButton("Load profile...")
        self.save_button = QPushButton("Save profile...")
        self.apply_button = QPushButton("Apply")
        self.cancel_button = QPushButton("Cancel")
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.figure = ShadingFigure()
        self.figure.setVisible(False)
        form = QFormLayout()
        form.addRow(self.profile_label)
        files = QHBoxLayout()
        files.addWidget(self.load_button)
        files.addWidget(self.save_button)
        form.addRow(files)
        form.addRow("Layer", self.target.combo.native)
        form.addRow(self.timelapse.native)
        form.addRow(self.clip.native)
        form.addRow("Output type", self.dtype.native)
        buttons = QHBoxLayout()
        buttons.addWidget(self.apply_button)
        buttons.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addWidget(self.figure)
        self.load_button.clicked.connect(self._ask_load)
        self.save_button.clicked.connect(self._ask_save)
        self.apply_button.clicked.connect(self.apply)
        self.cancel_button.clicked.connect(self.runner.cancel)
        self.target.changed.connect(self._update_buttons)
        self._update_buttons()

    # ---------------------------------------------------------------- profile
    def set_profile(self, profile: ShadingProfile, source: str) -> None:
        """Use ``profile`` (from a fit or a file) and show what it is."""
        self.profile, self.profile_source = profile, source
        self.profile_label.setText(f"Profile {source}: {profile.describe()}")
        self.figure.show_profile(profile)
        self.figure.setVisible(True)
        self._update_buttons()

    def load(self, path: str) -> None:
        """Load a saved profile (``.tif`` + ``.json``)."""
        self.set_profile(ShadingProfile.load(path), f"loaded from {path}")

    def save(self, path: str) -> None:
        """Save the current profile (``.tif`` + ``.json``)."""
        if self.profile is None:
            raise ValueError("there is no profile to save: fit or load one first")
        written = self.profile.save(path)
        self.status.setText(f"Saved the profile to {written} and its .json.")

    def _ask_load(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Load shading profile", "", "Shading profile (*.tif *.tiff *.json)"
        )
        if path:
            try:
                self.load(path)
            except Exception as exc:  # a bad file must not take napari down
                self.status.setText(f"Could not load {path}: {plain_error_message(exc)}")

    def _ask_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Save shading profile", "profile.tif", "TIFF + JSON (*.tif)"
        )
        if path:
            try:
                self.save(path)
            except Exception as exc:
                self.status.setText(f"Could not save: {plain_error_message(exc)}")

    # ---------------------------------------------------------------- apply
    def apply(self) -> bool:
        """Correct the chosen layer with the profile in a worker; return whether it started."""
        layer, device = self.target.layer, self.dock.device
        if self.profile is None or layer is None:
            self.status.setText("Choose a layer and fit or load a profile first.")
            return False
        if device is None:
            self.status.setText("No GPU: the correction cannot run.")
            return False
        options = {
            "timelapse": self.timelapse.value,
            "clip": self.clip.value,
            "dtype": self.dtype.value,
            "device": device,
        }
        try:
            job = correction_job(layer.data, self.profile, **options)
        except ValueError as exc:
            self.status.setText(f"Cannot apply: {exc}")
            return False
        self._job = (layer, options, time.perf_counter())
        self.runner.start(job, description=f"Flat-field correction: {layer.name}", tag="apply")
        self.status.setText(f"Correcting '{layer.name}' ({device})...")
        self._update_buttons()
        return True

    def _on_succeeded(self, result: CorrectionResult, elapsed: float) -> None:
        layer, options, _ = self._job
        record = build_provenance(
            "flatfield",
            {
                "profile": self.profile.summary(),
                **{k: v for k, v in options.items() if k != "device"},
            },
            device=device_label(options["device"]),
            input_name=layer.name,
            elapsed_seconds=elapsed,
            result={
                "shading_cv_before": result.before["cv"],
                "shading_cv_after": result.after["cv"],
            },
        )
        metadata = {
            PROVENANCE_KEY: record,
            "intensity_unit": layer.metadata.get("intensity_unit", ""),
        }
        data, kwargs, _ = image_layer(
            result.corrected,
            f"{layer.name} [flat-field corrected]",
            Geometry.of_layer(layer),
            metadata=metadata,
            colormap=getattr(layer.colormap, "name", "gray"),
        )
        self.viewer.add_image(data, **kwargs)
        self.figure.show_correction(result)
        self.figure.setVisible(True)
        self.status.setText(f"{result.describe()}. Took {elapsed:.2f} s.")

    def _on_failed(self, exc: BaseException) -> None:
        self.status.setText(f"The correction failed: {plain_error_message(exc)}")

    def _update_buttons(self, *_: Any) -> None:
        running = self.runner.running
        self.apply_button.setEnabled(not running and self.profile is not None)
        self.cancel_button.setEnabled(running)
        self.save_button.setEnabled(self.profile is not None)

    def release(self) -> None:
        """Cancel a running correction and stop following layers (the dock is closing)."""
        self.runner.cancel()
        self.target.stop_following()
