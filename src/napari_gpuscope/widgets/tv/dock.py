"""The "TV denoise" dock: total-variation (ROF) denoising with a noise-relative strength.

The user sets a *strength* k; the solver weight is ``k x sigma`` where sigma is the noise level
the job estimates from the whole input (Gaussian model), or k itself (Poisson model: the
generalised Anscombe transform makes the noise unit-variance). So one strength means the same
amount of smoothing on any image, whatever its intensity units.

Everything else -- the parameter rows, Run / Stop & keep / Cancel, streaming, results, settings
-- comes from :class:`~napari_gpuscope.widgets.MethodDock` and the params model
:class:`~napari_gpuscope.compute.tv.TVParams`.

Live preview (:mod:`napari_gpuscope.compute.tv._preview`) solves the displayed plane, smoothing
like a run. The noise level and weight shown under the strength are estimated when the input is
chosen (in-memory inputs, on a worker thread: :mod:`.noise`), or by the latest preview or run;
nothing is estimated on the GUI thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from magicgui.widgets import Label
from qtpy.QtWidgets import QSizePolicy, QWidget

from napari_gpuscope.compute.jobs import Job
from napari_gpuscope.compute.preview import DataIdentity, PlaneView
from napari_gpuscope.compute.tv import (
    OUTPUT,
    TVParams,
    TVPreview,
    TVResult,
    WholeImageWeights,
    preview_job,
)
from napari_gpuscope.export.units import intensity_unit
from napari_gpuscope.widgets._base import MethodDock
from napari_gpuscope.widgets._controls import CameraRows, FieldStyle, SpacingRow
from napari_gpuscope.widgets.tv.noise import NoiseEstimate

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.preview import PreviewResult
    from napari_gpuscope.compute.results import MethodResult
    from napari_gpuscope.compute.tv import TVResult

__all__ = ["TVDenoiseDock"]

_UNKNOWN_SIGMA = "noise σ: estimated by the first preview or run"
"""A lazy (dask, zarr) input is not read only because it was chosen."""
_ESTIMATING = "noise σ: estimating..."


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
        self._whole_image = WholeImageWeights()
        # The noise level the latest preview or run found, and the array (weakly held, with a
        # sample of its content) it belongs to. GUI thread only.
        self._sigma: tuple[DataIdentity, float] | None = None
        # Why the input's noise level cannot be estimated (a noise-free image), and of which
        # array: said once, not estimated again at every label update.
        self._sigma_problem: tuple[DataIdentity, str] | None = None
        super().__init__(viewer)

    # ---------------------------------------------------------------- controls
    def custom_fields(self) -> dict[str, QWidget]:
        """The spacing row (one box per axis, from the layer scale)."""
        self.spacing_row = SpacingRow()
        self.spacing_row.changed.connect(self._on_params_changed)
        return {"spacing": self.spacing_row}

    def build_controls(self) -> None:
        """The noise level and weight under the strength, and the camera rows."""
        self.weight_label = Label(value="")
        self.weight_label.tooltip = (
            "Noise standard deviation σ estimated from the whole input (in its intensity units, "
            "when the input is chosen, as a run estimates it) and the absolute TV weight the "
            "solver uses: strength × σ. In Poisson mode the image is variance-stabilised first, "
            "so σ = 1 there."
        )
        # Wrapped: "noise σ ≈ 6.42 ADU → weight 6.42" is cut at the dock's default width.
        self.weight_label.native.setWordWrap(True)
        self.weight_label.native.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.form.add_row("", self.weight_label.native, after="strength")
        self.noise = NoiseEstimate(self, self._whole_image)
        self.noise.found.connect(self._on_sigma_found)
        self.noise.failed.connect(self._on_sigma_failed)
        self.camera = CameraRows(self.form)
        widgets = self.form.widgets
        widgets["noise_model"].changed.connect(self._on_noise_model_changed)
        widgets["strength"].changed.connect(self._update_weight_label)
        self.spacing_row.changed.connect(self._update_weight_label)  # also on new layer data
        self._on_noise_model_changed()

    def _on_noise_model_changed(self, *_: object) -> None:
        poisson = self.form.value("noise_model") == "poisson"
        self.camera.set_visible(poisson)
        self.form.widgets["nonnegative"].value = poisson  # photon counts cannot be negative
        self._update_weight_label()

    def on_input_changed(self, layer: napari.layers.Image | None) -> None:
        """Spacing from the new layer's scale; no stale camera estimate."""
        self.spacing_row.set_layer(layer)
        self.camera.show_estimate(None)
        self._update_weight_label()

    def _known_sigma(self) -> float | None:
        """The noise level found for the input's current data (None: not known yet)."""
        layer = self.input_layer
        if self._sigma is None or layer is None:
            return None
        data, sigma = self._sigma
        return sigma if data.matches(layer.data) else None

    def _update_weight_label(self, *_: object) -> None:
        strength = self.form.value("strength")
        if self.form.value("noise_model") == "poisson":
            self.weight_label.value = f"σ = 1 (stabilised) → weight {strength:.4g}"
            return
        sigma = self._known_sigma()
        layer = self.input_layer
        if sigma is not None:
            # In the input's intensity unit where the layer states one (e.g. ADU).
            unit = intensity_unit(layer, self.viewer.layers) if layer is not None else None
            sigma_text = f"{sigma:.3g} {unit}" if unit else f"{sigma:.3g}"
            self.weight_label.value = f"noise σ ≈ {sigma_text} → weight {strength * sigma:.3g}"
        elif layer is None:
            self.weight_label.value = ""
        elif self._sigma_problem is not None and self._sigma_problem[0].matches(layer.data):
            # The reason is long (a noise-free image, what to do): the status says it at Run.
            self.weight_label.value = "noise σ: cannot be estimated from this image"
        else:
            self.weight_label.value = self._estimate_sigma(layer)

    def _estimate_sigma(self, layer: napari.layers.Image) -> str:
        """Start estimating the input's noise level (off the GUI thread); what to say."""
        running = self.noise.running
        if running is not None:
            return _ESTIMATING if running.matches(layer.data) else _UNKNOWN_SIGMA
        try:
            self.validate_input(layer, check_values=False)
            params = self.build_params()  # read only: the model's parameters stay as they are
        except ValueError:
            return ""  # the status line (or the form) says what is wrong
        return _ESTIMATING if self.noise.start(layer.data, params) else _UNKNOWN_SIGMA

    def _on_sigma_found(self, data: DataIdentity, sigma: float) -> None:
        self._sigma = (data, sigma)
        self._update_weight_label()

    def _on_sigma_failed(self, data: DataIdentity, message: str) -> None:
        self._sigma_problem = (data, message)
        self._update_weight_label()

    def release(self) -> None:
        """Also stop listening to a noise estimate still running."""
        self.noise.release()
        super().release()

    # ---------------------------------------------------------------- parameters
    def build_params(self) -> TVParams:
        """The parameters the controls describe (weight None: strength x noise level)."""
        return TVParams(**self.form.values(), spacing=self.spacing_row.value() or None)

    def metric_targets(self, params: TVParams) -> dict[str, float]:
        """FGP's tolerance on the relative duality gap (Chambolle's eps is not a gap)."""
        return {"relative_gap": params.tolerance} if params.method == "fgp" else {}

    def on_result(
        self, result: MethodResult | PreviewResult, *, preview: bool, layer: napari.layers.Image
    ) -> None:
        """Remember the noise level the job found; show the camera model it estimated."""
        # TVResult from a run, TVPreview from a preview (typing only: unchecked).
        solved: TVResult
        if preview:
            shown = cast(TVPreview, result)
            solved, estimated = shown.result, shown.estimated_camera
        else:
            solved = cast("TVResult", result)
            estimated = solved.params.gain is None
        if solved.noise_sigma is not None:
            self._sigma = (DataIdentity(layer.data), float(solved.noise_sigma))
        if layer == self.input_layer:
            self._update_weight_label()
        poisson = solved.params.noise_model == "poisson"
        if poisson and estimated and solved.camera is not None:
            self.camera.show_estimate(solved.camera)
        elif not preview:
            self.camera.show_estimate(None)

    # ---------------------------------------------------------------- preview
    def make_job(self, layer: napari.layers.Image, params: TVParams, device: str) -> Job[TVResult]:
        """The registry's job; its result says σ in the layer's intensity unit (the status,
        the provenance's automatic choices and the figure's caption)."""
        unit = intensity_unit(layer, self.viewer.layers)
        return _with_unit(super().make_job(layer, params, device), unit)

    def make_preview_job(
        self, layer: napari.layers.Image, params: TVParams, device: str, view: PlaneView
    ) -> Job[TVPreview]:
        """A small-budget solve of a slab around the displayed plane."""
        return preview_job(self._whole_image, layer.data, params, device, view)


def _with_unit(job: Job[TVResult], unit: str | None) -> Job[TVResult]:
    result = yield from job
    return result.with_intensity_unit(unit) if unit else result
