"""The "TV denoise" dock: total-variation (ROF) denoising with a noise-relative strength.

The user sets a *strength* k; the solver weight is ``k x sigma`` where sigma is the noise level
the job estimates from the whole input (Gaussian model), or k itself (Poisson model: the
generalised Anscombe transform makes the noise unit-variance). So one strength means the same
amount of smoothing on any image, whatever its intensity units.

Everything else -- the parameter rows, Run / Stop & keep / Cancel, streaming, results, settings
-- comes from :class:`~napari_gpuscope.widgets.MethodDock` and the params model
:class:`~napari_gpuscope.compute.tv.TVParams`.

Live preview solves the displayed plane. For a volume it solves a thin slab around it *in 3D*
and shows the slab's centre plane, because 2D TV on the plane alone would not match the 3D
result of a full run. The weight (or camera model) comes from the whole image, as in a run:
:func:`~napari_gpuscope.compute.tv.resolve_weight` (what a run does first, with the same checks)
runs in the preview's worker thread and is remembered per array. The noise level and weight
shown under the strength are those of the latest preview or run: nothing is estimated on the GUI
thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from magicgui.widgets import Label
from qtpy.QtWidgets import QSizePolicy, QWidget

from napari_gpuscope.compute.jobs import Job, Output, Progress, mapped
from napari_gpuscope.compute.tv import OUTPUT, TVParams
from napari_gpuscope.widgets._base import MethodDock, PreviewResult
from napari_gpuscope.widgets._controls import CameraRows, FieldStyle, SpacingRow
from napari_gpuscope.widgets._preview import PlaneView

if TYPE_CHECKING:
    import napari.layers

__all__ = [
    "PREVIEW_HALF_SLAB",
    "PREVIEW_MAX_ITERATIONS",
    "PREVIEW_TOLERANCE",
    "TVDenoiseDock",
    "TVPreview",
]

PREVIEW_MAX_ITERATIONS = 50
PREVIEW_TOLERANCE = 1e-2
PREVIEW_HALF_SLAB = 3
"""Planes on each side of the displayed one in a 3D preview slab (7 planes in total)."""

_UNKNOWN_SIGMA = "noise σ: not estimated yet"


@dataclass(frozen=True)
class TVPreview(PreviewResult):
    """A TV preview: the slab's result (weight and noise level of the whole image), and
    whether the camera model was estimated (gain "auto")."""

    estimated_camera: bool = False


class _WholeImageWeights:
    """:func:`~napari_gpuscope.compute.tv.resolve_weight` of a whole input, remembered.

    Only preview jobs (worker threads) use it; the lock keeps it consistent should two ever
    overlap. The key is the array itself, held weakly (a deleted layer's volume must not stay
    in memory for this), and the parameters that decide the estimate. The strength is not one
    of them: it scales the weight (``TVParams``: weight = strength x noise sigma, or strength
    in Poisson mode), so moving the strength slider estimates nothing again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: weakref.ref[Any] | None = None
        self._known: dict[TVParams, Any] = {}

    @staticmethod
    def _key(params: TVParams) -> TVParams:
        """``params`` at strength 1, without what only the solver uses."""
        return TVParams(
            weight=params.weight,
            noise_model=params.noise_model,
            gain=params.gain,
            offset=params.offset,
            read_noise=params.read_noise,
            channel_axis=params.channel_axis,
        )

    def _lookup(self, data: Any, key: TVParams) -> Any:
        same = self._data is not None and self._data() is data
        return self._known.get(key) if same else None

    def known(self, data: Any, params: TVParams) -> bool:
        """Whether :meth:`resolve` would answer without reading the image."""
        with self._lock:
            return self._lookup(data, self._key(params)) is not None

    def resolve(self, data: Any, params: TVParams) -> Any:
        """The weight, noise level and camera model a run on ``data`` would use."""
        from napari_gpuscope.compute import tv

        key = self._key(params)
        with self._lock:
            unit = self._lookup(data, key)
        if unit is None:
            unit = tv.resolve_weight(data, key)  # reads the image: outside the lock
            with self._lock:
                if self._data is None or self._data() is not data:
                    self._known = {}
                    try:
                        self._data = weakref.ref(data)
                    except TypeError:  # not weakly referable: not remembered
                        self._data = None
                if self._data is not None:
                    self._known[key] = unit
        if params.weight is not None:
            return unit
        return dataclasses.replace(unit, weight=params.strength * unit.weight)


def _estimate_message(params: TVParams) -> str | None:
    """What resolving the weight estimates from the whole image, in words (None: nothing)."""
    if params.noise_model == "poisson":
        if params.gain is None:
            return "estimating the camera gain, offset and read noise from the whole image"
        return None
    return "estimating the noise level of the whole image" if params.weight is None else None


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
        self._whole_image = _WholeImageWeights()
        # The noise level the latest preview or run found, and the array it belongs to (GUI
        # thread only; weakly held).
        self._sigma: tuple[weakref.ref[Any], float] | None = None
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
            "Noise standard deviation σ estimated from the whole input (in its intensity units) "
            "and the absolute TV weight the solver uses, as found by the latest preview or run. "
            "In Poisson mode the image is variance-stabilised first, so σ = 1 there."
        )
        self.weight_label.native.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.form.add_row("", self.weight_label.native, after="strength")
        self.camera = CameraRows(self.form)
        widgets = self.form.widgets
        widgets["noise_model"].changed.connect(self._on_noise_model_changed)
        widgets["strength"].changed.connect(self._update_weight_label)
        self.spacing_row.changed.connect(self._update_weight_label)  # also on new layer data
        self._on_noise_model_changed()

    def _on_noise_model_changed(self, *_: Any) -> None:
        poisson = self.form.value("noise_model") == "poisson"
        self.camera.set_visible(poisson)
        self.form.widgets["nonnegative"].value = poisson  # photon counts cannot be negative
        self._update_weight_label()

    def on_input_changed(self, layer: Any) -> None:
        """Spacing from the new layer's scale; no stale camera estimate."""
        self.spacing_row.set_layer(layer)
        self.camera.show_estimate(None)
        self._update_weight_label()

    def _known_sigma(self) -> float | None:
        """The noise level found for the input's current data (None: not known yet)."""
        layer = self.input_layer
        if self._sigma is None or layer is None:
            return None
        data_ref, sigma = self._sigma
        return sigma if data_ref() is layer.data else None

    def _update_weight_label(self, *_: Any) -> None:
        strength = self.form.value("strength")
        if self.form.value("noise_model") == "poisson":
            self.weight_label.value = f"σ = 1 (stabilised) → weight {strength:.4g}"
            return
        sigma = self._known_sigma()
        if sigma is None:
            self.weight_label.value = _UNKNOWN_SIGMA if self.input_layer is not None else ""
        else:
            self.weight_label.value = f"noise σ ≈ {sigma:.3g} → weight {strength * sigma:.3g}"

    # ---------------------------------------------------------------- parameters
    def params(self) -> TVParams:
        """The parameters the controls describe (weight None: strength x noise level)."""
        return TVParams(**self.form.values(), spacing=self.spacing_row.value() or None)

    def metric_targets(self, params: TVParams) -> dict[str, float]:
        """FGP's tolerance on the relative duality gap (Chambolle's eps is not a gap)."""
        return {"relative_gap": params.tolerance} if params.method == "fgp" else {}

    def on_result(self, result: Any, *, preview: bool, layer: Any) -> None:
        """Remember the noise level the job found; show the camera model it estimated."""
        if preview:
            solved, estimated = result.result, result.estimated_camera
        else:
            solved, estimated = result, result.params.gain is None
        if solved.noise_sigma is not None:
            with contextlib.suppress(TypeError):  # data that cannot be weakly referenced
                self._sigma = (weakref.ref(layer.data), float(solved.noise_sigma))
        if layer == self.input_layer:
            self._update_weight_label()
        poisson = solved.params.noise_model == "poisson"
        if poisson and estimated and solved.camera is not None:
            self.camera.show_estimate(solved.camera)
        elif not preview:
            self.camera.show_estimate(None)

    # ---------------------------------------------------------------- preview
    def make_preview_job(
        self, layer: Any, params: TVParams, device: str, view: PlaneView
    ) -> Job[TVPreview]:
        """A small-budget solve of a slab around the displayed plane."""
        return self._preview(layer.data, params, device, view)

    def _preview(self, data: Any, params: TVParams, device: str, view: PlaneView) -> Job[TVPreview]:
        from napari_gpuscope.compute import tv

        # Everything below runs in the worker thread (the first line on the first resume).
        message = _estimate_message(params)
        if message is not None and not self._whole_image.known(data, params):
            yield Progress(None, message)
        resolved = self._whole_image.resolve(data, params)
        fixed: dict[str, Any] = {"weight": resolved.weight}  # so the slab smooths like a run
        if resolved.camera is not None:
            camera = resolved.camera
            fixed.update(gain=camera.gain, offset=camera.offset, read_noise=camera.read_noise)
        slab = view.slab(params.spacing or (1.0,) * len(view.shape), PREVIEW_HALF_SLAB)
        image = np.ascontiguousarray(np.asarray(data[slab.selection]))  # a few planes only
        quick = params.replace(
            **fixed,
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
        # The weight is strength x the noise level of the whole image, as the result says.
        result = dataclasses.replace(result, noise_sigma=resolved.noise_sigma)
        in_3d = len(slab.spacing) > 2  # coupled to the planes around it
        note = f"displayed plane ({'3D slab, ' if in_3d else ''}at most {quick.max_iterations} "
        note += "iterations)"
        planes = {OUTPUT: np.asarray(result.image)[slab.centre]}
        return TVPreview(result, planes, note, estimated_camera=params.gain is None)
