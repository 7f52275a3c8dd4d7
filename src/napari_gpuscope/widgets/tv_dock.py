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

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from magicgui.widgets import CheckBox, ComboBox, FloatSlider, FloatSpinBox, Label
from magicgui.widgets import SpinBox as IntSpinBox
from qtpy.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)
from superqt import QCollapsible

from napari_gpuscope.compute.jobs import Job, Output, Progress, mapped
from napari_gpuscope.compute.tv import OUTPUT
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

_METHODS = [("FGP (fast)", "fgp"), ("Chambolle (= scikit-image)", "chambolle")]
_NOISE_MODELS = [("Gaussian", "gaussian"), ("Poisson (photon counts)", "poisson")]
_SPACING_TOOLTIP = (
    "How strongly neighbouring pixels are coupled along each axis: x pixel size ÷ step along "
    "that axis, filled in from the layer scale (e.g. 0.1 µm pixels and 0.4 µm z-steps give "
    "z = 0.25). 0 = planes/frames along that axis are denoised independently (the default "
    "for time)."
)
_DEFAULT_AXIS_NAMES = ("x", "y", "z")
"""Names of the trailing axes when a layer has napari's default ("-1", "-2"...) axis labels."""


def _axis_names(layer: napari.layers.Layer) -> list[str]:
    """Short display names of the layer's axes: its axis labels, or z/y/x for default labels."""
    labels = [str(label) for label in (getattr(layer, "axis_labels", None) or ())]
    if len(labels) != layer.ndim:
        labels = [str(axis - layer.ndim) for axis in range(layer.ndim)]
    names = []
    for axis, label in enumerate(labels):
        from_end = layer.ndim - 1 - axis
        if label.lstrip("-").isdigit():  # napari's default label: name it by position
            label = (
                _DEFAULT_AXIS_NAMES[from_end]
                if from_end < len(_DEFAULT_AXIS_NAMES)
                else f"axis {axis}"
            )
        names.append(label)
    return names


def _axis_tooltip(name: str, weight: float, step: float, x_step: float) -> str:
    """Plain-words tooltip of one spacing box."""
    if weight == 0:
        origin = f"0: {name} planes/frames are denoised independently (time axis)."
    else:
        origin = f"x pixel size / {name} step = {x_step:g} / {step:g} = {weight:.3g} (layer scale)."
    return (
        f"Smoothing weight along {name}. Default {origin} "
        "0 = no smoothing across this axis; 1 = as strong as along x."
    )


def _compact_combo(combo: QComboBox, characters: int = 12) -> None:
    """Let a combo box shrink below its longest entry so it does not widen the dock."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(characters)


class _Form(QWidget):
    """A two-column form whose labels line up (magicgui's own label widths do not, under
    napari's style sheet) and whose rows can be hidden as a whole."""

    def __init__(self) -> None:
        super().__init__()
        self.form = QFormLayout(self)
        self.form.setContentsMargins(0, 0, 0, 0)
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self._labels: dict[int, QLabel] = {}

    def add_widget(self, label: str, field: QWidget, tooltip: str = "") -> QLabel:
        """Add a row with a plain Qt field."""
        label_widget = QLabel(label)
        if tooltip:
            label_widget.setToolTip(tooltip)
        self.form.addRow(label_widget, field)
        self._labels[id(field)] = label_widget
        return label_widget

    def add(self, widget: Any) -> QLabel:
        """Add a row for a magicgui widget, labelled with its label and sharing its tooltip."""
        return self.add_widget(widget.label, widget.native, widget.tooltip or "")

    def set_row_visible(self, widget: Any, visible: bool) -> None:
        """Show or hide a magicgui widget together with its label."""
        widget.visible = visible
        self._labels[id(widget.native)].setVisible(visible)


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
    """Forward a slab job's progress, its output reduced to the centre plane the preview shows."""

    def to_plane(update: Progress) -> Progress:
        output = update.outputs.get(OUTPUT)
        if output is None or output.region is not None:
            return dataclasses.replace(update, outputs={})

        def plane() -> np.ndarray:
            return output.array()[centre]

        return dataclasses.replace(update, outputs={OUTPUT: Output(plane)})

    result = yield from mapped(job, to_plane)
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
    streamed_output = OUTPUT

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        self._sigma_cache: dict[tuple[int, int], float] = {}
        # (max_iterations, tolerance) of the latest full run (False) and preview (True) started,
        # for the status line
        self._limits: dict[bool, tuple[int, float]] = {}
        super().__init__(viewer)
        self._on_input_changed()

    # ---------------------------------------------------------------- parameters UI
    def build_parameters(self) -> QWidget:
        """Input layer, strength, noise model, spacing, and an "Advanced" section."""
        self.image_combo = ComboBox(label="Input", choices=self._image_layer_choices)
        self.image_combo.tooltip = (
            "Image layer to denoise (2D, 3D or 4D, single channel). It is never modified: "
            "the result goes to a new layer."
        )
        self.strength = FloatSlider(
            label="Strength",
            min=0.05,
            max=5.0,
            step=0.05,
            value=1.0,
            tooltip=(
                "How strongly to smooth, as a multiple of the noise level estimated from the "
                "image: weight = strength × noise σ. Higher = smoother and flatter; 1 is a "
                "good start, 0.8-1.4 is usually best."
            ),
        )
        self.weight_label = Label(value="")
        self.weight_label.tooltip = (
            "Noise standard deviation σ estimated from the input (in its intensity units) and "
            "the absolute TV weight the solver uses. In Poisson mode the image is "
            "variance-stabilised first, so σ = 1 there."
        )
        self.noise_model = ComboBox(label="Noise model", choices=_NOISE_MODELS, value="gaussian")
        self.noise_model.tooltip = (
            "Gaussian: noise of the same strength everywhere (e.g. electron microscopy, "
            "background-dominated images).\nPoisson: photon-counting camera noise that grows "
            "with brightness (fluorescence); the image is variance-stabilised with the camera "
            "gain, offset and read noise before smoothing."
        )
        self.gain = FloatSpinBox(
            label="Camera gain",
            min=0.0,
            max=1e6,
            step=0.1,
            value=0.0,
            tooltip=(
                "Grey values (ADU) per detected photon. 'auto' (0) = estimate gain, offset and "
                "read noise from the image. Set it to enter the camera's calibration instead."
            ),
        )
        self.offset = FloatSpinBox(
            label="Offset",
            min=0.0,
            max=1e6,
            step=1.0,
            value=0.0,
            tooltip=(
                "Camera offset (bias) in ADU: the grey value of a pixel that received no light. "
                "Used only with a known gain; with gain 'auto' it is estimated."
            ),
        )
        self.read_noise = FloatSpinBox(
            label="Read noise",
            min=0.0,
            max=1e6,
            step=0.1,
            value=0.0,
            tooltip=(
                "Standard deviation of the camera read noise in ADU. Used only with a known "
                "gain; with gain 'auto' it is estimated."
            ),
        )
        self.gain.native.setSpecialValueText("auto")  # shown at 0 = estimate from the image
        self.gain.native.setSuffix(" ADU/photon")
        self.offset.native.setSuffix(" ADU")
        self.read_noise.native.setSuffix(" ADU")
        self.spacing: list[FloatSpinBox] = []
        self.spacing_row = QWidget()
        self.spacing_row.setToolTip(_SPACING_TOOLTIP)
        QHBoxLayout(self.spacing_row).setContentsMargins(0, 0, 0, 0)

        self.method = ComboBox(label="Solver", choices=_METHODS, value="fgp")
        self.method.tooltip = (
            "FGP: fast accelerated solver with a certified stopping rule (default).\n"
            "Chambolle: scikit-image's algorithm and stopping rule, to reproduce "
            "skimage.restoration.denoise_tv_chambolle (slower)."
        )
        self.tolerance = FloatSpinBox(
            label="Tolerance",
            min=1e-6,
            max=0.5,
            step=1e-4,
            value=1e-3,
            tooltip=(
                "FGP stops once the relative duality gap (a guaranteed bound on how far the "
                "result is from the exact TV solution) is below this. Smaller = more exact but "
                "slower; 1e-3 is visually converged. Chambolle: scikit-image's 'eps'."
            ),
        )
        self.tolerance.native.setDecimals(6)
        self.max_iterations = IntSpinBox(
            label="Max iterations",
            min=1,
            max=100_000,
            value=200,
            tooltip=(
                "Upper limit on solver iterations. The status line says whether the tolerance "
                "was reached before it."
            ),
        )
        self.nonnegative = CheckBox(
            text="Non-negative result",
            value=False,
            tooltip=(
                "Forbid negative intensities in the result. On by default for Poisson noise, "
                "where photon counts cannot be negative."
            ),
        )

        for widget in (self.noise_model, self.method):
            _compact_combo(widget.native)
        _compact_combo(self.image_combo.native, characters=16)
        main_form = _Form()
        main_form.add(self.image_combo)
        main_form.add(self.strength)
        main_form.add_widget("", self.weight_label.native)
        main_form.add(self.noise_model)
        for widget in (self.gain, self.offset, self.read_noise):
            main_form.add(widget)
        main_form.add_widget("Spacing", self.spacing_row, _SPACING_TOOLTIP)
        self._main_form = main_form
        advanced_form = _Form()
        for widget in (self.method, self.tolerance, self.max_iterations):
            advanced_form.add(widget)
        advanced_form.add_widget("", self.nonnegative.native)
        self.advanced = QCollapsible("Advanced (solver)")
        self.advanced.setToolTip("Solver, stopping rule and constraints")
        self.advanced.addWidget(advanced_form)

        self.image_combo.changed.connect(self._on_input_changed)
        self.noise_model.changed.connect(self._on_noise_model_changed)
        self.gain.changed.connect(self._on_gain_changed)
        self.strength.changed.connect(self._update_weight_label)
        for widget in (
            self.image_combo,
            self.strength,
            self.noise_model,
            self.gain,
            self.offset,
            self.read_noise,
            self.method,
            self.tolerance,
            self.max_iterations,
            self.nonnegative,
        ):
            widget.changed.connect(self.request_preview)

        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(main_form)
        layout.addWidget(self.advanced)
        self._on_noise_model_changed()
        return panel

    def _image_layer_choices(self, *_: Any) -> list[tuple[str, Any]]:
        from napari.layers import Image

        return [(layer.name, layer) for layer in self.viewer.layers if isinstance(layer, Image)]

    def reset_choices(self, *_: Any) -> None:
        """Refresh the input combo from the layer list."""
        self.image_combo.reset_choices()

    def _on_input_changed(self, *_: Any) -> None:
        layer = self.input_layer()
        row = self.spacing_row.layout()
        while row.count():
            item = row.takeAt(0)
            widget = item.widget()
            if widget is not None:
                widget.hide()  # off screen now, not only when the deferred delete runs
                widget.deleteLater()
        self.spacing = []
        if layer is not None:
            weights = spacing_from_layer(layer)
            labels = _axis_names(layer)
            scale = [float(s) for s in layer.scale]
            for axis, (label, weight) in enumerate(zip(labels, weights, strict=False)):
                box = FloatSpinBox(name=f"axis_{axis}", min=0.0, max=100.0, step=0.05)
                box.native.setDecimals(4)  # e.g. 0.3333 for a 0.3 µm z-step with 0.1 µm pixels
                box.native.setButtonSymbols(QAbstractSpinBox.ButtonSymbols.NoButtons)
                # napari's style sheet gives spin boxes a 90 px minimum: 4 axes would widen the dock
                box.native.setStyleSheet("QAbstractSpinBox { min-width: 56px; }")
                box.value = weight
                tip = _axis_tooltip(label, weight, scale[axis], scale[-1])
                box.tooltip = tip
                box.changed.connect(self.request_preview)
                name = QLabel(label)
                name.setToolTip(tip)
                row.addWidget(name)
                row.addWidget(box.native, stretch=1)
                self.spacing.append(box)
        self._update_weight_label()

    def _on_noise_model_changed(self, *_: Any) -> None:
        poisson = self.noise_model.value == "poisson"
        for widget in (self.gain, self.offset, self.read_noise):
            self._main_form.set_row_visible(widget, poisson)
        self.nonnegative.value = poisson  # fluorescence counts cannot be negative
        self._on_gain_changed()
        self._update_weight_label()

    def _on_gain_changed(self, *_: Any) -> None:
        # The camera model is estimated as a whole: offset/read noise only count with a gain.
        known_gain = self.gain.value > 0
        for widget in (self.offset, self.read_noise):
            widget.enabled = known_gain
            widget.native.setSpecialValueText("" if known_gain else "auto")

    # ---------------------------------------------------------------- noise level
    def _sigma_hat(self, layer: napari.layers.Layer) -> float:
        """Estimated noise level of the layer's data (cached per layer and data array)."""
        key = (id(layer), id(layer.data))
        if key not in self._sigma_cache:
            from napari_gpuscope.compute.noise import estimate_noise_sigma

            # Reads a deterministic subsample of planes, so lazy volumes are not loaded whole.
            self._sigma_cache = {key: estimate_noise_sigma(layer.data)}
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
            check_image_layer(layer, check_values=False)  # runs on every slider move
            scale = self._noise_scale(layer)
        except (ValueError, RuntimeError) as exc:
            self.weight_label.value = f"(no valid input: {str(exc).split(';')[0]})"
            return
        strength = self.strength.value
        if self.noise_model.value == "poisson":
            self.weight_label.value = f"noise σ = 1 (stabilised) → weight {strength:.4g}"
        else:
            self.weight_label.value = f"noise σ ≈ {scale:.4g} → weight {strength * scale:.4g}"

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
        gain = optional(self.gain) if poisson else None
        known_gain = gain is not None  # without a gain the whole camera model is estimated
        return {
            "strength": strength,
            "sigma_hat": float(scale),
            "weight": strength * float(scale),
            "method": str(self.method.value),
            "spacing": spacing,
            "noise_model": noise_model,
            "gain": gain,
            "offset": float(self.offset.value) if known_gain else None,
            "read_noise": float(self.read_noise.value) if known_gain else None,
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
            self._limits[False] = (params["max_iterations"], params["tolerance"])
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
        self._limits[True] = (kwargs["max_iterations"], kwargs["tolerance"])
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
        """Converged or stopped at the iteration limit, final relative gap, weight."""
        preview = isinstance(result, TVPreviewResult)
        solver = getattr(result, "result", result)
        limit, tolerance = self._limits.get(preview, (None, None))
        iterations = getattr(solver, "iterations", "?")
        gap = float(getattr(solver, "relative_gap", float("nan")))
        weight = float(getattr(solver, "weight", float("nan")))
        if preview:
            solved_in_3d = np.ndim(result.plane) < np.ndim(getattr(solver, "image", result.plane))
            where = (
                "current plane, solved in 3D with its neighbours"
                if solved_in_3d
                else "current plane"
            )
            return (
                f"{where}, {iterations} iterations (quick preview; Run for the converged result), "
                f"relative gap {gap:.1e}, weight {weight:.4g}"
            )
        facts = f"relative gap {gap:.1e}"
        if tolerance is not None:
            facts += f" (tolerance {tolerance:.0e})"
        facts += f", weight {weight:.4g}"
        if getattr(solver, "converged", False):
            return f"Converged in {iterations} iterations: {facts}"
        return (
            f"Stopped at the iteration limit ({limit if limit is not None else iterations}) "
            f"before reaching the tolerance: {facts}. For a more exact result raise "
            "Max iterations (Advanced)"
        )
