"""What a dock's parts may ask of their dock: the small contexts they are given instead of the
dock itself (as napari's layer controls get their layer, not the layer list).

- :class:`DockContext` -- what a method's parts (recipe row, eSRRF sweep panel, flat-field apply
  panel) may ask: the input, the parameters, the status line and the one runner;
- :class:`MethodView` -- what the base parts of every dock's view (its job view, status view)
  may ask: the hooks a method dock overrides and the members they act through.

:class:`~napari_gpuscope.widgets.MethodDock` implements both with public methods; a part imports
this module, never the dock's, so the parts and the docks form no import circle. Qt-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    import napari.layers
    import napari.viewer
    from numpy.typing import ArrayLike

    from napari_gpuscope.compute.jobs import Job
    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.compute.preview import PlaneView, PreviewResult
    from napari_gpuscope.compute.results import MethodResult
    from napari_gpuscope.dock.jobs import JobHandlers
    from napari_gpuscope.methods import MethodSpec

__all__ = ["CsvArtifact", "DockContext", "MethodView"]


class CsvArtifact(Protocol):
    """A job input written as a CSV beside a recipe (a drift trace:
    :class:`~napari_gpuscope.compute.esrrf.DriftResult`)."""

    def to_csv(self, path: Path) -> Path: ...


class DockContext(Protocol):
    """The dock as its parts see it."""

    method_id: str
    title: str
    viewer: napari.viewer.Viewer
    spec: MethodSpec
    """The method's registry entry: a part runs its job as ``spec.job_spec(id)`` declares it."""

    @property
    def device(self) -> str | None:
        """The selected device (None: no usable one)."""
        ...

    @property
    def input_layer(self) -> napari.layers.Image | None:
        """The dock's input layer."""
        ...

    def params(self) -> Params:
        """The parameters the dock's controls describe (raises ValueError when invalid)."""
        ...

    def set_param(self, name: str, value: object) -> None:
        """Show ``value`` in the control of parameter ``name``."""
        ...

    def set_params(self, params: Params) -> None:
        """Show every parameter the dock has a control for from ``params``."""
        ...

    def set_status(self, text: str) -> None:
        """Write the dock's status line."""
        ...

    def recipe_notes(self) -> list[str]:
        """What a recipe saved now cannot carry of the dock's next run (empty: nothing)."""
        ...

    def recipe_artifacts(self) -> dict[str, tuple[ArrayLike | CsvArtifact, str]]:
        """The job's inputs beyond the data: ``{name: (image or CSV artifact, source)}``."""
        ...

    def follows(self, layer: napari.layers.Layer) -> bool:
        """Whether selecting ``layer`` should make it an input (not a result of this dock)."""
        ...

    def validate_input(
        self, layer: napari.layers.Layer | None, *, check_values: bool = True
    ) -> None:
        """Raise ValueError when ``layer`` is no valid input for the method."""
        ...

    def start_job(
        self,
        kind: str,
        job: Job[object],
        *,
        title: str,
        description: str,
        handlers: JobHandlers,
        layer: napari.layers.Layer | None = None,
        params: Params | None = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> None:
        """Run one of the method's other jobs on the dock's one runner (raises
        :class:`~napari_gpuscope.dock.jobs.JobRefused` when another job holds the
        device; the dock's status says so too)."""
        ...

    def is_running(self) -> bool:
        """Whether the dock runs a job (of any kind)."""
        ...

    def stop(self) -> bool:
        """Ask the running job to finish now, keeping its result so far."""
        ...

    def cancel(self) -> None:
        """Cancel the running job."""
        ...


class MethodView(Protocol):
    """The method's side of a dock, as its parts see it."""

    title: str
    method_id: str
    viewer: napari.viewer.Viewer
    short_title: str
    streamed_outputs: tuple[str, ...] | None
    layer_fields: tuple[str, ...]
    output_display: Mapping[str, Mapping[str, object]]
    step_label: str

    @property
    def device(self) -> str | None: ...

    @property
    def input_layer(self) -> napari.layers.Image | None: ...

    @property
    def supports_preview(self) -> bool: ...

    def params(self) -> Params: ...

    def build_params(self) -> Params: ...

    def cancel(self) -> None: ...

    def kernel_packages(self) -> tuple[str, ...] | None: ...

    def validate_input(
        self, layer: napari.layers.Layer | None, *, check_values: bool = True
    ) -> None: ...

    def make_job(
        self, layer: napari.layers.Image, params: Params, device: str
    ) -> Job[MethodResult]: ...

    def make_preview_job(
        self, layer: napari.layers.Image, params: Params, device: str, view: PlaneView
    ) -> Job[PreviewResult]: ...

    def on_result(
        self, result: MethodResult | PreviewResult, *, preview: bool, layer: napari.layers.Image
    ) -> None: ...

    def metric_targets(self, params: Params) -> dict[str, float]: ...

    def output_geometry(
        self,
        geometry: dict[str, object],
        ndim: int,
        *,
        preview: bool,
        params: Params,
        layer: napari.layers.Image,
    ) -> dict[str, object]: ...
