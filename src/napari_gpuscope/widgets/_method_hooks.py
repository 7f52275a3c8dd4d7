"""What a method dock says about its method: the class attributes and the hooks a subclass of
:class:`~napari_gpuscope.widgets.MethodDock` overrides, with their defaults (see
:mod:`napari_gpuscope.widgets._base` for how to add a method).

:class:`MethodHooks` is a base of ``MethodDock``; the hooks read the dock's form
(``self.form``), registry entry (``self.spec``) and params model (``self.params_class``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from napari_gpuscope.methods import MethodSpec, method
from napari_gpuscope.widgets._controls import FieldStyle
from napari_gpuscope.widgets._layers import check_image_layer

if TYPE_CHECKING:
    import napari.layers
    from qtpy.QtWidgets import QWidget

    from napari_gpuscope.compute.jobs import Job
    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.compute.preview import PlaneView, PreviewResult
    from napari_gpuscope.compute.results import MethodResult

__all__ = ["MethodHooks"]


class MethodHooks:
    """The method's side of a dock: class attributes and overridable hooks."""

    method_id: ClassVar[str] = ""
    """Registry key of the method (:data:`napari_gpuscope.methods.METHODS`)."""
    short_title: ClassVar[str] = ""
    """Tag of preview and streaming layer names, e.g. ``"TV"`` (default: the method's title)."""
    streamed_outputs: ClassVar[tuple[str, ...] | None] = None
    """Outputs streamed into layers, in the order of the result's layers (None: all)."""
    hidden_fields: ClassVar[tuple[str, ...]] = ()
    """Parameters the dock does not show (they keep their defaults)."""
    dock_defaults: ClassVar[Mapping[str, Any]] = {}
    """Where the dock starts (and Reset returns) other than the model's defaults, which the API
    and recipes keep: e.g. phase estimates a global tilt, since the manual 0 is rarely right."""
    layer_fields: ClassVar[tuple[str, ...]] = ()
    """Parameters filled in from the input layer (pixel size, optics): not "changed from the
    defaults" when they differ."""
    field_styles: ClassVar[Mapping[str, FieldStyle]] = {}
    """How some generated fields are shown."""
    input_dims: ClassVar[tuple[int, int]] = (2, 4)
    """Accepted input dimensionality."""
    step_label: ClassVar[str] = "iteration"
    """What ``Progress.step`` counts (x axis of the metrics plot)."""
    output_display: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """Layer keywords of streamed outputs by name; one with a colormap is not linked to the
    input's display (e.g. a flatfield, a ratio near 1, next to tiles in ADU)."""
    preview_debounce_ms: ClassVar[int] = 200
    """Quiet time after the last parameter change before a live preview starts."""
    dock_width: ClassVar[int] = 340
    """Width the dock opens with (px): enough for every control of the method's form, which is
    clipped, not wrapped, below its minimum (check the whole-window screenshots)."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The dock's default value of every parameter (:attr:`dock_defaults` over the model's)."""
        model = {info.name: info.default for info in cls.method_spec().params_class().param_info()}
        return {**model, **cls.dock_defaults}

    @classmethod
    def method_spec(cls) -> MethodSpec:
        """The method's registry entry (title, params model, job function, stop support)."""
        return method(cls.method_id)

    def custom_fields(self) -> dict[str, QWidget]:
        """Controls standing for fields the form cannot generate (default: none)."""
        return {}

    def build_controls(self) -> None:
        """Add the method's own rows and wiring to ``self.form`` (default: nothing)."""

    def build_params(self) -> Params:
        """The parameters the controls describe (raises ParameterError for invalid ones); the
        dock's :meth:`params` hands them to its controller."""
        return self.params_class(**self.form.values())

    def validate_input(
        self, layer: napari.layers.Layer | None, *, check_values: bool = True
    ) -> None:
        """Raise ValueError naming the layer and what is valid (default: an image layer)."""
        low, high = self.input_dims
        check_image_layer(layer, min_ndim=low, max_ndim=high, check_values=check_values)

    def make_job(
        self, layer: napari.layers.Image, params: Params, device: str
    ) -> Job[MethodResult]:
        """The full run (default: the registry's job function on the layer's data)."""
        return self.spec.job_function()(layer.data, params=params, device=device)

    def make_preview_job(
        self, layer: napari.layers.Image, params: Params, device: str, view: PlaneView
    ) -> Job[PreviewResult]:
        """A quick job on the displayed plane; not overriding it means no live preview."""
        raise NotImplementedError

    def on_input_changed(self, layer: napari.layers.Image | None) -> None:
        """React to a new input layer (default: nothing)."""

    def on_result(
        self, result: MethodResult | PreviewResult, *, preview: bool, layer: napari.layers.Image
    ) -> None:
        """React to a finished job's result on input ``layer`` (default: nothing); a preview's
        result is its :class:`PreviewResult`."""

    def recipe_notes(self) -> list[str]:
        """What a recipe saved now cannot carry of the dock's next run, in words (default:
        nothing: the dock runs the registry's job with its parameters, as the recipe does);
        the Recipe row says it when it saves one."""
        return []

    def recipe_artifacts(self) -> dict[str, tuple[Any, str]]:
        """The job's inputs beyond the data that the dock's next run uses, by their recipe
        artifact names (``JobSpec.accepts``): ``{name: (array, layer name)}``. The Recipe row
        writes each as a TIFF beside the recipe, so a recipe reproduces the run (default:
        none)."""
        return {}

    def metric_targets(self, params: Params) -> dict[str, float]:
        """Values the plotted metrics aim for (dashed lines), e.g. a tolerance."""
        return {}

    def output_geometry(
        self,
        geometry: dict[str, Any],
        ndim: int,
        *,
        preview: bool,
        params: Params,
        layer: napari.layers.Image,
    ) -> dict[str, Any]:
        """Layer geometry kwargs of a streamed (or preview) output with ``ndim`` axes, given
        those it takes from the input, for the job on ``layer`` with ``params`` (default:
        unchanged)."""
        return geometry

    @property
    def supports_preview(self) -> bool:
        """Whether the subclass implements :meth:`make_preview_job`."""
        return type(self).make_preview_job is not MethodHooks.make_preview_job
