"""The "Flat-field (BaSiC)" dock: fit a shading profile, watch it converge, apply it.

Fit (the :class:`~napari_gpuscope.widgets.MethodDock` part): the input stack, the darkfield
source (none, estimated, a constant camera offset, or a dark-frame layer), smoothness automatic
or manual (Autotune fills it in), sorting and the advanced tolerances; the flatfield streams
into its layer after every reweighting pass, and with "Also correct the input" (on by default)
Run then corrects the input with the fitted profile (the Apply panel's job and options), as a
batch run of the dock's recipe corrects every position. Apply (:mod:`.apply`, a view of the
apply job): the fitted or a loaded profile onto any layer with the apply fields of the
parameters (timelapse baseline removal, clipping, output type: shown in the Apply panel, saved
with the settings and recipes like every parameter), save/load, and figures of the baseline
and of the shading left after correction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from magicgui.widgets import ComboBox
from qtpy.QtWidgets import QCheckBox, QComboBox, QLabel, QPushButton

from napari_gpuscope.compute.flatfield import APPLY_FIELDS, BasicParams, ShadingProfile
from napari_gpuscope.compute.jobs import Job
from napari_gpuscope.dock.jobs import JobHandlers
from napari_gpuscope.dock.live_request import FitAsTilesArrive
from napari_gpuscope.dock.messages import plain_error_message
from napari_gpuscope.live import MIN_TILES
from napari_gpuscope.widgets._base import MethodDock
from napari_gpuscope.widgets._controls import FieldStyle
from napari_gpuscope.widgets.flatfield.apply import ApplyPanel

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

__all__ = ["FlatfieldDock"]

_NO_DARK_FRAME = "none"
_ALL_PIXELS = "all pixels"


class FlatfieldDock(MethodDock):
    """Dock widget for BaSiC flat-field correction on the GPU.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari.
    """

    method_id = "flatfield"
    short_title = "BaSiC"
    streamed_outputs = ("flatfield",)
    input_layouts = ("TYX", "CTYX", "TZYX")  # 4D: each channel or z-plane its own fit
    # Wider than the base: the dock is taller than a screen (fit and apply panels, two
    # figures), so its vertical scroll bar takes width the rows need.
    dock_width = 420
    step_label = "reweighting pass"
    output_display = {"flatfield": {"colormap": "viridis"}}  # noqa: RUF012 (a ratio near 1)
    field_styles = {  # noqa: RUF012 (read-only presentation table)
        "smoothness_flatfield": FieldStyle(minimum=0.0, maximum=100.0, auto_text="auto"),
        "smoothness_darkfield": FieldStyle(minimum=0.0, maximum=100.0, auto_text="auto"),
        "camera_offset": FieldStyle(minimum=-1.0, maximum=65535.0, auto_text="none"),
        # -1 shows "none": the input is one (T, Y, X) stack; 0 = (C, T, Y, X), 1 = (T, Z, Y, X)
        "batch_axis": FieldStyle(minimum=-1, maximum=1, auto_text="none"),
    }

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        self.profile: ShadingProfile | None = None
        self.tuning = False  # the autotune job is running (on the dock's one runner)
        super().__init__(viewer)
        self.apply_panel = ApplyPanel(viewer, self)
        self._add_live_choice()
        layout = self.content.layout()
        layout.insertWidget(layout.count() - 1, self.apply_panel)
        self._show_apply_fields_in_panel()

    # ---------------------------------------------------------------- live
    def _add_live_choice(self) -> None:
        """The Live part's "Live" row: apply the profile (fitted or loaded, with the Apply
        panel's options: the apply job) to every frame, or fit one over the tiles as they
        arrive (the fit job with the dock's fit parameters)."""
        self.live_job = QComboBox()
        self.live_job.addItem("apply the profile", "apply")
        self.live_job.addItem("fit the profile as tiles arrive", "fit")
        self.live_job.setToolTip(
            "Apply: correct every frame with the profile of the Apply panel (fitted or loaded). "
            "Fit: fit a BaSiC profile (with the Dark frame and Fit on layers chosen above) "
            f"over all the tiles received so far, from {MIN_TILES} "
            "tiles on and again whenever new tiles came (the flatfield shown improves as the "
            "scan goes on); Stop & keep keeps the last complete fit"
        )
        part = self.live_acquisition
        part.add_row("Live", self.live_job)
        part.take_inputs_from(self._live_params, self._live_profile)
        part.result_kept.connect(self._on_live_kept)

    def _on_live_kept(self, result: object) -> None:
        """A live fit's kept profile goes to the Apply panel, as a Run's fit does: to correct
        the scan with, save, or apply live to the next acquisition."""
        choice = self.live_acquisition.choice
        if isinstance(result, ShadingProfile) and choice is not None:
            self.profile = result
            self.apply_panel.set_profile(result, f"fitted live on '{choice.name}'")

    def _live_params(self) -> BasicParams:
        if self.live_job.currentData() != "fit":
            return self.apply_panel.params()
        return self.params()

    def _live_profile(self) -> object:
        """The Apply panel's profile, or the fit's choice with the dock's dark-frame and mask
        layers (each one (Y, X) image for every tile: checked when the session starts)."""
        if self.live_job.currentData() != "fit":
            return self.apply_panel.profile
        chosen = self.recipe_artifacts()
        return FitAsTilesArrive(
            **{name: array for name, (array, _) in chosen.items()},
            names={name: layer_name for name, (_, layer_name) in chosen.items()},
        )

    def _show_apply_fields_in_panel(self) -> None:
        """The apply fields are parameters of the dock (settings, recipes, reset) whose
        controls sit in the Apply panel: their form rows are hidden and follow the panel's
        controls, and the other way round (equal values emit nothing, so this ends)."""
        panel = self.apply_panel.options
        for name in APPLY_FIELDS:
            self.form.set_row_visible(name, False)
            panel.widgets[name].value = self.form.widgets[name].value

        def copy(source: Any, target: Any, name: str) -> None:
            if name in APPLY_FIELDS:
                target.widgets[name].value = source.widgets[name].value

        panel.changed.connect(lambda name: copy(panel, self.form, name))
        self.form.changed.connect(lambda name: copy(self.form, panel, name))

    # ---------------------------------------------------------------- controls
    def build_controls(self) -> None:
        """The dark-frame layer and the background mask (the fit job's optional inputs,
        ``JobSpec.accepts``: a recipe saved here carries them as artifacts)."""
        self.dark_frame = ComboBox(choices=self._dark_choices)
        self.dark_frame.tooltip = (
            "A measured dark frame (camera offset image, same Y, X as the tiles): subtracted "
            "before the fit and used as the darkfield. Excludes 'Estimate darkfield' and "
            "'Camera offset'."
        )
        self.form.add_row("Dark frame", self.dark_frame.native, after="camera_offset")
        self.fit_mask = ComboBox(choices=self._mask_choices)
        self.fit_mask.tooltip = (
            "Background mask: fit only on the pixels > 0 of this Labels layer (e.g. the "
            "background, leaving out cells and debris); a (Y, X) layer masks every image, or "
            "give the images' shape. All pixels: no mask"
        )
        self.form.add_row("Fit on", self.fit_mask.native, after="camera_offset")
        self.autotune_button = QPushButton("Autotune")
        self.autotune_button.setToolTip(
            "Try BaSiCPy's 17 smoothness values on the GPU at once (entropy + Fourier-L0 cost "
            "on about 50 images), set the best one and fit with it"
        )
        self.autotune_status = QLabel("")
        self.autotune_status.setWordWrap(True)
        self.form.add_row("", self.autotune_button, after="smoothness_darkfield")
        self.form.add_row("", self.autotune_status, after="smoothness_darkfield")
        self.autotune_button.clicked.connect(self.autotune)
        # Fit and apply: Run shows the corrected tiles beside the profile, as a batch run of
        # the dock's recipe writes them (the fit job corrects every position it fitted).
        self.also_apply = QCheckBox("Also correct the input")
        self.also_apply.setChecked(True)
        self.also_apply.setToolTip(
            "After Run fits the profile, correct the input layer with it (the Apply panel's "
            "options) into a new layer 'flat-field corrected · <input>'. Off: Run only fits"
        )
        self.form.add_row("", self.also_apply, after=None)
        self.dark_frame.changed.connect(self._on_params_changed)
        self.fit_mask.changed.connect(self._on_params_changed)
        self.form.widgets["get_darkfield"].changed.connect(self._update_darkfield_rows)
        self._update_darkfield_rows()

    def autotune(self) -> bool:
        """Run the autotune on the input layer (on the dock's one runner); return whether it
        started (a second call while it runs cancels it)."""
        from napari_gpuscope.compute.flatfield import iter_autotune

        layer, device = self.input_layer, self.device
        if self.tuning:  # a second click cancels
            self.cancel()
            self.autotune_status.setText("Autotune cancelled.")
            return False
        if layer is None or device is None:
            self.autotune_status.setText("Autotune needs an input layer and a GPU.")
            return False
        try:
            params = self.params().replace(smoothness_flatfield=None, smoothness_darkfield=None)
            # The dark frame and mask the run takes (no dark frame while the darkfield is
            # estimated: its row is off then), so the autotune's profile is the one Run fits
            # with its choice.
            inputs = self.recipe_artifacts()
            dark, mask = inputs.get("dark_frame"), inputs.get("fitting_weight")
            job = iter_autotune(
                layer.data,
                params=params,
                device=device,
                dark_frame=None if dark is None else dark[0],
                fitting_weight=None if mask is None else mask[0],
            )
            self.start_job(
                "autotune",
                job,
                title="The autotune",
                description=f"BaSiC autotune: {layer.name}",
                handlers=JobHandlers(
                    succeeded=lambda result, elapsed: self._on_tuned(result, elapsed, layer),
                    failed=lambda exc: self.autotune_status.setText(
                        f"Autotune failed: {plain_error_message(exc)}"
                    ),
                    ended=self._on_tune_ended,
                ),
                layer=layer,
                params=params,
            )
        except ValueError as exc:  # JobRefused included
            self.autotune_status.setText(f"Cannot autotune: {exc}")
            return False
        self.tuning = True
        self.autotune_status.setText(f"Autotuning on '{layer.name}' ({device})... click to cancel")
        self._update_tune_button()
        return True

    def _on_tuned(self, result: Any, elapsed: float, layer: napari.layers.Image) -> None:
        """Set the smoothness the autotune chose; an estimated darkfield's goes back to auto,
        0.1 x the flatfield's, which is what the autotune fitted with (a value typed before
        would make Run fit another profile; the form's 4 decimals cannot hold 0.1 x 1.5).
        Run then fits the autotune's profile, and a recipe saved now carries the choice."""
        chosen = {"smoothness_flatfield": result.smoothness_flatfield}
        if result.smoothness_darkfield is not None:
            chosen["smoothness_darkfield"] = None  # shown as "auto"
        self.form.set_values(chosen)
        text = f"{result.describe()[0].upper()}{result.describe()[1:]}. Took {elapsed:.1f} s."
        self.autotune_status.setText(text)
        self.profile = result.profile
        self.apply_panel.set_profile(result.profile, f"autotuned on '{layer.name}'")

    def _on_tune_ended(self) -> None:
        self.tuning = False
        self._update_tune_button()

    def _update_tune_button(self, *_: Any) -> None:
        self.autotune_button.setText("Cancel autotune" if self.tuning else "Autotune")

    def _dark_choices(self, *_: Any) -> list[Any]:
        layers = [
            (layer.name, layer)
            for layer in getattr(self, "viewer", None).layers
            if getattr(layer, "ndim", 0) == 2 and hasattr(layer, "colormap")
        ]
        return [(_NO_DARK_FRAME, None), *layers]

    def _mask_choices(self, *_: Any) -> list[Any]:
        import napari.layers

        layers = [
            (layer.name, layer)
            for layer in getattr(self, "viewer", None).layers
            if isinstance(layer, napari.layers.Labels)
        ]
        return [(_ALL_PIXELS, None), *layers]

    def _update_darkfield_rows(self, *_: Any) -> None:
        estimate = bool(self.form.widgets["get_darkfield"].value)
        self.form.widgets["smoothness_darkfield"].enabled = estimate
        self.form.widgets["camera_offset"].enabled = not estimate
        self.dark_frame.enabled = not estimate

    def reset_choices(self, *_: Any) -> None:
        super().reset_choices()
        self.dark_frame.reset_choices()
        self.fit_mask.reset_choices()

    # ---------------------------------------------------------------- parameters and job
    def build_params(self) -> BasicParams:
        values = self.form.values()
        if not values["get_darkfield"]:
            values["smoothness_darkfield"] = None
        return BasicParams(**values)

    def recipe_artifacts(self) -> dict[str, tuple[Any, str]]:
        """The dark-frame and mask layers chosen (the fit job's ``accepts``)."""
        # The dark-frame row is off while the darkfield is estimated: its layer is not used.
        dark = None if self.form.widgets["get_darkfield"].value else self.dark_frame.value
        chosen = {"dark_frame": dark, "fitting_weight": self.fit_mask.value}
        return {
            name: (np.asarray(layer.data), layer.name)
            for name, layer in chosen.items()
            if layer is not None
        }

    def make_job(self, layer: Any, params: BasicParams, device: str) -> Job[ShadingProfile]:
        """The registry's fit job with the parameters and the inputs it declares
        (``JobSpec.accepts``), as a batch run gives them from the recipe's artifacts."""
        from napari_gpuscope.compute.arrays import InvalidInputError
        from napari_gpuscope.compute.flatfield import broadcast_weight

        spec = self.spec.job_spec()
        inputs = {}
        for name, (array, layer_name) in self.recipe_artifacts().items():
            if name not in spec.accepts:
                continue
            if name == "fitting_weight":
                try:
                    array = broadcast_weight(
                        array, layer.data.shape, name=f"mask layer {layer_name!r} (Fit on)"
                    )
                except InvalidInputError as exc:
                    raise ValueError(str(exc)) from None
            inputs[name] = array
        return self.model.default_job(layer.data, params, device, **inputs)

    def metric_targets(self, params: BasicParams) -> dict[str, float]:
        return {"reweighting residual": params.reweighting_tol}

    def recipe_notes(self) -> list[str]:
        """A recipe's run corrects every position; say so when this dock's Run does not."""
        if self.also_apply.isChecked():
            return []
        return [
            "'Also correct the input' is off here, but a batch run corrects every position "
            "with the profile it fits"
        ]

    def on_result(self, result: Any, *, preview: bool, layer: Any) -> None:
        """Hand the fitted profile to the apply panel (and its figure); with "Also correct
        the input", correct the input with it at once (the apply job, on the dock's runner,
        which the fit has just left)."""
        if preview:
            return
        self.profile = result
        self.apply_panel.set_profile(result, f"fitted on '{layer.name}'")
        self.apply_panel.target.layer = layer
        if self.also_apply.isChecked():
            self.apply_panel.apply(announce=self._on_applied)

    def _on_applied(self, text: str) -> None:
        """The fit-and-apply's correction is done: the dock's status says both."""
        self.set_status(f"{self.panel.status.text().rstrip()} Then {text}")

    def release(self) -> None:
        """Also stop the Apply panel following layers."""
        if hasattr(self, "apply_panel"):
            self.apply_panel.release()
        super().release()
