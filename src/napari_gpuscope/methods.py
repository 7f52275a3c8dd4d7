"""The method registry: one :class:`MethodSpec` per method, the single list of what exists.

Everything that lists methods reads :data:`METHODS` when it runs: the console command, the
headless demo, recipes and their JSON Schema, batch runs and the docks. What cannot read it at
run time is generated from it by :mod:`napari_gpuscope.generate`: the per-method entries of
``napari.yaml`` (commands, widgets, sample data, the dock's Layers menu), the README's tables,
the user guide's list of methods, ``docs/recipe.schema.json`` and the import-linter contracts'
lists of method packages in ``pyproject.toml`` (``python -m napari_gpuscope.generate``; a test
fails when they are stale). The tests that list methods read the registry too. Entries refer to
code by ``"module:attribute"`` names, so importing the registry imports neither torch nor Qt.

Adding a method adds one entry here (see ``docs/architecture.md``, "Adding a method");
:func:`register` / :func:`registered` add one at run time (tests, scripts). The entries' types
are defined in :mod:`napari_gpuscope.method_specs` and exported from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .method_specs import LAYERS_MENU, PLUGIN, JobSpec, MethodSpec, SampleSpec, load

__all__ = [
    "LAYERS_MENU",
    "METHODS",
    "PLUGIN",
    "JobSpec",
    "MethodSpec",
    "SampleSpec",
    "load",
    "method",
    "register",
    "registered",
    "unregister",
]


METHODS: dict[str, MethodSpec] = {
    spec.id: spec
    for spec in (
        MethodSpec(
            id="tv",
            title="TV denoise",
            jobs=(
                JobSpec(
                    "denoise",
                    "Denoise",
                    "napari_gpuscope.compute.tv:TVParams",
                    "napari_gpuscope.compute.tv:iter_denoise",
                    output_kinds=("TV denoised",),
                    description="Denoise an image, z-stack or time-lapse.",
                ),
            ),
            dock="napari_gpuscope.widgets.tv.dock:TVDenoiseDock",
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
            description=(
                "Total-variation denoising of 2D images, z-stacks and time-lapses: converged "
                "(duality-gap) solver, voxel-size aware, Gaussian or Poisson (camera) noise "
                "model, live preview."
            ),
            guide_title="TV denoising",
        ),
        MethodSpec(
            id="esrrf",
            title="eSRRF",
            jobs=(
                JobSpec(
                    "run",
                    "Run",
                    "napari_gpuscope.compute.esrrf:EsrrfParams",
                    "napari_gpuscope.compute.esrrf:iter_esrrf",
                    output_kinds=("eSRRF", "widefield mean"),
                    # A trace loaded in the dock travels with its recipes (a drift-trace CSV).
                    batch="napari_gpuscope.compute.esrrf._batch:batch_hooks",
                    accepts=("drift_trace",),
                    description="Reconstruct a super-resolved image per time point.",
                ),
                JobSpec(
                    "sweep",
                    "Parameter sweep",
                    "napari_gpuscope.compute.esrrf:SweepParams",
                    "napari_gpuscope.compute.esrrf:iter_sweep",
                    output_kinds=("QnR sweep", "RSP sweep", "FRC resolution sweep"),
                    description=(
                        "FRC and decorrelation resolution, RSP and QnR of every radius x "
                        "sensitivity."
                    ),
                ),
                JobSpec(
                    "drift",
                    "Estimate drift",
                    "napari_gpuscope.compute.esrrf:DriftParams",
                    "napari_gpuscope.compute.esrrf:iter_estimate_drift",
                    description=(
                        "Estimate the sample's drift (a trace per frame) and the drift-corrected "
                        "mean."
                    ),
                ),
            ),
            dock="napari_gpuscope.widgets.esrrf.dock:EsrrfDock",
            samples=(
                SampleSpec(
                    "esrrf-filaments",
                    "Blinking emitters on filaments (eSRRF)",
                    "napari_gpuscope.sample_data.esrrf:blinking_filaments",
                ),
            ),
            demo_params="napari_gpuscope.sample_data.esrrf:demo_params",
            supports_stop=True,
            description=(
                "Super-resolution from blinking-fluorophore stacks: NanoPyx-exact (or "
                "pixel-centred) results, frames streamed with memory independent of their "
                "number, the image building up live, drift correction and channel "
                "registration, a radius x sensitivity QnR sweep and the decorrelation "
                "resolution."
            ),
            guide_title="eSRRF super-resolution",
        ),
        MethodSpec(
            id="flatfield",
            title="Flat-field (BaSiC)",
            jobs=(
                JobSpec(
                    "fit",
                    "Fit profile",
                    "napari_gpuscope.compute.flatfield:BasicParams",
                    "napari_gpuscope.compute.flatfield:iter_fit_basic",
                    output_kinds=("flatfield", "darkfield"),
                    batch="napari_gpuscope.compute.flatfield:batch_hooks",
                    accepts=("dark_frame", "fitting_weight"),
                    description=(
                        "Fit a shading profile (batch: on all positions together, or take the "
                        "recipe's profile) and correct every position with it."
                    ),
                ),
                JobSpec(
                    "apply",
                    "Apply profile",
                    "napari_gpuscope.compute.flatfield:BasicParams",
                    "napari_gpuscope.compute.flatfield:iter_apply_profile",
                    output_kinds=("flat-field corrected",),
                    batch="napari_gpuscope.compute.flatfield:apply_hooks",
                    needs=("profile",),
                    description="Correct images with a saved profile.",
                ),
            ),
            dock="napari_gpuscope.widgets.flatfield.dock:FlatfieldDock",
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
            description=(
                "Shading (vignetting), darkfield and time-lapse baseline correction of tiles and "
                "movies: BaSiCPy 2.0's fit without its bugs, converged by default, measured dark "
                "frame or camera offset, autotune, saved profiles applied to new data."
            ),
            guide_title="Flat-field correction (BaSiC)",
        ),
        MethodSpec(
            id="phase",
            title="Phase (tilt-corrected)",
            jobs=(
                JobSpec(
                    "reconstruct",
                    "Reconstruct",
                    "napari_gpuscope.compute.phase:PhaseParams",
                    "napari_gpuscope.compute.phase:iter_reconstruct",
                    output_kinds=("phase", "absorption", "tilt"),
                    batch="napari_gpuscope.compute.phase:batch_hooks",
                    description="Phase and absorption from a brightfield z-stack.",
                ),
                JobSpec(
                    "estimate_tilt",
                    "Estimate tilt",
                    "napari_gpuscope.compute.phase:PhaseParams",
                    "napari_gpuscope.compute.phase:iter_estimate_tilt",
                    output_kinds=("tilt zenith", "tilt azimuth", "tilt"),
                    description="The illumination tilt, global or per tile, as maps and vectors.",
                ),
            ),
            dock="napari_gpuscope.widgets.phase.dock:PhaseDock",
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
            description=(
                "Quantitative phase (radians) and absorption from a brightfield z-stack "
                "(waveorder's thin-sample model): closed-form inverse with an automatic "
                "regularization (or set by hand, with a live preview), illumination tilt set by "
                "hand or estimated globally or per tile until it converges (tilt map as "
                "vectors, loss plotted live)."
            ),
            guide_title="Tilt-corrected phase",
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


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method to the registry at run time.

    Everything that reads the registry picks it up from then on: the CLI (``napari-gpuscope
    recipe``'s method choices, the headless demo), recipes and their JSON Schema, batch runs and
    :mod:`napari_gpuscope.generate`. napari's own menus come from ``napari.yaml``, which holds
    the methods registered when it was generated. Tests and scripts use it; the plugin's own
    methods are the entries of :data:`METHODS`.

    Parameters
    ----------
    spec : MethodSpec
        The method; its id, dock command id and sample keys must be new.

    Returns
    -------
    MethodSpec
        ``spec``, registered.

    Raises
    ------
    ValueError
        The id or a sample key is taken.

    Examples
    --------
    >>> spec = MethodSpec(
    ...     id="demo_copy",
    ...     title="Copy",
    ...     params="mypkg.copy:CopyParams",
    ...     job="mypkg.copy:iter_copy",
    ...     dock="mypkg.copy_dock:CopyDock",
    ...     samples=(),
    ...     demo_params="mypkg.copy:demo_params",
    ... )
    >>> register(spec) is METHODS["demo_copy"]
    True
    >>> unregister("demo_copy") is spec
    True
    """
    if spec.id in METHODS:
        raise ValueError(f"method {spec.id!r} is registered already")
    taken = {sample.key for other in METHODS.values() for sample in other.samples}
    keys = [sample.key for sample in spec.samples]
    clashes = sorted({key for key in keys if key in taken or keys.count(key) > 1})
    if clashes:
        raise ValueError(f"method {spec.id!r}: sample key(s) {clashes} are taken")
    METHODS[spec.id] = spec
    return spec


def unregister(method_id: str) -> MethodSpec:
    """Remove a method :func:`register` added; returns its spec."""
    spec = method(method_id)
    del METHODS[method_id]
    return spec


@contextmanager
def registered(spec: MethodSpec) -> Iterator[MethodSpec]:
    """Register ``spec`` for the duration of a ``with`` block (tests).

    Examples
    --------
    >>> spec = MethodSpec(
    ...     id="demo_copy",
    ...     title="Copy",
    ...     params="mypkg.copy:CopyParams",
    ...     job="mypkg.copy:iter_copy",
    ...     dock="mypkg.copy_dock:CopyDock",
    ...     samples=(),
    ...     demo_params="mypkg.copy:demo_params",
    ... )
    >>> with registered(spec):
    ...     "demo_copy" in METHODS
    True
    >>> "demo_copy" in METHODS
    False
    """
    register(spec)
    try:
        yield spec
    finally:
        METHODS.pop(spec.id, None)
