"""The "TV denoise" dock: total-variation (ROF) denoising with a noise-relative strength.

The user sets a *strength* k; the solver weight is ``k * sigma_hat`` where ``sigma_hat`` is the
noise level estimated from the whole input (Gaussian model), or k itself (Poisson model: the
generalised Anscombe transform makes the noise unit-variance). So one strength means the same
amount of smoothing on any image, whatever its intensity units.

Everything else -- the parameter rows, Run / Stop & keep / Cancel, streaming, results, settings
-- comes from :class:`~napari_gpuscope.widgets.MethodDock` and the params model
:class:`~napari_gpuscope.compute.tv.TVParams`.

Live preview solves the displayed plane. For a volume it solves a thin slab around it *in 3D*
and shows the slab's centre plane, because 2D TV on the plane alone would not match the 3D
result of a full run; the weight (or camera model) comes from the whole image, as in a run.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from magicgui.widgets import Label
from qtpy.QtWidgets import QSizePolicy, QWidget

from napari_gpuscope.compute.jobs import Job, Output, Progress, mapped
from napari_gpuscope.compute.tv import OUTPUT, TVParams
from napari_gpuscope.widgets._base import MethodDock, PreviewResult
from napari_gpuscope.widgets._controls import CameraRows, FieldStyle, SpacingRow
from napari_gpuscope.widgets._layers import check_image_layer
from napari_gpuscope.widgets._preview import PlaneView

if TYPE_CHECKING:
    import napari.layers

__all__ = ["PREVIEW_HALF_SLAB", "PREVIEW_MAX_ITERATIONS", "PREVIEW_TOLERANCE", "TVDenoiseDock"]

PREVIEW_MAX_ITERATIONS = 50
PREVIEW_TOLERANCE = 1e-2
PREVIEW_HALF_SLAB = 3
"""Planes on each side of the displayed one in a 3D preview slab (7 planes in total)."""


class TVDenoiseDock(MethodDock):
    """Dock widget for GPU total-variation denoising.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari.
    """

    method_id = "tv"
    short_title = "TV"
    streamed_outputs = (OUTPUT,)
    hidden_fields = ("weight", "channel_axis")
    field_styles = {  # noqa: RUF012 (read-only presentation table)
        "strength": FieldStyle(slider=True, minimum=0.05, maximum=5.0),
        "gain": FieldStyle(auto_text="auto"),
        "offset": FieldStyle(minimum=-1e6, maximum=1e6),
    }

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        self._noise_cache: dict[str, Any] = {}  # "data" (a weak reference) and its estimates
        super().__init__(viewer)

    # ---------------------------------------------------------------- controls
    def custom_fields(self) -> dict[str, QWidget]:
        """The spacing row (one box per axis, from the layer scale)."""
        self.spacing_row = SpacingRow()
        self.spacing_row.changed.connect(self._on_params_changed)
        self.spacing_row.changed.connect(self._update_weight_label)  # also on new layer data
        return {"spacing": self.spacing_row}

    def build_controls(self) -> None:
        """The noise level and weight under the strength, and the camera rows."""
        self.weight_label = Label(value="")
        self.weight_label.tooltip = (
            "Noise standard deviation σ estimated from the input (in its intensity units) and "
            "the absolute TV weight the solver uses. In Poisson mode the image is "
            "variance-stabilised first, so σ = 1 there."
        )
        self.weight_label.native.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.form.add_row("", self.weight_label.native, after="strength")
        self.camera = CameraRows(self.form)
        widgets = self.form.widgets
        widgets["noise_model"].changed.connect(self._on_noise_model_changed)
        widgets["strength"].changed.connect(self._update_weight_label)
        self._on_noise_model_changed()

    def _on_noise_model_changed(self, *_: Any) -> None:
        poisson = self.form.value("noise_model") == "poisson"
        self.camera.set_visible(poisson)
        self.form.widgets["nonnegative"].value = poisson  # photon counts cannot be negative
        self._update_weight_label()

    def on_input_changed(self, layer: Any) -> None:
        """Spacing from the new layer's scale; its noise level; no stale camera estimate."""
        self.spacing_row.set_layer(layer)
        self.camera.show_estimate(None)
        self._update_weight_label()

    def _update_weight_label(self, *_: Any) -> None:
        if not hasattr(self, "camera"):
            return  # the form is still being built
        strength = self.form.value("strength")
        if self.form.value("noise_model") == "poisson":
            self.weight_label.value = f"σ = 1 (stabilised) → weight {strength:.4g}"
            return
        layer = self.input_layer
        try:
            check_image_layer(layer, check_values=False)  # runs on every slider move
            sigma = self.sigma_hat(layer.data)
        except (ValueError, RuntimeError):
            self.weight_label.value = ""  # the status line says what is wrong with the input
            return
        self.weight_label.value = f"noise σ ≈ {sigma:.3g} → weight {strength * sigma:.3g}"

    # ---------------------------------------------------------------- parameters
    def params(self) -> TVParams:
        """The parameters the controls describe (weight None: strength x noise level)."""
        return TVParams(**self.form.values(), spacing=self.spacing_row.value() or None)

    def metric_targets(self, params: TVParams) -> dict[str, float]:
        """FGP's tolerance on the relative duality gap (Chambolle's eps is not a gap)."""
        return {"relative_gap": params.tolerance} if params.method == "fgp" else {}

    def on_result(self, result: Any, *, preview: bool) -> None:
        """Show the camera model a run estimated (Poisson mode with gain "auto")."""
        solved = result.result if preview else result
        if solved.camera is not None and solved.params.gain is None:
            self.camera.show_estimate(solved.camera)
        elif preview:
            return
        else:
            self.camera.show_estimate(None)

    # ---------------------------------------------------------------- noise level
    def sigma_hat(self, data: Any) -> float:
        """Noise level of the whole input (cached per data array)."""
        return self._whole_image("sigma", data)

    def _whole_image(self, what: str, data: Any) -> Any:
        """``"sigma"`` or ``"camera"`` estimated from the whole input, cached for this array."""
        if not self._whole_image_known(data, what):
            from napari_gpuscope.compute import noise

            # Reads a deterministic subsample of planes, so lazy volumes are not loaded whole.
            estimate = (
                noise.estimate_noise_sigma if what == "sigma" else noise.estimate_poisson_gaussian
            )
            value = estimate(data)
            try:  # weakly: a deleted layer's volume must not stay in memory for this
                ref = weakref.ref(data)
            except TypeError:
                return value
            cache = self._noise_cache if self._same_data(data) else {}
            self._noise_cache = {**cache, "data": ref, what: value}
        return self._noise_cache[what]

    def _same_data(self, data: Any) -> bool:
        # The array itself is the key (an id could be reused by a later array).
        ref = self._noise_cache.get("data")
        return ref is not None and ref() is data

    def _whole_image_known(self, data: Any, what: str) -> bool:
        return self._same_data(data) and what in self._noise_cache

    # ---------------------------------------------------------------- preview
    def make_preview_job(
        self, layer: Any, params: TVParams, device: str, view: PlaneView
    ) -> Job[PreviewResult]:
        """A small-budget solve of a slab around the displayed plane."""
        return self._preview(layer.data, params, device, view)

    def _preview(
        self, data: Any, params: TVParams, device: str, view: PlaneView
    ) -> Job[PreviewResult]:
        from napari_gpuscope.compute import tv

        what = "sigma" if params.noise_model == "gaussian" else "camera"
        if params.weight is None and not self._whole_image_known(data, what):
            yield Progress(None, "estimating the noise of the whole image")
        params = params.replace(**self._whole_image_settings(data, params))
        slab = view.slab(params.spacing or (1.0,) * len(view.shape), PREVIEW_HALF_SLAB)
        image = np.ascontiguousarray(np.asarray(data[slab.selection]))  # a few planes only
        quick = params.replace(
            spacing=slab.spacing,
            max_iterations=min(PREVIEW_MAX_ITERATIONS, params.max_iterations),
            tolerance=max(PREVIEW_TOLERANCE, params.tolerance),
        )

        def to_plane(update: Progress) -> Progress:
            output = update.outputs.get(OUTPUT)
            if output is None or output.region is not None:
                return dataclasses.replace(update, outputs={})

            def plane() -> np.ndarray:
                return output.array()[slab.centre]

            return dataclasses.replace(update, outputs={OUTPUT: Output(plane)})

        result = yield from mapped(tv.iter_denoise(image, params=quick, device=device), to_plane)
        in_3d = len(slab.spacing) > 2  # coupled to the planes around it
        note = f"displayed plane ({'3D slab, ' if in_3d else ''}at most {quick.max_iterations} "
        note += "iterations)"
        return PreviewResult(result, {OUTPUT: np.asarray(result.image)[slab.centre]}, note)

    def _whole_image_settings(self, data: Any, params: TVParams) -> dict[str, Any]:
        """The weight or camera a full run would derive from the whole image, so a preview of
        one plane smooths exactly like the run."""
        if params.weight is not None:
            return {}
        if params.noise_model == "gaussian":
            sigma = self.sigma_hat(data)
            if not (math.isfinite(sigma) and sigma > 0):
                raise ValueError(
                    f"The estimated noise level of the input is {sigma:g}: the image looks "
                    "noise-free (or constant), so a noise-relative strength is undefined."
                )
            return {"weight": params.strength * sigma}
        if params.gain is not None:
            return {}
        camera = self._whole_image("camera", data)
        return {"gain": camera.gain, "offset": camera.offset, "read_noise": camera.read_noise}
