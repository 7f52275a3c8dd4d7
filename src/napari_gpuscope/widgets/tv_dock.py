"""The "TV denoise" dock: total-variation (ROF) denoising with a noise-relative strength.

The user sets a *strength* k; the solver weight is ``k * sigma_hat`` where ``sigma_hat`` is the
estimated noise level of the input (Gaussian model) or 1 (Poisson model: the generalised
Anscombe transform makes the noise unit-variance). So one strength means the same amount of
smoothing on any image, whatever its intensity units.

Live preview solves the plane shown in the viewer. For a volume it solves a thin slab around the
current z *in 3D* and shows the slab's centre plane, because 2D TV on the plane alone would not
match the 3D result of a full run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from magicgui.widgets import CheckBox, ComboBox, Container, FloatSlider, FloatSpinBox, Label
from magicgui.widgets import SpinBox as IntSpinBox
from qtpy.QtWidgets import QVBoxLayout, QWidget
from superqt import QCollapsible

from napari_gpuscope.compute.jobs import Job, Progress
from napari_gpuscope.widgets._base import MethodDock
from napari_gpuscope.widgets._layers import check_image_layer, spacing_from_layer

if TYPE_CHECKING:
    import napari.layers
    import napari.viewer

__all__ = ["TVDenoiseDock", "TVPreviewResult"]

PREVIEW_MAX_ITERATIONS = 50
PREVIEW_TOLERANCE = 1e-2
PREVIEW_HALF_SLAB = 3
"""Planes on each side of the current one in a 3D preview slab (7 planes in total)."""

_METHODS = [("FGP (fast, default)", "fgp"), ("Chambolle (scikit-image parity)", "chambolle")]
_NOISE_MODELS = [
    ("Gaussian", "gaussian"),
    ("Poisson (camera: gain, offset, read noise)", "poisson"),
]


@dataclass
class TVPreviewResult:
    """Result of a preview job: the slab's solver result and the plane that is shown."""

    result: Any
    plane: np.ndarray

    def summary(self) -> dict[str, Any]:
        """The solver result's summary, marked as a preview."""
        summary_fn = getattr(self.result, "summary", None)
        summary = dict(summary_fn()) if callable(summary_fn) else {}
        summary["preview"] = True
        return summary


def _centre_plane_job(job: Job[Any], centre: tuple[int, ...]) -> Job[TVPreviewResult]:
    """Forward a slab job's progress, reduced to the centre plane that the preview shows."""
    try:
        while True:
            try:
                update = next(job)
            except StopIteration as stop:
                result = stop.value
                break
            plane = None
            if update.preview is not None and update.preview_region is None:
                plane = np.asarray(update.preview)[centre]
            yield Progress(update.fraction, update.message, plane, None, update.metrics)
    finally:
        job.close()
    return TVPreviewResult(result, np.asarray(result.image)[centre])


class TVDenoiseDock(MethodDock):
    """Dock widget for GPU total-variation denoising.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari.
    """

    method_id = "tv"
    method_title = "TV denoise"

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        self._sigma_cache: dict[tuple[int, int], float] = {}
        super().__init__(viewer)
        self._on_input_changed()

    # ---------------------------------------------------------------- parameters UI
    def build_parameters(self) -> QWidget:
        """Input layer, strength, noise model, spacing, and an "Advanced" section."""
        self.image_combo = ComboBox(label="Input", choices=self._image_layer_choices)
        self.strength = FloatSlider(
            label="Strength (× σ̂)",
            min=0.05,
            max=5.0,
            step=0.05,
            value=1.0,
            tooltip="Solver weight = strength × estimated noise level σ̂",
        )
        self.weight_label = Label(label="Weight", value="")
        self.noise_model = ComboBox(label="Noise model", choices=_NOISE_MODELS, value="gaussian")
        self.gain = FloatSpinBox(
            label="Gain (ADU/photon)",
            min=0.0,
            max=1e6,
            step=0.1,
            value=0.0,
            tooltip="0 = estimate from the image",
        )
        self.offset = FloatSpinBox(
            label="Offset (ADU)",
            min=0.0,
            max=1e6,
            step=1.0,
            value=0.0,
            tooltip="0 = estimate from the image",
        )
        self.read_noise = FloatSpinBox(
            label="Read noise (ADU)",
            min=0.0,
            max=1e6,
            step=0.1,
            value=0.0,
            tooltip="0 = estimate from the image",
        )
        self.spacing = Container(label="Spacing weights", layout="horizontal", labels=False)
        self.spacing.tooltip = (
            "Per-axis TV weights, x pixel size / axis step (from the layer scale). "
            "Time axes default to 0 (frames denoised independently)."
        )
        self.main_parameters = Container(
            widgets=[
                self.image_combo,
                self.strength,
                self.weight_label,
                self.noise_model,
                self.gain,
                self.offset,
                self.read_noise,
                self.spacing,
            ]
        )
        self.method = ComboBox(label="Solver", choices=_METHODS, value="fgp")
        self.tolerance = FloatSpinBox(
            label="Tolerance (rel. gap)", min=1e-6, max=0.5, step=1e-5, value=1e-3
        )
        self.max_iterations = IntSpinBox(label="Max iterations", min=1, max=100_000, value=200)
        self.nonnegative = CheckBox(label="Non-negative", value=False)
        self.advanced_parameters = Container(
            widgets=[self.method, self.tolerance, self.max_iterations, self.nonnegative]
        )
        self.advanced = QCollapsible("Advanced")
        self.advanced.addWidget(self.advanced_parameters.native)

        self.image_combo.changed.connect(self._on_input_changed)
        self.noise_model.changed.connect(self._on_noise_model_changed)
        self.strength.changed.connect(self._update_weight_label)
        for container in (self.main_parameters, self.advanced_parameters):
            container.changed.connect(self.request_preview)

        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.main_parameters.native)
        layout.addWidget(self.advanced)
        self._on_noise_model_changed()
        return panel

    def _image_layer_choices(self, *_: Any) -> list[tuple[str, Any]]:
        from napari.layers import Image

        return [(layer.name, layer) for layer in self.viewer.layers if isinstance(layer, Image)]

    def reset_choices(self, *_: Any) -> None:
        """Refresh the input combo from the layer list."""
        self.main_parameters.reset_choices()

    def _on_input_changed(self, *_: Any) -> None:
        layer = self.input_layer()
        self.spacing.clear()
        if layer is not None:
            weights = spacing_from_layer(layer)
            labels = list(getattr(layer, "axis_labels", None) or range(layer.ndim))
            for label, weight in zip(labels, weights, strict=False):
                box = FloatSpinBox(
                    name=f"axis_{len(self.spacing)}",
                    label=str(label),
                    min=0.0,
                    max=100.0,
                    step=0.05,
                    tooltip=f"TV weight along axis {label}",
                )
                box.native.setDecimals(4)  # e.g. 1/3 for a 0.3 µm z-step with 0.1 µm pixels
                box.value = weight
                self.spacing.append(box)
        self._update_weight_label()

    def _on_noise_model_changed(self, *_: Any) -> None:
        poisson = self.noise_model.value == "poisson"
        for widget in (self.gain, self.offset, self.read_noise):
            widget.visible = poisson
        self.nonnegative.value = poisson  # fluorescence counts cannot be negative
        self._update_weight_label()

    # ---------------------------------------------------------------- noise level
    def _sigma_hat(self, layer: napari.layers.Layer) -> float:
        """Estimated noise level of the layer's data (cached per layer and data array)."""
        key = (id(layer), id(layer.data))
        if key not in self._sigma_cache:
            from napari_gpuscope.compute.noise import estimate_noise_sigma

            data = layer.data
            if not isinstance(data, np.ndarray):  # lazy data: estimate on the shown plane only
                data = data[self.current_index(layer)[:-2]]
            self._sigma_cache = {key: estimate_noise_sigma(np.asarray(data))}
        return self._sigma_cache[key]

    def _noise_scale(self, layer: napari.layers.Layer) -> float:
        """The noise level the strength multiplies (1 after variance stabilisation)."""
        if self.noise_model.value == "poisson":
            return 1.0
        return self._sigma_hat(layer)

    def _update_weight_label(self, *_: Any) -> None:
        if not hasattr(self, "weight_label"):
            return
        layer = self.input_layer()
        try:
            check_image_layer(layer)
            scale = self._noise_scale(layer)
        except (ValueError, RuntimeError) as exc:
            self.weight_label.value = f"(no valid input: {str(exc).split(';')[0]})"
            return
        strength = self.strength.value
        if self.noise_model.value == "poisson":
            self.weight_label.value = f"σ̂ = 1 (variance-stabilised), weight = {strength:.3g}"
        else:
            self.weight_label.value = f"σ̂ = {scale:.4g}, weight = {strength * scale:.4g}"

    # ---------------------------------------------------------------- MethodDock hooks
    def input_layer(self) -> napari.layers.Layer | None:
        """The layer selected in the "Input" combo."""
        return self.image_combo.value

    def validate_input(self, layer: napari.layers.Layer | None) -> None:
        """Accept single-channel, finite Image layers with 2 to 4 axes."""
        check_image_layer(layer, min_ndim=2, max_ndim=4)

    def collect_parameters(self) -> dict[str, Any]:
        """Read the widgets into the solver parameters (plus strength and σ̂ for provenance)."""
        layer = self.input_layer()
        name = getattr(layer, "name", "?")
        strength = float(self.strength.value)
        noise_model = str(self.noise_model.value)
        scale = self._noise_scale(layer)
        if not np.isfinite(scale) or scale <= 0:
            raise ValueError(
                f"The estimated noise level of layer '{name}' is {scale:g}: the image looks "
                "noise-free (or constant), so a noise-relative strength is undefined. "
                "Nothing to denoise."
            )
        spacing = tuple(float(w.value) for w in self.spacing)
        if len(spacing) != layer.ndim:
            raise ValueError(
                f"Expected {layer.ndim} spacing weights for layer '{name}', got {len(spacing)}."
            )
        if not any(spacing):
            raise ValueError("All spacing weights are 0: at least one axis must be smoothed.")

        def optional(widget: FloatSpinBox) -> float | None:
            return float(widget.value) if widget.value > 0 else None  # 0 = estimate

        poisson = noise_model == "poisson"
        return {
            "strength": strength,
            "sigma_hat": float(scale),
            "weight": strength * float(scale),
            "method": str(self.method.value),
            "spacing": spacing,
            "noise_model": noise_model,
            "gain": optional(self.gain) if poisson else None,
            "offset": optional(self.offset) if poisson else None,
            "read_noise": optional(self.read_noise) if poisson else None,
            "max_iterations": int(self.max_iterations.value),
            "tolerance": float(self.tolerance.value),
            "nonnegative": bool(self.nonnegative.value),
        }

    @staticmethod
    def _solver_kwargs(params: dict[str, Any]) -> dict[str, Any]:
        keys = (
            "method",
            "spacing",
            "noise_model",
            "gain",
            "offset",
            "read_noise",
            "max_iterations",
            "tolerance",
            "nonnegative",
        )
        return {key: params[key] for key in keys}

    def current_index(self, layer: napari.layers.Layer) -> tuple[int, ...]:
        """Data index of the plane the viewer shows for ``layer`` (clamped to its shape)."""
        point = tuple(self.viewer.dims.point)[-layer.ndim :]
        coords = np.asarray(layer.world_to_data(point), dtype=float)
        shape = np.shape(layer.data)
        return tuple(int(np.clip(round(c), 0, n - 1)) for c, n in zip(coords, shape, strict=True))

    def make_job(
        self, layer: napari.layers.Layer, params: dict[str, Any], device: str, *, preview: bool
    ) -> Job[Any]:
        """A full run on the whole layer, or a small-budget run on the current plane/slab."""
        from napari_gpuscope.compute import tv

        data = layer.data  # lazy arrays stay lazy: the job reads them chunk by chunk
        kwargs = self._solver_kwargs(params)
        if not preview:
            return tv.iter_denoise(
                data, params["weight"], channel_axis=None, device=device, **kwargs
            )

        index = self.current_index(layer)
        spacing = params["spacing"]
        selection: list[int | slice] = []
        centre: list[int] = []
        slab_spacing: list[float] = []
        for axis in range(layer.ndim - 2):
            i = index[axis]
            if spacing[axis] == 0:  # an uncoupled axis (time): just take the current frame
                selection.append(i)
                continue
            lo = max(0, i - PREVIEW_HALF_SLAB)
            hi = min(data.shape[axis], i + PREVIEW_HALF_SLAB + 1)
            selection.append(slice(lo, hi))
            centre.append(i - lo)
            slab_spacing.append(spacing[axis])
        slab = np.ascontiguousarray(np.asarray(data[tuple(selection)]))  # a few planes only
        kwargs.update(
            spacing=tuple(slab_spacing) + tuple(spacing[-2:]),
            max_iterations=min(PREVIEW_MAX_ITERATIONS, params["max_iterations"]),
            tolerance=max(PREVIEW_TOLERANCE, params["tolerance"]),
        )
        job = tv.iter_denoise(slab, params["weight"], channel_axis=None, device=device, **kwargs)
        return _centre_plane_job(job, tuple(centre))

    def result_layers(
        self, result: Any, layer: napari.layers.Layer, params: dict[str, Any], *, preview: bool
    ) -> list[tuple]:
        """One Image layer: the denoised data (or the previewed plane)."""
        if preview:
            return [(result.plane, {}, "image")]
        return [(np.asarray(result.image), {}, "image")]

    def stream_shape(
        self, layer: napari.layers.Layer, params: dict[str, Any], *, preview: bool
    ) -> tuple[int, ...]:
        """Full runs stream into an input-shaped buffer; previews are single planes."""
        shape = tuple(np.shape(layer.data))
        return shape[-2:] if preview else shape

    def describe_result(self, result: Any) -> str:
        """Iterations, final relative gap and weight."""
        solver = getattr(result, "result", result)
        converged = "Converged" if getattr(solver, "converged", False) else "Stopped"
        iterations = getattr(solver, "iterations", "?")
        gap = getattr(solver, "relative_gap", float("nan"))
        weight = getattr(solver, "weight", float("nan"))
        return (
            f"{converged} after {iterations} iterations, relative gap {gap:.2e}, "
            f"weight {weight:.4g}."
        )
