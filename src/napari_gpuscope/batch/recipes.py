"""Recipes: the parameters tuned on one field of view, saved to apply to a whole experiment.

One idea: the recipe model (:class:`Recipe`), how it is made, hashed, checked and saved. Its
sections besides the parameters (input facts, artifacts, provenance) are
:mod:`napari_gpuscope.batch.recipe_sections`; reading and writing its YAML text is
:mod:`napari_gpuscope.batch.recipe_yaml`; the recipe type of each job and their union are
:mod:`napari_gpuscope.batch.recipe_union`.

A recipe is a YAML file read with PyYAML's *safe* loader (tags that would build Python objects
are refused) and validated by pydantic v2: unknown keys and wrong types are errors that name the
key. It holds a schema version, the method id, optionally the job (absent: the method's main
job), the job's parameters exactly as its params model (the dock's controls) holds them, the
input facts the parameters were tuned for, the artifacts the method needs (files with their
SHA-256), and provenance. It holds no device: the device is chosen when the recipe runs.

Each job's recipe type is a subclass of :class:`Recipe` (:func:`recipe_types`), and a recipe is
validated as its job's type (:func:`recipe_union`), so validating it validates the parameters;
after validation ``params`` holds the model's
:meth:`~napari_gpuscope.compute.params.Params.to_dict`: every field, normalised, so two recipes
with the same parameters hash alike.

Examples
--------
>>> from napari_gpuscope.batch.recipes import Recipe
>>> recipe = Recipe.from_defaults("tv", strength=1.2)
>>> Recipe.from_yaml(recipe.to_yaml()).params["strength"]
1.2
>>> type(recipe).__name__, recipe.job, recipe.job_spec().id
('TvDenoiseRecipe', None, 'denoise')
>>> Recipe.from_defaults("esrrf", job="sweep", radii=(1.0, 2.0)).params["radii"]
[1.0, 2.0]
>>> Recipe.from_yaml("schema_version: 1\\nmethod: tv\\nparams: {strenght: 1}\\n")
Traceback (most recent call last):
...
napari_gpuscope.batch.recipes.RecipeError: recipe: params.strenght: TVParams has no ...
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, Field, ValidationError, model_validator

from napari_gpuscope.batch.recipe_sections import (
    STRICT,
    Artifact,
    InputFacts,
    RecipeProvenance,
    file_sha256,
    recipe_provenance,
)
from napari_gpuscope.batch.recipe_union import explain, job_recipe_types, job_recipe_union, validate
from napari_gpuscope.batch.recipe_yaml import RecipeYamlError, read_yaml, write_yaml
from napari_gpuscope.methods import METHODS, JobSpec, method

if TYPE_CHECKING:
    from collections.abc import Callable

    from napari_gpuscope.compute._types import JSONDict
    from napari_gpuscope.compute.params import Params

__all__ = [
    "SCHEMA_VERSION",
    "Recipe",
    "RecipeError",
    "load_recipe",
    "recipe_types",
    "recipe_union",
]

SCHEMA_VERSION = 1
"""Version of the recipe format this package writes and reads."""


class RecipeError(ValueError):
    """A recipe is unreadable or invalid; the message names the file, the key and the fix."""


class Recipe(BaseModel):
    """A method's job, its parameters and what they expect; see the module docstring.

    Instances are of the job's recipe type (:func:`recipe_types`); build them with
    :meth:`from_defaults`, :meth:`from_params`, :meth:`from_data`, :meth:`from_yaml` or
    :func:`load_recipe`.

    Attributes
    ----------
    schema_version : int
        Always :data:`SCHEMA_VERSION`.
    method : str
        A registry id (:data:`napari_gpuscope.methods.METHODS`).
    job : str or None
        The method's job (:attr:`MethodSpec.job_ids`); None: its main (first) job.
    params : dict
        The job's parameters, every field, as its params model writes them.
    input : InputFacts
        Expected input facts.
    artifacts : list of Artifact
        Files the method needs, with checksums.
    provenance : RecipeProvenance
        Package versions, source and time of creation.
    """

    model_config = STRICT

    schema_version: Literal[1] = Field(description="Recipe format version.")
    method: str = Field(description="Method id, e.g. 'tv'.")
    job: str | None = Field(None, description="The method's job; absent: its main (first) job.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Parameters of the job's params model."
    )
    input: InputFacts = Field(default_factory=InputFacts)
    artifacts: list[Artifact] = Field(default_factory=list)
    provenance: RecipeProvenance = Field(default_factory=RecipeProvenance)

    @model_validator(mode="after")
    def _check_method_and_job(self) -> Self:
        # Reached by a recipe whose method or job selects no recipe type (see from_data).
        if self.method not in METHODS:
            raise ValueError(f"method: unknown method {self.method!r}; known: {sorted(METHODS)}")
        spec = METHODS[self.method]
        if self.job is not None and self.job not in spec.job_ids:
            raise ValueError(
                f"job: method {self.method!r} has no job {self.job!r}; its jobs: "
                f"{list(spec.job_ids)}"
            )
        job = spec.job_spec(self.job)
        missing = [name for name in job.needs if name not in {a.name for a in self.artifacts}]
        if missing:
            # Refused here, not on every position at run time.
            raise ValueError(
                f"artifacts: the {job.id!r} job of {self.method!r} needs "
                + ", ".join(f"a {name!r} artifact (--artifact {name}=PATH)" for name in missing)
            )
        return self

    def __reduce__(self) -> tuple[Callable[[JSONDict], Recipe], tuple[JSONDict]]:
        # The recipe types are made at run time: pickle the data, rebuild from the registry.
        return (_rebuild, (self.model_dump(mode="json"),))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_params(
        cls,
        params: Params,
        *,
        job: str | None = None,
        input: InputFacts | Mapping[str, object] | None = None,
        artifacts: list[Artifact] | None = None,
        source: str | None = None,
    ) -> Recipe:
        """A recipe for a params model instance (``params.method_id`` names the method).

        ``job`` defaults to the method's first job whose params model is ``type(params)``
        (e.g. :class:`~napari_gpuscope.compute.esrrf.SweepParams` -> ``"sweep"``).
        """
        method_id = type(params).method_id
        if job is None and method_id in METHODS:
            jobs = [j.id for j in METHODS[method_id].jobs if j.params_class() is type(params)]
            job = jobs[0] if jobs else None
        facts = input if isinstance(input, InputFacts) else InputFacts(**dict(input or {}))
        data = {
            "schema_version": SCHEMA_VERSION,
            "method": method_id,
            "job": job,
            "params": params.to_dict(),
            "input": facts,
            "artifacts": list(artifacts or ()),
            "provenance": recipe_provenance(source),
        }
        if job is not None and job == METHODS[method_id].job_spec().id:
            data["job"] = None  # the main job: written as old recipes were
        return cls.from_data(data)

    @classmethod
    def from_defaults(cls, method_id: str, *, job: str | None = None, **changes: object) -> Recipe:
        """A recipe with the default parameters of a method's job (default: its main job)."""
        params = method(method_id).job_spec(job).params_class()(**changes)
        return cls.from_params(params, job=job)

    def job_spec(self) -> JobSpec:
        """The recipe's job in the registry (its method's main job when :attr:`job` is None)."""
        return method(self.method).job_spec(self.job)

    def params_model(self) -> Params:
        """The job's params model instance."""
        return self.job_spec().params_class().from_dict(self.params)

    # ------------------------------------------------------------------ identity
    def hash(self) -> str:
        """SHA-256 of what determines the results: format, method, job, parameters, artifacts.

        Provenance and input facts are not part of it: re-saving a recipe, or noting a fact,
        recomputes nothing; changing a parameter or an artifact recomputes everything. The main
        job (``job`` absent, None or named) hashes as recipes did before they named jobs.
        """
        payload = {
            "schema_version": self.schema_version,
            "method": self.method,
            "params": self.params,
            # The other files only where there are some: older recipes hash as they did.
            "artifacts": sorted(
                (a.name, a.sha256, *(f.sha256 for f in a.files)) if a.files else (a.name, a.sha256)
                for a in self.artifacts
            ),
        }
        if self.job is not None and self.job != method(self.method).job_spec().id:
            payload["job"] = self.job
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def check_artifacts(self, base: Path | None = None) -> list[str]:
        """Problems with the artifacts (missing file, checksum mismatch), in words."""
        problems = []
        for artifact in self.artifacts:
            for where, sha256 in artifact.pins():
                path = self.artifact_path(where, base)
                if not path.is_file():
                    problems.append(f"artifact {artifact.name!r}: file {str(path)!r} not found")
                elif file_sha256(path) != sha256:
                    problems.append(
                        f"artifact {artifact.name!r}: {str(path)!r} changed since the recipe was "
                        "saved (SHA-256 differs); make the recipe again with this file, or put "
                        "the original back"
                    )
        return problems

    @staticmethod
    def artifact_path(artifact: Artifact | str, base: Path | None = None) -> Path:
        """The artifact's file (or one of its files' paths), relative paths taken from ``base``
        (the recipe's folder)."""
        path = Path(artifact.path if isinstance(artifact, Artifact) else artifact)
        return path if path.is_absolute() or base is None else base / path

    # ------------------------------------------------------------------ YAML
    def to_yaml(self) -> str:
        """YAML text (safe types only; no ``job`` key for the main job)."""
        data = self.model_dump(mode="json", exclude={"job"} if self.job is None else None)
        for artifact in data["artifacts"]:
            if not artifact["files"]:
                del artifact["files"]  # as recipes were written before artifacts had files
        return write_yaml(data)

    @classmethod
    def from_yaml(cls, text: str, *, origin: str = "recipe") -> Recipe:
        """Parse and validate YAML text; errors name ``origin`` and the key."""
        try:
            data = read_yaml(text)  # PyYAML's safe loader, strict (recipe_yaml)
        except RecipeYamlError as exc:
            raise RecipeError(f"{origin}: {exc}") from None
        return cls.from_data(data, origin=origin)

    @classmethod
    def from_data(cls, data: object, *, origin: str = "recipe") -> Recipe:
        """Validate a parsed mapping (see :meth:`from_yaml`) as the recipe type of its job."""
        if not isinstance(data, Mapping):
            raise RecipeError(f"{origin}: a recipe is a mapping of keys, got {type(data).__name__}")
        try:
            return validate(Recipe, dict(data))
        except ValidationError as exc:
            raise RecipeError(f"{origin}: {explain(exc)}") from None

    def save(self, path: str | Path) -> Path:
        """Write the recipe as YAML."""
        path = Path(path)
        path.write_text(self.to_yaml(), encoding="utf-8")
        return path


def _rebuild(data: JSONDict) -> Recipe:
    return Recipe.from_data(data)


# ---------------------------------------------------------------------- the recipe types
def recipe_types() -> dict[tuple[str, str], type[Recipe]]:
    """The recipe type of every job of every registered method, by ``(method, job)``
    (:func:`~napari_gpuscope.batch.recipe_union.job_recipe_types` of :class:`Recipe`)."""
    return job_recipe_types(Recipe)


def recipe_union(*, fallback: bool = False) -> object:
    """The union of :func:`recipe_types`, selected by ``method`` and ``job``.

    ``fallback`` adds the generic :class:`Recipe` for data that selects none (a missing or
    unknown method or job), so that validation reports what is wrong with it.
    """
    return job_recipe_union(Recipe, fallback=fallback)


# ---------------------------------------------------------------------- files and errors
def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file.

    Parameters
    ----------
    path : str or Path
        A YAML recipe.

    Returns
    -------
    Recipe

    Raises
    ------
    RecipeError
        Unsafe YAML, unknown keys, wrong types or invalid parameters; the message names the
        file and the key.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "tv.yaml"
    >>> _ = Recipe.from_defaults("tv").save(path)
    >>> load_recipe(path).method
    'tv'
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read the recipe: {exc.strerror or exc}") from None
    return Recipe.from_yaml(text, origin=str(path))
