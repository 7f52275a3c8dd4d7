"""The registry's types: a method (:class:`MethodSpec`), its jobs (:class:`JobSpec`) and its
sample data (:class:`SampleSpec`).

A spec names code by ``"module:attribute"`` (:func:`load` imports it when asked), so the
registry imports neither torch nor Qt. The entries themselves, and the functions that add one at
run time, are :mod:`napari_gpuscope.methods`, which also exports these names.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LAYERS_MENU", "PLUGIN", "JobSpec", "MethodSpec", "SampleSpec", "load"]

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
    >>> from napari_gpuscope.methods import method
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
    >>> from napari_gpuscope.methods import method
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
        >>> from napari_gpuscope.methods import method
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
        >>> from napari_gpuscope.methods import method
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
