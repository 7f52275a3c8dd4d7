"""Recipes: the parameters tuned on one field of view, saved to apply to a whole experiment.

A recipe is a YAML file read with PyYAML's *safe* loader (tags that would build Python objects
are refused) and validated by a pydantic v2 model: unknown keys and wrong types are errors that
name the key. It holds a schema version, the method id, the method's parameters exactly as its
params model (the dock's controls) holds them, the input facts the parameters were tuned for,
the artifacts the method needs (files with their SHA-256), and provenance. It holds no device:
the device is chosen when the recipe runs.

Examples
--------
>>> from napari_gpuscope.batch.recipes import Recipe
>>> recipe = Recipe.from_defaults("tv", strength=1.2)
>>> Recipe.from_yaml(recipe.to_yaml()).params["strength"]
1.2
>>> Recipe.from_yaml("schema_version: 1\\nmethod: tv\\nparams: {strenght: 1}\\n")
Traceback (most recent call last):
...
napari_gpuscope.batch.recipes.RecipeError: recipe: params.strenght: TVParams has no ...
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from napari_gpuscope.methods import METHODS, method
from napari_gpuscope.provenance import software_versions

__all__ = [
    "SCHEMA_VERSION",
    "Artifact",
    "InputFacts",
    "Recipe",
    "RecipeError",
    "RecipeProvenance",
    "file_sha256",
    "load_recipe",
]

SCHEMA_VERSION = 1
"""Version of the recipe format this package writes and reads."""

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class RecipeError(ValueError):
    """A recipe is unreadable or invalid; the message names the file, the key and the fix."""


class InputFacts(BaseModel):
    """What the parameters were tuned on: a run checks each input against these facts.

    Every field is optional; ``None`` means "not recorded, not checked".
    """

    model_config = _STRICT

    axes: list[str] | None = Field(None, description="Axis labels, e.g. ['z', 'y', 'x'].")
    pixel_size: list[float] | None = Field(
        None, description="Physical step per axis (same order as axes)."
    )
    units: list[str] | None = Field(None, description="Unit per axis, e.g. ['µm', 'µm'].")
    ndim: int | None = Field(None, ge=1, description="Number of dimensions.")
    dtype: str | None = Field(None, description="NumPy dtype name, e.g. 'uint16'.")
    channel: int | None = Field(None, description="Channel axis (None: no channel axis).")


class Artifact(BaseModel):
    """A file a method needs (e.g. a saved BaSiC profile), pinned by its checksum."""

    model_config = _STRICT

    name: str = Field(description="What the method calls it, e.g. 'flatfield'.")
    path: str = Field(description="File path (relative paths are relative to the recipe).")
    sha256: str = Field(pattern="^[0-9a-f]{64}$", description="SHA-256 of the file's bytes.")


class RecipeProvenance(BaseModel):
    """Where a recipe came from (not part of its hash: re-saving changes nothing computed)."""

    model_config = _STRICT

    package: str | None = Field(None, description="napari-gpuscope version.")
    software: dict[str, str | None] = Field(
        default_factory=dict, description="Versions of torch, CuPy, NumPy..."
    )
    source: str | None = Field(None, description="The layer or file the recipe was tuned on.")
    created: str | None = Field(None, description="ISO 8601 timestamp (UTC).")


class Recipe(BaseModel):
    """A method, its parameters and what they expect; see the module docstring.

    Attributes
    ----------
    schema_version : int
        Always :data:`SCHEMA_VERSION`.
    method : str
        A registry id (:data:`napari_gpuscope.methods.METHODS`).
    params : dict
        The method's parameters, every field, as its params model writes them.
    input : InputFacts
        Expected input facts.
    artifacts : list of Artifact
        Files the method needs, with checksums.
    provenance : RecipeProvenance
        Package versions, source and time of creation.
    """

    model_config = _STRICT

    schema_version: Literal[1] = Field(description="Recipe format version.")
    method: str = Field(description="Method id, e.g. 'tv'.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Parameters of the method's params model."
    )
    input: InputFacts = Field(default_factory=InputFacts)
    artifacts: list[Artifact] = Field(default_factory=list)
    provenance: RecipeProvenance = Field(default_factory=RecipeProvenance)

    @model_validator(mode="after")
    def _check_method_and_params(self) -> Self:
        if self.method not in METHODS:
            raise ValueError(f"method: unknown method {self.method!r}; known: {sorted(METHODS)}")
        # Normalised through the params model: the recipe holds every field, validated, in the
        # form the model writes (so two recipes with the same parameters hash alike).
        model = method(self.method).params_class().from_dict(self.params)
        object.__setattr__(self, "params", model.to_dict())
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_params(
        cls,
        params: Any,
        *,
        input: InputFacts | Mapping[str, Any] | None = None,
        artifacts: list[Artifact] | None = None,
        source: str | None = None,
    ) -> Recipe:
        """A recipe for a params model instance (``params.method_id`` names the method)."""
        facts = input if isinstance(input, InputFacts) else InputFacts(**dict(input or {}))
        return cls(
            schema_version=SCHEMA_VERSION,
            method=type(params).method_id,
            params=params.to_dict(),
            input=facts,
            artifacts=list(artifacts or ()),
            provenance=_provenance(source),
        )

    @classmethod
    def from_defaults(cls, method_id: str, **changes: Any) -> Recipe:
        """A recipe with the method's default parameters, some changed."""
        params = method(method_id).params_class()(**changes)
        return cls.from_params(params)

    def params_model(self) -> Any:
        """The method's params model instance."""
        return method(self.method).params_class().from_dict(self.params)

    # ------------------------------------------------------------------ identity
    def hash(self) -> str:
        """SHA-256 of what determines the results: format, method, parameters, artifacts.

        Provenance and input facts are not part of it: re-saving a recipe, or noting a fact,
        recomputes nothing; changing a parameter or an artifact recomputes everything.
        """
        payload = {
            "schema_version": self.schema_version,
            "method": self.method,
            "params": self.params,
            "artifacts": sorted((a.name, a.sha256) for a in self.artifacts),
        }
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def check_artifacts(self, base: Path | None = None) -> list[str]:
        """Problems with the artifacts (missing file, checksum mismatch), in words."""
        problems = []
        for artifact in self.artifacts:
            path = self.artifact_path(artifact, base)
            if not path.is_file():
                problems.append(f"artifact {artifact.name!r}: file {str(path)!r} not found")
            elif file_sha256(path) != artifact.sha256:
                problems.append(
                    f"artifact {artifact.name!r}: {str(path)!r} changed since the recipe was "
                    "saved (SHA-256 differs)"
                )
        return problems

    @staticmethod
    def artifact_path(artifact: Artifact, base: Path | None = None) -> Path:
        """The artifact's file, relative paths taken from ``base`` (the recipe's folder)."""
        path = Path(artifact.path)
        return path if path.is_absolute() or base is None else base / path

    # ------------------------------------------------------------------ YAML
    def to_yaml(self) -> str:
        """YAML text (safe types only)."""
        import yaml

        data = self.model_dump(mode="json")
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    @classmethod
    def from_yaml(cls, text: str, *, origin: str = "recipe") -> Recipe:
        """Parse and validate YAML text; errors name ``origin`` and the key."""
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            # The safe loader refuses python/* tags: say so rather than just "constructor".
            raise RecipeError(f"{origin}: not a safe YAML recipe: {exc}") from None
        return cls.from_data(data, origin=origin)

    @classmethod
    def from_data(cls, data: Any, *, origin: str = "recipe") -> Recipe:
        """Validate a parsed mapping (see :meth:`from_yaml`)."""
        if not isinstance(data, Mapping):
            raise RecipeError(f"{origin}: a recipe is a mapping of keys, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise RecipeError(f"{origin}: {_explain(exc)}") from None
        except ValueError as exc:  # a ParameterError from the params model
            raise RecipeError(f"{origin}: params.{_param_message(exc)}") from None

    def save(self, path: str | Path) -> Path:
        """Write the recipe as YAML."""
        path = Path(path)
        path.write_text(self.to_yaml(), encoding="utf-8")
        return path


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


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _provenance(source: str | None) -> RecipeProvenance:
    versions = software_versions()
    return RecipeProvenance(
        package=versions.get("napari-gpuscope"),
        software={k: v for k, v in versions.items() if k != "napari-gpuscope"},
        source=source,
        created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )


def _explain(exc: ValidationError) -> str:
    """pydantic's errors as ``key.path: what is wrong`` lines."""
    lines = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        kind = error["type"]
        if kind == "extra_forbidden":
            lines.append(f"{key}: unknown key")
        elif kind == "missing":
            lines.append(f"{key}: required key missing")
        elif kind == "value_error":
            message = str(error.get("ctx", {}).get("error", error["msg"]))
            if message.startswith("method:"):
                lines.append(message)
            else:
                lines.append(f"params.{_param_message(message)}")
        else:
            lines.append(f"{key}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(lines)


def _param_message(exc: Any) -> str:
    """``"weight: TVParams.weight must be..."`` from a ParameterError message."""
    text = str(exc)
    head = text.split(" ", 1)[0]
    if "." in head:  # "TVParams.weight" -> the key is "weight"
        return f"{head.split('.', 1)[1]}: {text}"
    if "no parameter(s) [" in text:
        names = text.split("no parameter(s) [", 1)[1].split("]", 1)[0]
        keys = ", ".join(n.strip().strip("'") for n in names.split(","))
        return f"{keys}: {text}"
    return text
