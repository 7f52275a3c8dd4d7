"""The "Phase (tilt-corrected)" dock: quantitative phase from a brightfield z-stack.

The optics rows are prefilled from the input layer (pixel size and z step from its scale; the
wavelength and apertures from a sample's metadata when it has them). The regularization is
"auto" by default (its box at its minimum, as the eSRRF dock's automatic block length: chosen
per stack, :mod:`napari_gpuscope.compute.phase._auto_regularization`); the value a preview or a
run chose shows beside it ("auto → 3.2e-03"). A logarithmic slider sets a fixed value; with
live preview on, moving it re-solves the whole field at once (the normal equations are kept on
the GPU, :mod:`napari_gpuscope.compute.phase._preview`).
The tilt is none, set by hand, or estimated for the whole field or per tile of a grid: during a
run the loss is plotted live and the tilt map grows as a Vectors layer (arrows from the tile
centres, length proportional to the zenith, pointing along the azimuth). Results: phase
(radians) and absorption layers with provenance, and the tilt vectors.

"Estimate tilt" runs the method's other job (the registry's ``estimate_tilt``) on its own:
the tilt map's arrows and its zenith and azimuth maps (hidden) join the viewer, previews and
runs on that stack use the map, and a global estimate is written into the manual tilt rows.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, cast

from magicgui.widgets import Label
from qtpy.QtCore import Qt
from qtpy.QtWidgets import QPushButton, QSizePolicy, QSlider

from napari_gpuscope.compute.devices import device_label
from napari_gpuscope.compute.jobs import Job
from napari_gpuscope.compute.phase import (
    OUTPUTS,
    PhaseParams,
    PhaseSolvers,
    PhaseWarning,
    TiltMap,
    clear_shared_caches,
    preview_job,
)
from napari_gpuscope.compute.preview import PlaneView, PreviewResult
from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.dock.jobs import JobHandlers, JobRefused
from napari_gpuscope.dock.messages import plain_error_message
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets._base import MethodDock
from napari_gpuscope.widgets._controls import FieldStyle

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

    from napari_gpuscope.compute.phase import PhaseResult, TiltResult
    from napari_gpuscope.compute.results import MethodResult

__all__ = ["REGULARIZATION_DECADES", "PhaseDock"]

REGULARIZATION_DECADES = (-5.0, -1.0)
"""Range of the logarithmic regularization slider (the box beside it takes any value)."""
_SLIDER_STEPS = 200
_OPTICS = ("wavelength", "na_illumination", "na_detection", "index_of_refraction")
_MANUAL = ("tilt_zenith", "tilt_azimuth")
_TILES = ("tiles_y", "tiles_x")


class PhaseDock(MethodDock):
    """Dock widget for tilt-corrected quantitative phase.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari.
    """

    method_id = "phase"
    short_title = "phase"
    # napari's title "Phase (tilt-corrected) (napari-gpuscope)" needs 260 px beside its buttons.
    dock_width = 350
    layer_fields = ("yx_pixel_size", "z_pixel_size", *_OPTICS)
    # Without knowing the tilt, the best a user gets is a global estimate first: the model's
    # "manual, 0, 0" left shadows and a checkerboard on the tilted sample (issue 18).
    dock_defaults: ClassVar[Mapping[str, object]] = {"tilt_mode": "global"}
    # At the box's minimum (0, which the model refuses as a number) the regularization is None:
    # "auto", chosen per stack.
    field_styles: ClassVar[Mapping[str, FieldStyle]] = {
        "regularization": FieldStyle(minimum=0.0, auto_text="auto"),
        "tv_strength": FieldStyle(minimum=0.0, auto_text="auto"),  # the TV weight: the same
    }
    streamed_outputs = OUTPUTS
    input_layouts = ("ZYX",)  # one z-stack through focus (compute.phase._job.LAYOUTS)
    step_label = "iteration"

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        self._solvers = PhaseSolvers()
        self._syncing = False
        self._chosen: float | None = None  # the latest automatic regularization (GUI thread)
        self._shown_input: weakref.ref | None = None  # the input the chosen values are for
        # The tilt map of the latest run and the array it belongs to (GUI thread only).
        self._tilt: tuple[weakref.ref[napari.layers.Image], TiltMap] | None = None
        super().__init__(viewer)
        # Phase is in radians, the input in photons: one display range cannot serve both.
        link = self.panel.link_display
        link.setChecked(False)
        link.setEnabled(False)
        link.setToolTip(
            "Phase (radians) and absorption are not in the input's intensity units, so their "
            "display is not linked to the input."
        )

    # ---------------------------------------------------------------- controls
    def build_controls(self) -> None:
        """The logarithmic regularization slider, the scale note, and tilt-mode rows."""
        self.reg_slider = QSlider(Qt.Orientation.Horizontal)
        self.reg_slider.setRange(0, _SLIDER_STEPS)
        self.reg_slider.setToolTip(
            "A fixed regularization on a log scale (1e-5 to 1e-1): left is sharper and noisier, "
            "right smoother. With Live preview on, the phase updates as you drag. Set the box "
            "to 'auto' (its minimum) to choose it per stack again."
        )
        self.reg_slider.valueChanged.connect(self._on_slider)
        self.form.add_row("", self.reg_slider, after="regularization")
        self.reg_chosen = Label(value="")
        self.reg_chosen.native.setWordWrap(True)
        self.reg_chosen.native.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.reg_chosen.native.setToolTip(
            "The regularization the latest preview or run chose automatically: the value "
            "whose phase has the largest estimated correlation with the true phase"
        )
        self.form.add_row("", self.reg_chosen.native, after="regularization")
        self.scale_label = Label(value="")
        self.scale_label.native.setWordWrap(True)
        self.scale_label.native.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.form.add_row("", self.scale_label.native, after="z_pixel_size")
        self.optics_note = Label(value="")
        self.optics_note.native.setWordWrap(True)
        self.optics_note.native.setStyleSheet("color: #e0a030;")
        self.optics_note.native.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.optics_note.native.setVisible(False)
        self.form.add_row("", self.optics_note.native, after="index_of_refraction")
        self.estimate_button = QPushButton("Estimate tilt")
        self.estimate_button.setToolTip(
            "Estimate the illumination tilt only (global, or per tile in 'estimate per tile' "
            "mode): the arrows show it, previews and runs on this stack then use it, and a "
            "global estimate fills the manual zenith and azimuth"
        )
        self.estimate_button.clicked.connect(self.estimate_tilt)
        self.form.add_row("", self.estimate_button, after="tilt_mode")
        widgets = self.form.widgets
        widgets["regularization"].changed.connect(self._sync_slider)
        widgets["tilt_mode"].changed.connect(self._on_tilt_mode)
        self._sync_slider()
        self._on_tilt_mode()

    def _on_slider(self, position: int) -> None:
        if self._syncing:
            return
        low, high = REGULARIZATION_DECADES
        value = 10 ** (low + (high - low) * position / _SLIDER_STEPS)
        self._syncing = True
        try:
            self.form.widgets["regularization"].value = float(f"{value:.2g}")
        finally:
            self._syncing = False

    def _sync_slider(self, *_: object) -> None:
        value = self.form.value("regularization")
        if value is None:
            self.show_chosen_regularization(self._chosen)
        else:
            self.reg_chosen.value = ""
        if self._syncing or value is None:
            return  # auto: the slider stays where it was (it sets a fixed value when moved)
        low, high = REGULARIZATION_DECADES
        value = max(float(value), 1e-30)
        position = round((math.log10(value) - low) / (high - low) * _SLIDER_STEPS)
        self._syncing = True
        try:
            self.reg_slider.setValue(max(0, min(_SLIDER_STEPS, position)))
        finally:
            self._syncing = False

    def show_chosen_regularization(self, chosen: float | None) -> None:
        """Show the automatic choice beside the control ("auto → 3.2e-03"; None: not yet)."""
        self._chosen = chosen
        if self.form.value("regularization") is not None:
            self.reg_chosen.value = ""
        elif chosen is None:
            self.reg_chosen.value = "auto: chosen per stack by a preview or run"
        else:
            self.reg_chosen.value = f"auto → {chosen:.2g}"

    def _on_tilt_mode(self, *_: object) -> None:
        mode = self.form.value("tilt_mode")
        for name in _MANUAL:
            self.form.set_row_visible(name, mode == "manual")
        for name in _TILES:
            self.form.set_row_visible(name, mode == "tiles")

    def on_input_changed(self, layer: napari.layers.Image | None) -> None:
        """Pixel size and z step from the layer's scale; optics from a sample's metadata; the
        automatic values chosen for the previous input are no longer shown."""
        known = self._shown_input
        if known is not None and layer is not known():  # (the same input is re-announced
            # whenever napari's layers change; a deleted one reads None)
            self.show_chosen_regularization(None)
            self.form.set_auto_text("tv_strength", "auto")
        self._shown_input = None if layer is None else weakref.ref(layer)
        if layer is None or getattr(layer, "ndim", 0) != 3:
            self.scale_label.value = ""
            return
        scale = [abs(float(s)) for s in layer.scale]
        widgets = self.form.widgets
        if scale[-1] == 1.0 and scale[-3] == 1.0:
            self.scale_label.value = (
                "The layer has no physical scale: enter the pixel size and z step (µm)."
            )
        else:
            widgets["yx_pixel_size"].value = scale[-1]
            widgets["z_pixel_size"].value = scale[-3]
            self.scale_label.value = (
                f"From the layer scale: {scale[-1]:.4g} µm pixels, {scale[-3]:.4g} µm z step."
            )
        sample = (getattr(layer, "metadata", None) or {}).get("sample") or {}
        for name in _OPTICS:
            if isinstance(sample.get(name), int | float):
                widgets[name].value = float(sample[name])

    def build_params(self) -> PhaseParams:
        """The parameters the controls describe; a warning of the model (NA_ill >= NA_det)
        shows under the apertures instead of going to the console on every change."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PhaseWarning)
            params = PhaseParams(**self.form.values())
        notes = [str(w.message).removeprefix("PhaseParams: ") for w in caught]
        notes = [n for n in notes if n]
        self.optics_note.value = notes[0] if notes else ""
        self.optics_note.native.setVisible(bool(notes))
        return params

    # ---------------------------------------------------------------- jobs
    # A run is the dock's default job: the registry's, as a recipe runs it (tilt estimate when
    # asked, then the reconstruction); compute caches the optics of earlier runs itself.
    def _known_tilt(self, layer: napari.layers.Image | None) -> TiltMap | None:
        if self._tilt is None or layer is None:
            return None
        data_ref, tilt = self._tilt
        return tilt if data_ref() is layer.data else None

    def make_preview_job(
        self, layer: napari.layers.Image, params: PhaseParams, device: str, view: PlaneView
    ) -> Job[PreviewResult]:
        """The whole field at the current regularization (normal equations kept)."""
        return preview_job(self._solvers, layer.data, params, device, view, self._known_tilt(layer))

    def on_result(
        self, result: MethodResult | PreviewResult, *, preview: bool, layer: napari.layers.Image
    ) -> None:
        """Show the automatic regularization; style the tilt arrows; remember the estimated
        tilt map, so the preview uses it."""
        phase_result = cast("PreviewResult", result).result if preview else result
        chosen = getattr(phase_result, "regularization_chosen", None)
        if chosen is not None:
            self.show_chosen_regularization(chosen)
        tv_choice = getattr(phase_result, "tv_choice", None)
        if tv_choice is not None:
            # The TV strength's box reads "auto" at its minimum: it says the value chosen.
            self.form.set_auto_text("tv_strength", f"auto → {tv_choice.strength:.2g}")
        if preview:
            return
        self._style_tilt_vectors(layer)
        if getattr(result, "estimate", None) is None:
            return
        try:
            self._tilt = (weakref.ref(layer.data), cast("PhaseResult", result).tilt_map)
        except TypeError:
            self._tilt = None

    # ---------------------------------------------------------------- the estimate job
    def estimate_tilt(self) -> bool:
        """Run the ``estimate_tilt`` job on the input, on the dock's runner; return whether it
        started (False: the status says why, e.g. a run holds the device)."""
        layer, device = self.input_layer, self.device
        try:
            if device is None:
                raise ValueError("no usable CUDA GPU (see the device row)")
            if layer is None:
                raise ValueError("no input z-stack")
            self.validate_input(layer, check_values=False)
            params = self.params()
            estimate = self.spec.job_spec("estimate_tilt").job_function()
            job = estimate(layer.data, params=params, device=device)
            self.start_job(
                "estimate_tilt",
                job,
                title="The tilt estimate",
                description=f"Tilt estimate: {layer.name}",
                handlers=JobHandlers(
                    succeeded=lambda result, elapsed: self._on_estimated(
                        result, elapsed, layer, params, device
                    ),
                    failed=lambda exc: self.set_status(
                        f"The tilt estimate failed: {plain_error_message(exc)}"
                    ),
                ),
                layer=layer,
                params=params,
            )
        except JobRefused:
            return False  # the status says why
        except ValueError as exc:  # ParameterError and InvalidInputError included
            self.set_status(f"The tilt cannot be estimated: {exc}")
            return False
        self.set_status(f"Estimating the tilt of '{layer.name}'...")
        return True

    def _on_estimated(
        self,
        result: TiltResult,
        elapsed: float,
        layer: napari.layers.Image,
        params: PhaseParams,
        device: str,
    ) -> None:
        record = build_provenance(
            "phase",
            params.to_dict(),
            device=device_label(device),
            input_name=layer.name,
            elapsed_seconds=elapsed,
            result=result.summary(),
        )
        layers = result.layers(layer.name, Geometry.of_layer(layer), {PROVENANCE_KEY: record})
        for data, kwargs, layer_type in layers:
            kwargs["visible"] = layer_type == "vectors"  # the maps would cover the stack
            getattr(self.viewer, f"add_{layer_type}")(data, **kwargs)
        self._style_tilt_vectors(layer)
        if layer in self.viewer.layers:
            self.viewer.layers.selection.active = layer  # the stack stays the input
        try:
            self._tilt = (weakref.ref(layer.data), result.tilt_map)
        except TypeError:
            self._tilt = None
        note = ""
        if result.is_global and not (result.non_finite or result.stopped_early):
            self.set_params(
                params.replace(
                    tilt_mode="manual",
                    tilt_zenith=round(float(result.tilt_map.zenith.item()), 4),
                    tilt_azimuth=round(float(result.tilt_map.azimuth.item()), 4),
                )
            )
            note = "; set as the manual tilt"
        self.set_status(f"{result.describe()}{note}. Took {elapsed:.2f} s.")

    def _style_tilt_vectors(self, layer: napari.layers.Image) -> None:
        """The streamed tilt layer took napari's default look; give it the result's."""
        from napari.layers import Vectors

        for candidate in self.viewer.layers:
            owner = self.model.owned.get(candidate)
            if isinstance(candidate, Vectors) and owner is not None and owner() is layer:
                candidate.edge_color = "yellow"
                candidate.edge_width = 2.0
                candidate.vector_style = "arrow"

    def release(self) -> None:
        """Free the kept device data when napari removes the dock (the preview's solver and
        compute's cached optics, rebuilt by the next job that needs them)."""
        self._solvers.clear()
        clear_shared_caches()
        super().release()
