"""The flat-field dock's "Apply profile" panel: a fitted or loaded profile onto any layer.

A view of the apply job (the registry's ``apply`` job of flat-field,
:func:`~napari_gpuscope.compute.flatfield.iter_apply_profile`): its
options are the apply fields of :class:`~napari_gpuscope.compute.flatfield.BasicParams`
(controls generated from the model), the job runs on the dock's one runner (``start_job`` of
:class:`~napari_gpuscope.dock.context.DockContext`: an apply is refused while a fit holds
the device, and the other way round), and the result's ``layers()`` become the corrected
layer, with its provenance. The figure shows the shading left (the mean image's centre lines,
before and after) and, for time-lapses, each frame's mean before and after (the baseline).
"Save recipe..." saves what Apply does as a recipe of the apply job with the profile as its
``profile`` artifact, which ``napari-gpuscope run`` applies to a whole experiment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
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
from napari_gpuscope.compute.flatfield import (
    APPLY_FIELDS,
    BasicParams,
    CorrectionResult,
    ShadingProfile,
    centre_lines,
    display_limits,
)
from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.dock.jobs import JobHandlers
from napari_gpuscope.dock.messages import plain_error_message
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets._controls import ParamForm
from napari_gpuscope.widgets._controls._layer_picker import LayerPicker
from napari_gpuscope.widgets._controls._plot import DARK, style_axes, theme_colors

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.dock.context import DockContext

__all__ = ["ApplyPanel", "ShadingFigure"]


class ShadingFigure(FigureCanvasQTAgg):
    """Two panels: the mean image's centre lines before/after, and per-frame means (baseline)."""

    def __init__(self, colors: Mapping[str, str] | None = None) -> None:
        self.colors = {**DARK, **(colors or {})}
        self.figure = Figure(figsize=(4.2, 2.6), dpi=90, layout="constrained")
        super().__init__(self.figure)
        # Tall enough for the x labels under the panels (they were cut off at 210 px).
        self.setMinimumSize(120, 240)  # never wider than the dock: the figure follows it
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def show_profile(self, profile: ShadingProfile) -> None:
        """The fitted flatfield's centre lines and the fitted baseline."""
        self.figure.clear()
        flat = profile.flatfield if profile.flatfield.ndim == 2 else profile.flatfield[0]
        row, column = centre_lines(flat.astype(np.float64))
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
        style_axes(self.figure, (left, right), self.colors)
        self.draw_idle()

    def show_correction(self, result: CorrectionResult) -> None:
        """Residual shading (centre lines of the normalised mean image) and frame means."""
        self.figure.clear()
        if result.before is None or result.after is None:  # not measured: nothing to show
            self.draw_idle()
            return
        left, right = self.figure.subplots(1, 2)
        for stats, label, style in ((result.before, "raw", "--"), (result.after, "corrected", "-")):
            left.plot(
                np.linspace(0, 1, stats.row.size),
                stats.row,
                style,
                label=f"{label} (CV {stats.cv:.3f})",
            )
        left.axhline(1.0, color="0.6", lw=0.8)
        left.set_title("shading left (mean image)", fontsize=8)
        left.set_xlabel("position (fraction of the image)", fontsize=8)
        left.legend(fontsize=7)
        right.plot(result.before.frame_means, "--", label="raw")
        right.plot(result.after.frame_means, "-", label="corrected")
        title = "frame means" + (", baseline removed" if result.params.timelapse_baseline else "")
        right.set_title(title, fontsize=8)
        right.set_xlabel("frame", fontsize=8)
        right.legend(fontsize=7)
        style_axes(self.figure, (left, right), self.colors)
        self.draw_idle()


class ApplyPanel(QGroupBox):
    """Apply the fitted or a loaded :class:`ShadingProfile` to a layer; save and load.

    Attributes
    ----------
    options : ParamForm
        The apply fields of :class:`BasicParams` (:data:`~napari_gpuscope.compute.flatfield.
        APPLY_FIELDS`); ``timelapse``, ``clip`` and ``dtype`` are their controls.
    """

    def __init__(self, viewer: napari.viewer.Viewer, dock: DockContext) -> None:
        super().__init__("Apply profile")
        self.viewer, self.dock = viewer, dock
        self.profile: ShadingProfile | None = None
        self.profile_source = ""
        self.running = False
        self.target = LayerPicker(
            viewer, tooltip="Layer to correct (never modified)", follow=dock.follows, parent=self
        )
        self.options = ParamForm(BasicParams, APPLY_FIELDS)
        self.options.add_row("Layer", self.target.combo.native, after="")
        self.timelapse = self.options.widgets["timelapse_baseline"]
        self.clip = self.options.widgets["clip_negative"]
        self.dtype = self.options.widgets["output_dtype"]
        self.profile_label = QLabel("No profile yet: fit one above, or load one.")
        self.profile_label.setWordWrap(True)
        self.load_button = QPushButton("Load profile...")
        self.save_button = QPushButton("Save profile...")
        self.recipe_button = QPushButton("Save recipe...")
        self.recipe_button.setToolTip(
            "Save this correction as a recipe of the apply job, the profile beside it (its "
            "'profile' artifact): 'napari-gpuscope run' corrects a whole experiment as Apply "
            "does here (docs/batch.md)"
        )
        self.apply_button = QPushButton("Apply")
        self.cancel_button = QPushButton("Cancel")
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.figure = ShadingFigure(theme_colors(viewer))
        self.figure.setVisible(False)
        form = QFormLayout()
        form.addRow(self.profile_label)
        files = QHBoxLayout()
        files.addWidget(self.load_button)
        files.addWidget(self.save_button)
        files.addWidget(self.recipe_button)
        form.addRow(files)
        buttons = QHBoxLayout()
        buttons.addWidget(self.apply_button)
        buttons.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.options)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addWidget(self.figure)
        self.load_button.clicked.connect(self._ask_load)
        self.save_button.clicked.connect(self._ask_save)
        self.recipe_button.clicked.connect(lambda: self.save_recipe())
        self.apply_button.clicked.connect(self.apply)
        self.cancel_button.clicked.connect(self.cancel)
        self.target.changed.connect(self._update_buttons)
        self._update_buttons()

    def params(self) -> BasicParams:
        """The apply options the controls describe (the fit's fields keep their defaults:
        applying does not read them)."""
        return BasicParams(**self.options.values())

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

    def save_recipe(self, path: str | Path | None = None) -> Path | None:
        """Save what Apply does as a recipe of the apply job (asks for a file when ``path`` is
        None): the apply options, the chosen layer's facts, and the profile written beside it
        (``<stem>-profile.tif`` and its ``.json``) as the ``profile`` artifact, both files
        pinned by their SHA-256. ``napari-gpuscope run`` of it corrects every position as
        Apply corrects the layer. None when cancelled or refused (the status says why)."""
        from napari_gpuscope.batch.recipes import Recipe
        from napari_gpuscope.widgets._recipes import FILE_FILTER, input_facts, pinned_artifact

        if self.profile is None:
            self.status.setText("Recipe not saved: fit or load a profile first.")
            return None
        layer = self.target.layer
        if path is None:
            stem = f"{layer.name if layer is not None else 'images'}-flatfield-apply"
            name, _ = QFileDialog.getSaveFileName(self, "Save recipe", f"{stem}.yaml", FILE_FILTER)
            if not name:
                return None
            path = Path(name) if Path(name).suffix else Path(name).with_suffix(".yaml")
        path = Path(path)
        try:
            params = self.params()
            # "-profile", not ".profile": ShadingProfile.save replaces a name's last suffix.
            tiff = self.profile.save(path.with_name(f"{path.stem}-profile.tif"))
            artifact = pinned_artifact("profile", tiff, (tiff.with_suffix(".json"),))
            source = None if layer is None else f"layer {layer.name!r}"
            recipe = Recipe.from_params(
                params,
                job="apply",
                input=input_facts(layer),
                artifacts=[artifact],
                source=source,
            )
            written = recipe.save(path)
        except (ValueError, OSError) as exc:
            self.status.setText(f"Recipe not saved: {plain_error_message(exc)}")
            return None
        self.status.setText(
            f"Recipe saved to {written.name} (apply job, recipe {recipe.hash()[:12]}), the "
            f"profile {self.profile_source} beside it as {tiff.name}."
        )
        return written

    # ---------------------------------------------------------------- apply
    def apply(self, announce: Callable[[str], object] | None = None) -> bool:
        """Correct the chosen layer with the profile on the dock's runner; return whether it
        started (False: the status says why, e.g. a fit holds the device). ``announce``
        also gets the result's line when it succeeds (the dock's fit and apply)."""
        layer, device = self.target.layer, self.dock.device
        if self.profile is None or layer is None:
            self.status.setText("Choose a layer and fit or load a profile first.")
            return False
        if device is None:
            self.status.setText("No GPU: the correction cannot run.")
            return False
        try:
            params = self.params()
            # The registry's apply job, given the profile it needs (JobSpec.needs); a 4D layer
            # is corrected along the axis the profile was fitted with (batch_axis).
            apply = self.dock.spec.job_spec("apply").job_function()
            axis = self.profile.batch_axis if np.ndim(layer.data) == 4 else None
            job = apply(
                layer.data, params=params, profile=self.profile, batch_axis=axis, device=device
            )
            self.dock.start_job(
                "apply",
                job,
                title="The flat-field correction",
                description=f"Flat-field correction: {layer.name}",
                handlers=JobHandlers(
                    succeeded=lambda result, elapsed: self._on_succeeded(
                        result, elapsed, layer, device, announce
                    ),
                    failed=self._on_failed,
                    ended=self._on_ended,
                ),
                layer=layer,
                params=params,
            )
        except ValueError as exc:  # ParameterError, InvalidInputError and JobRefused included
            self.status.setText(f"Cannot apply: {exc}")
            return False
        self.running = True
        self.status.setText(f"Correcting '{layer.name}' ({device})...")
        self._update_buttons()
        return True

    def cancel(self) -> None:
        """Cancel a running correction."""
        if self.running:
            self.dock.cancel()

    def _on_ended(self) -> None:
        self.running = False
        self._update_buttons()

    def _on_succeeded(
        self,
        result: CorrectionResult,
        elapsed: float,
        layer: napari.layers.Image,
        device: str,
        announce: Callable[[str], object] | None = None,
    ) -> None:
        record = build_provenance(
            "flatfield",
            result.options,
            device=device_label(device),
            input_name=layer.name,
            elapsed_seconds=elapsed,
            result=result.summary(),
        )
        metadata = {
            PROVENANCE_KEY: record,
            "intensity_unit": layer.metadata.get("intensity_unit", ""),
        }
        for data, kwargs, layer_type in result.layers(
            layer.name, Geometry.of_layer(layer), metadata
        ):
            # Shown like its input (the result names no colormap), on the corrected values'
            # percentiles: napari's min-max range made the tiles nearly black (59-5537).
            kwargs.setdefault("colormap", getattr(layer.colormap, "name", "gray"))
            limits = display_limits(data)
            if limits is not None:
                kwargs.setdefault("contrast_limits", limits)
            getattr(self.viewer, f"add_{layer_type}")(data, **kwargs)
        self.figure.show_correction(result)
        self.figure.setVisible(True)
        text = f"{result.describe()}. Took {elapsed:.2f} s."
        self.status.setText(text)
        if announce is not None:
            announce(text)

    def _on_failed(self, exc: BaseException) -> None:
        self.status.setText(f"The correction failed: {plain_error_message(exc)}")

    def _update_buttons(self, *_: Any) -> None:
        running = self.running
        self.apply_button.setEnabled(not running and self.profile is not None)
        self.cancel_button.setEnabled(running)
        self.save_button.setEnabled(self.profile is not None)
        self.recipe_button.setEnabled(self.profile is not None)

    def release(self) -> None:
        """Stop following layers (the dock is closing; it cancels its running job itself)."""
        self.target.stop_following()
