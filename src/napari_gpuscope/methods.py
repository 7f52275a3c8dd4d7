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
:func:`register` / :func:`registered` add one at run time (tests, scripts).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

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

PLUGIN = "napari-gpuscope"
"""The distribution (and npe2 plugin) name; command ids start with ``"napari-gpuscope."``."""

LAYERS_MENU = "napari/layers"
"""napari's Layers menu; a dock is placed in one of its submenus (``MethodSpec.menu``)."""

_COMPUTE = "napari_gpuscope.compute"
"""The house's compute layer: one package per method inside it."""

# A method id becomes part of command ids ("napari-gpuscope.<id>_dock"), file names and
# provenance: lower-case letters, digits and underscores only.
_METHOD_ID = re.compile(r"[a-z][a-z0-9_]*")


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
class JobSpec:
    """One job of a method: its parameter model, its generator and how batch runs it.

    Every job runs the same way from the dock, the console command and batch:
    ``function(data, params=..., device=...)`` returns a job generator (yields
    :class:`~napari_gpuscope.compute.jobs.Progress`, returns a result with ``summary()``,
    ``describe()`` and ``layers()``), unless :attr:`needs` names more inputs; then a dock passes
    them and batch takes them from the :attr:`batch` hooks.

    Attributes
    ----------
    id : str
        The job's id within its method, e.g. ``"fit"``; recipes name it (``job: apply``).
    title : str
        What the dock's button and the CLI call it, e.g. ``"Apply profile"``.
    params : str
        ``"module:Class"`` of the job's parameter model.
    function : str
        ``"module:function"`` of the job generator.
    batch : str or None
        ``"module:attribute"`` of the job's batch hooks: an object whose optional
        ``prepare(params, tiles, *, device, artifacts)`` runs once per batch run (e.g. BaSiC's
        fit on all tiles, or a saved profile loaded from the recipe's artifacts) and whose
        optional ``job(data, params, *, prepared, device, cache_key)`` makes each position's job
        (e.g. phase reusing transfer functions cached per worker under ``cache_key``, the
        recipe hash). ``None``: every position runs :attr:`function` with the recipe's
        parameters. See ``docs/batch.md``.
    needs : tuple of str
        Inputs beyond the data, by their recipe artifact names (e.g. ``("profile",)``).
    accepts : tuple of str
        Optional inputs beyond the data, by their recipe artifact names (e.g. flat-field's
        fit: ``("dark_frame", "fitting_weight")``, eSRRF's run: ``("drift_trace",)``): a dock
        passes them to :attr:`function` when it has them (its ``recipe_artifacts()`` writes them
        beside a recipe saved from it), batch takes them from the :attr:`batch` hooks.
    description : str
        One sentence: what the job does (CLI help, docs).
    output_kinds : tuple of str
        What its result's layers show, in order: the kind each layer's name starts with
        (``"<kind> · <input> [<settings>]"``, :func:`~napari_gpuscope.compute.results.result_name`),
        e.g. ``("flatfield", "darkfield")``; later layers may follow.
        ``tests/compute/test_layer_names.py`` runs every registered job and checks its layers
        against it.

    Examples
    --------
    >>> apply = method("flatfield").job_spec("apply")
    >>> apply.title, apply.needs
    ('Apply profile', ('profile',))
    """

    id: str
    title: str
    params: str
    function: str
    batch: str | None = None
    needs: tuple[str, ...] = ()
    accepts: tuple[str, ...] = ()
    description: str = ""
    output_kinds: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _METHOD_ID.fullmatch(self.id):
            raise ValueError(f"job id {self.id!r}: use lower-case letters, digits and underscores")

    def params_class(self) -> type:
        """The job's parameter model class (imports the compute layer)."""
        return load(self.params)

    def job_function(self) -> Callable[..., Any]:
        """The job generator function (imports the compute layer)."""
        return load(self.function)


@dataclass(frozen=True)
class MethodSpec:
    """Everything the plugin needs to know about one method.

    Attributes
    ----------
    id : str
        Short id used in provenance and file names, e.g. ``"tv"``.
    title : str
        Human-readable name: the dock's title and the widget's display name.
    dock : str
        ``"module:Class"`` of the dock widget.
    samples : tuple of SampleSpec
        The method's sample data (the headless demo runs the method on each).
    demo_params : str
        ``"module:function"``: ``demo_params(sample_kwargs) -> Params`` for one sample.
    supports_stop : bool
        Whether the job returns its best result so far on ``STOP`` (the dock then offers
        "Stop & keep" beside Cancel).
    jobs : tuple of JobSpec
        The method's jobs, its main job first (the dock's Run, a recipe without ``job``).
    params, job, batch : str
        Shorthand for a method of one job: its :attr:`JobSpec.params`,
        :attr:`JobSpec.function` and :attr:`JobSpec.batch` (the job is then called ``"run"``).
        With :attr:`jobs` given they are filled from its first job.
    menu : str
        The submenu of napari's Layers menu that also opens the dock (beside Plugins), one that
        napari opens to plugins: ``"napari/layers/filter"`` (the default), ``".../segment"``...
    description : str
        One sentence or two for the README's table of tools: what the method is for.
    guide : str
        The method's guide, relative to ``docs/`` (default ``"<id>.md"``).
    guide_title : str
        The guide's title in the user guide's list of methods (default: :attr:`title`).

    Examples
    --------
    >>> spec = method("tv")
    >>> spec.command_id, spec.menu, spec.guide
    ('napari-gpuscope.tv_dock', 'napari/layers/filter', 'tv.md')
    >>> spec.menu_paths[1]
    ('Layers', 'Filter', 'TV denoise (napari-gpuscope)')
    """

    id: str
    title: str
    dock: str
    samples: tuple[SampleSpec, ...]
    demo_params: str
    jobs: tuple[JobSpec, ...] = ()
    params: str = ""
    job: str = ""
    batch: str | None = None
    supports_stop: bool = False
    menu: str = f"{LAYERS_MENU}/filter"
    description: str = ""
    guide: str = ""
    guide_title: str = ""

    def __post_init__(self) -> None:
        if not _METHOD_ID.fullmatch(self.id):
            raise ValueError(
                f"method id {self.id!r}: use lower-case letters, digits and underscores "
                "(it becomes part of command ids and file names)"
            )
        submenu = self.menu.removeprefix(f"{LAYERS_MENU}/")
        if submenu == self.menu or not submenu or "/" in submenu:
            raise ValueError(
                f"method {self.id!r}: menu {self.menu!r} is not a submenu of napari's Layers "
                f"menu ({LAYERS_MENU!r}/..., e.g. {LAYERS_MENU}/filter)"
            )
        self._fill_jobs()
        # Defaults that derive from other fields (the dataclass is frozen).
        if not self.guide:
            object.__setattr__(self, "guide", f"{self.id}.md")
        if not self.guide_title:
            object.__setattr__(self, "guide_title", self.title)

    def _fill_jobs(self) -> None:
        """``jobs`` from the one-job shorthand, or the shorthand from ``jobs[0]``."""
        if not self.jobs:
            if not (self.params and self.job):
                raise ValueError(f"method {self.id!r}: give its jobs (or params= and job=)")
            main = JobSpec("run", self.title, self.params, self.job, batch=self.batch)
            object.__setattr__(self, "jobs", (main,))
            return
        main = self.jobs[0]
        given = {"params": main.params, "job": main.function, "batch": main.batch}
        for name, value in given.items():
            if getattr(self, name) and getattr(self, name) != value:
                raise ValueError(
                    f"method {self.id!r}: {name}={getattr(self, name)!r} differs from its first "
                    f"job's ({value!r}); give one or the other"
                )
            object.__setattr__(self, name, value)
        ids = [job.id for job in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"method {self.id!r}: job ids {ids} repeat")

    @property
    def compute_package(self) -> str:
        """The method's package of array code: the module its jobs' names share.

        The longest dotted prefix common to the modules of every job's ``params``,
        ``function`` and ``batch``; under ``napari_gpuscope.compute`` the method's package
        there. It is what the import-linter contracts generated into ``pyproject.toml`` hold
        independent of the other methods' packages.

        Examples
        --------
        >>> method("flatfield").compute_package
        'napari_gpuscope.compute.flatfield'
        """
        names = [
            name.partition(":")[0].split(".")
            for job in self.jobs
            for name in (job.params, job.function, job.batch)
            if name
        ]
        common: list[str] = []
        for parts in zip(*names, strict=False):
            if len(set(parts)) > 1:
                break
            common.append(parts[0])
        if not common:
            raise ValueError(f"method {self.id!r}: its jobs share no package")
        house = _COMPUTE.split(".")
        if common[: len(house)] == house and len(common) > len(house):
            common = common[: len(house) + 1]
        return ".".join(common)

    @property
    def job_ids(self) -> tuple[str, ...]:
        """The jobs' ids, main job first."""
        return tuple(job.id for job in self.jobs)

    def job_spec(self, job_id: str | None = None) -> JobSpec:
        """The job ``job_id`` (``None``: the main job); a clear error lists the method's jobs.

        Examples
        --------
        >>> method("esrrf").job_spec().id, method("esrrf").job_ids
        ('run', ('run', 'sweep', 'drift'))
        """
        if job_id is None:
            return self.jobs[0]
        for job in self.jobs:
            if job.id == job_id:
                return job
        raise KeyError(f"method {self.id!r} has no job {job_id!r}; its jobs: {list(self.job_ids)}")

    @property
    def command_id(self) -> str:
        """The manifest command id of the dock, e.g. ``"napari-gpuscope.tv_dock"``."""
        return f"{PLUGIN}.{self.id}_dock"

    @property
    def menu_title(self) -> str:
        """The dock's entry in napari's menus, e.g. ``"TV denoise (napari-gpuscope)"``.

        napari titles a plugin widget "<display name> (<plugin display name>)" in its menus
        and names docks opened from them, or by ``add_plugin_dock_widget``, the same way.
        """
        return f"{self.title} ({PLUGIN})"

    @property
    def menu_paths(self) -> tuple[tuple[str, ...], ...]:
        """Where napari lists the dock, each as the titles from the menu bar down.

        ``("Plugins", PLUGIN, entry)`` (napari groups a plugin's widgets in a submenu when it
        has several) and the Layers submenu of :attr:`menu`, e.g. ``("Layers", "Filter",
        entry)``: what the README's menu table shows and the menu tests click.
        """
        submenu = self.menu.rsplit("/", 1)[1]
        # napari's Layers submenus are titled after their id: "layer_type" -> "Layer Type".
        return (
            ("Plugins", PLUGIN, self.menu_title),
            ("Layers", submenu.replace("_", " ").title(), self.menu_title),
        )

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
                "(waveorder's thin-sample model): closed-form inverse, illumination tilt set by "
                "hand or estimated globally or per tile (tilt map as vectors, loss plotted "
                "live), live regularization preview."
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
