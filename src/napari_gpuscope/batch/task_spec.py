"""What every task of one batch run shares (:class:`TaskSpec`, sent with each task) and what
it resolves to on a worker (:class:`ResolvedRecipe`).

What a position needs from the registry and the recipe (the validated recipe, its parameter
model, its job and hooks) is resolved once per worker process and run
(:meth:`TaskSpec.resolve`), and the recipe hash is the driver's (:attr:`TaskSpec.recipe_hash`):
a position looks nothing up and hashes nothing (a test counts both).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from napari_gpuscope.batch.recipes import Recipe

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import ArrayLike, JSONDict
    from napari_gpuscope.compute.jobs import Job
    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.compute.results import MethodResult

__all__ = ["ResolvedRecipe", "TaskSpec"]


@dataclass(frozen=True)
class TaskSpec:
    """What every task of one run shares (small: sent with each task).

    Attributes
    ----------
    recipe : dict
        The recipe as plain data (``Recipe.model_dump(mode="json")``).
    recipe_hash : str
        ``Recipe.hash()`` of ``recipe``, computed once by the driver: workers key their caches
        and the provenance with it and never hash the recipe again.
    out : str
        The output store.
    device : str
        ``"cpu"``, ``"cuda"`` (the worker's first visible GPU: the one it is pinned to) or
        ``"cuda:N"``.
    cpu_threads : int or None
        torch threads per CPU worker (None: leave torch's default).
    artifacts : dict
        The recipe's artifacts: name -> absolute path (checked against their SHA-256 by the
        driver before the run).
    """

    recipe: JSONDict
    recipe_hash: str
    out: str
    device: str = "cpu"
    cpu_threads: int | None = 1
    artifacts: dict[str, str] = field(default_factory=dict)

    def load_recipe(self) -> Recipe:
        """The validated recipe, parsed once per worker process."""
        return self.resolve().recipe

    def resolve(self) -> ResolvedRecipe:
        """The recipe with its method's pieces, resolved once per worker process and recipe.

        The first task of a run on a worker validates the recipe and looks its method up in
        the registry; every later task of that run (same :attr:`recipe_hash`) reuses the
        result.

        Returns
        -------
        ResolvedRecipe

        Examples
        --------
        >>> from napari_gpuscope.batch.recipes import Recipe
        >>> recipe = Recipe.from_defaults("tv")
        >>> task = TaskSpec(recipe.model_dump(mode="json"), recipe.hash(), "out.zarr")
        >>> task.resolve() is task.resolve()
        True
        >>> task.resolve().params.strength == recipe.params["strength"]
        True
        """
        resolved = _RESOLVED.get(self.recipe_hash)
        if resolved is None:
            resolved = _RESOLVED[self.recipe_hash] = ResolvedRecipe.resolve(
                Recipe.from_data(self.recipe), self.recipe_hash
            )
        return resolved


@dataclass(frozen=True)
class ResolvedRecipe:
    """A run's recipe and what its positions need from the registry, looked up once.

    Attributes
    ----------
    recipe : Recipe
        The validated recipe.
    recipe_hash : str
        The driver's ``recipe.hash()`` (:attr:`TaskSpec.recipe_hash`); also the ``cache_key``
        of a two-phase method's ``job`` hook.
    params : Params
        The job's parameter model (frozen: shared by every position).
    job_function : callable
        ``JobSpec.function``: ``job_function(data, params=..., device=...)`` makes a
        position's job unless the hooks make it.
    hooks : object or None
        ``JobSpec.batch`` loaded (two-phase jobs' ``prepare`` and ``job``), or None.
    job_id : str
        The recipe's job (``recipe.job``, or the method's main job).
    """

    recipe: Recipe
    recipe_hash: str
    params: Params
    job_function: Callable[..., Job[MethodResult]]
    hooks: object = None
    job_id: str = ""

    @classmethod
    def resolve(cls, recipe: Recipe, recipe_hash: str) -> ResolvedRecipe:
        """Look the recipe's method and job up in the registry (once) and load their pieces."""
        from napari_gpuscope.methods import load

        job = recipe.job_spec()
        params_class: type[Params] = job.params_class()
        return cls(
            recipe=recipe,
            recipe_hash=recipe_hash,
            params=params_class.from_dict(recipe.params),
            job_function=job.job_function(),
            hooks=load(job.batch) if job.batch else None,
            job_id=job.id,
        )

    def make_job(
        self,
        data: ArrayLike,
        device: str,
        prepared: object = None,
        axes: tuple[str, ...] | None = None,
    ) -> Job[MethodResult]:
        """One position's job: the hooks' ``job`` (given ``prepared``) or the method's; a job
        that takes ``channel_axis`` (eSRRF of channels) is told where the input's ``"c"`` axis
        is (an ImageJ hyperstack is ``(T, C, Y, X)``, the job's default ``(C, T, Y, X)``), and
        so is a hooks' ``job`` that takes it (eSRRF's, which applies a recipe's drift trace)."""
        make = getattr(self.hooks, "job", None)
        extra = {}
        reads_axes = _takes(make or self.job_function, "channel_axis") and (
            "channel_axis" not in self.params.names()  # a parameter (TV's) is the recipe's
        )
        if reads_axes and axes and "c" in axes and len(axes) == len(data.shape):
            extra["channel_axis"] = axes.index("c")
        if make is not None:
            return make(
                data,
                self.params,
                prepared=prepared,
                device=device,
                cache_key=self.recipe_hash,
                **extra,
            )
        return self.job_function(data, params=self.params, device=device, **extra)


def _takes(function: Callable[..., object], keyword: str) -> bool:
    """Whether ``function`` has a parameter called ``keyword``."""
    try:
        return keyword in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


_RESOLVED: dict[str, ResolvedRecipe] = {}
"""This worker process's resolved recipes, by recipe hash."""
