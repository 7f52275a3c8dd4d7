"""The method registry: one :class:`MethodSpec` per method, the single list of what exists.

The console command, the headless demo, the manifest tests and (later) the batch runner are
driven by :data:`METHODS`; ``napari.yaml`` must name the same widgets and samples (a test checks
it). Entries refer to code by ``"module:attribute"`` names, so importing the registry imports
neither torch nor Qt.

Adding a method adds one entry here (see ``docs/architecture.md``, "Adding a method").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["METHODS", "PLUGIN", "MethodSpec", "SampleSpec", "load", "method"]

PLUGIN = "napari-gpuscope"
"""The distribution (and npe2 plugin) name; command ids start with ``"napari-gpuscope."``."""


def load(python_name: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute."""
    module, _, attribute = python_name.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class SampleSpec:
    """One napari sample-data contribution.

    Attributes
    ----------
    key : str
        Sample key (``viewer.open_sample("napari-gpuscope", key)``), e.g. ``"tv-2d"``.
    title : str
        Display name in File > Open Sample.
    function : str
        ``"module:function"`` returning a list of layer-data tuples.
    """

    key: str
    title: str
    function: str

    @property
    def command_id(self) -> str:
        """The manifest command id, e.g. ``"napari-gpuscope.sample_tv_2d"``."""
        return f"{PLUGIN}.sample_{self.key.replace('-', '_')}"

    def load(self) -> list[tuple[Any, dict[str, Any], str]]:
        """The sample's layer-data tuples."""
        return load(self.function)()


@dataclass(frozen=True)
class MethodSpec:
    """Everything the plugin needs to know about one method.

    Attributes
    ----------
    id : str
        Short id used in provenance and file names, e.g. ``"tv"``.
    title : str
        Human-readable name: the dock's title and the widget's display name.
    params : str
        ``"module:Class"`` of the method's :class:`~napari_gpuscope.compute.params.Params`.
    job : str
        ``"module:function"`` of the job generator ``iter_<method>(data, params=..., device=...)``.
    dock : str
        ``"module:Class"`` of the dock widget.
    samples : tuple of SampleSpec
        The method's sample data (the headless demo runs the method on each).
    demo_params : str
        ``"module:function"``: ``demo_params(sample_kwargs) -> Params`` for one sample.
    supports_stop : bool
        Whether the job returns its best result so far on ``STOP`` (the dock then offers
        "Stop & keep" beside Cancel).
    batch : str or None
        Only for two-phase methods: ``"module:attribute"`` of an object whose optional
        ``prepare(params, tiles, *, device, artifacts)`` runs once per batch run (e.g. BaSiC's
        fit on all tiles or a subsample, or a profile loaded from the recipe's artifacts) and
        whose optional ``job(data, params, *, prepared, device, cache_key)`` makes each
        position's job (e.g. phase reusing transfer functions cached per worker under
        ``cache_key``, the recipe hash). ``None``: every position runs :attr:`job` with the
        recipe's parameters. See ``docs/batch.md``.
    """

    id: str
    title: str
    params: str
    job: str
    dock: str
    samples: tuple[SampleSpec, ...]
    demo_params: str
    supports_stop: bool = False
    batch: str | None = None

    @property
    def command_id(self) -> str:
        """The manifest command id of the dock, e.g. ``"napari-gpuscope.tv_dock"``."""
        return f"{PLUGIN}.{self.id}_dock"

    def params_class(self) -> type:
        """The parameter model class (imports the compute layer)."""
        return load(self.params)

    def job_function(self) -> Callable[..., Any]:
        """The job generator function (imports the compute layer)."""
        return load(self.job)

    def dock_class(self) -> type:
        """The dock widget class (imports Qt and napari)."""
        return load(self.dock)

    def params_for_sample(self, sample_kwargs: Mapping[str, Any]) -> Any:
        """The demo parameters for a sample with these layer kwargs."""
        return load(self.demo_params)(sample_kwargs)


METHODS: dict[str, MethodSpec] = {
    spec.id: spec
    for spec in (
        MethodSpec(
            id="tv",
            title="TV denoise",
            params="napari_gpuscope.compute.tv:TVParams",
            job="napari_gpuscope.compute.tv:iter_denoise",
            dock="napari_gpuscope.widgets.tv_dock:TVDenoiseDock",
            samples=(
                SampleSpec(
                    "tv-2d",
                    "Noisy fluorescence image (2D)",
                    "napari_gpuscope.sample_data.tv:noisy_cells_2d",
                ),
                SampleSpec(
                    "tv-3d",
                    "Noisy fluorescence volume (3D)",
                    "napari_gpuscope.sample_data.tv:noisy_cells_3d",
                ),
            ),
            demo_params="napari_gpuscope.sample_data.tv:demo_params",
            supports_stop=True,
        ),
        MethodSpec(
            id="esrrf",
            title="eSRRF",
            params="napari_gpuscope.compute.esrrf:EsrrfParams",
            job="napari_gpuscope.compute.esrrf:iter_esrrf",
            dock="napari_gpuscope.widgets.esrrf_dock:EsrrfDock",
            samples=(
                SampleSpec(
                    "esrrf-filaments",
                    "Blinking emitters on filaments (eSRRF)",
                    "napari_gpuscope.sample_data.esrrf:blinking_filaments",
                ),
            ),
            demo_params="napari_gpuscope.sample_data.esrrf:demo_params",
            supports_stop=True,
        ),
        MethodSpec(
            id="flatfield",
            title="Flat-field (BaSiC)",
            params="napari_gpuscope.compute.flatfield:BasicParams",
            job="napari_gpuscope.compute.flatfield:iter_fit_basic",
            dock="napari_gpuscope.widgets.flatfield_dock:FlatfieldDock",
            samples=(
                SampleSpec(
                    "flatfield-tiles",
                    "Vignetted tiles (flat-field)",
                    "napari_gpuscope.sample_data.flatfield:vignetted_tiles",
                ),
                SampleSpec(
                    "flatfield-tiles-offset",
                    "Vignetted tiles with camera offset (flat-field)",
                    "napari_gpuscope.sample_data.flatfield:vignetted_tiles_with_offset",
                ),
            ),
            demo_params="napari_gpuscope.sample_data.flatfield:demo_params",
            supports_stop=True,
            batch="napari_gpuscope.compute.flatfield:batch_hooks",
        ),
        MethodSpec(
            id="phase",
            title="Phase (tilt-corrected)",
            params="napari_gpuscope.compute.phase:PhaseParams",
            job="napari_gpuscope.compute.phase:iter_reconstruct",
            dock="napari_gpuscope.widgets.phase_dock:PhaseDock",
            samples=(
                SampleSpec(
                    "phase-tilt",
                    "Brightfield z-stack, tilted illumination (phase)",
                    "napari_gpuscope.sample_data.phase:tilted_brightfield_stack",
                ),
                SampleSpec(
                    "phase-meniscus",
                    "Brightfield z-stack, tilt gradient of a meniscus (phase)",
                    "napari_gpuscope.sample_data.phase:meniscus_brightfield_stack",
                ),
            ),
            demo_params="napari_gpuscope.sample_data.phase:demo_params",
            supports_stop=True,
            batch="napari_gpuscope.compute.phase:batch_hooks",
        ),
    )
}
"""Every method, by id, in menu order."""


def method(method_id: str) -> MethodSpec:
    """The spec of ``method_id``; a clear error lists the known ids."""
    try:
        return METHODS[method_id]
    except KeyError:
        raise KeyError(f"unknown method {method_id!r}; known: {sorted(METHODS)}") from None
