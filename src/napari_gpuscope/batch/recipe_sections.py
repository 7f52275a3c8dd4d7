"""A recipe's sections besides its parameters: the input facts they were tuned on, the
artifacts (files pinned by their SHA-256) and where the recipe came from.

Every section is strict (unknown keys and wrong types are errors) and frozen, as the recipe
(:class:`~napari_gpuscope.batch.recipes.Recipe`) that holds them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from napari_gpuscope.provenance import software_versions

__all__ = [
    "STRICT",
    "Artifact",
    "ArtifactFile",
    "InputFacts",
    "RecipeProvenance",
    "file_sha256",
    "recipe_provenance",
]

STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
"""The model configuration of a recipe and its sections: no unknown keys, no coercion, frozen."""


class InputFacts(BaseModel):
    """What the parameters were tuned on: a run checks each input against these facts.

    Every field is optional; ``None`` means "not recorded, not checked".
    """

    model_config = STRICT

    axes: list[str] | None = Field(None, description="Axis labels, e.g. ['z', 'y', 'x'].")
    pixel_size: list[float] | None = Field(
        None, description="Physical step per axis (same order as axes)."
    )
    units: list[str] | None = Field(None, description="Unit per axis, e.g. ['µm', 'µm'].")
    ndim: int | None = Field(None, ge=1, description="Number of dimensions.")
    dtype: str | None = Field(None, description="NumPy dtype name, e.g. 'uint16'.")
    channel: int | None = Field(None, description="Channel axis (None: no channel axis).")


class ArtifactFile(BaseModel):
    """Another file an artifact consists of (e.g. a profile's JSON sidecar), pinned too."""

    model_config = STRICT

    path: str = Field(description="File path (relative paths are relative to the recipe).")
    sha256: str = Field(pattern="^[0-9a-f]{64}$", description="SHA-256 of the file's bytes.")


class Artifact(BaseModel):
    """A file a method needs (e.g. a saved BaSiC profile), pinned by its checksum, with every
    other file it consists of (:attr:`files`)."""

    model_config = STRICT

    name: str = Field(description="What the method calls it, e.g. 'flatfield'.")
    path: str = Field(description="File path (relative paths are relative to the recipe).")
    sha256: str = Field(pattern="^[0-9a-f]{64}$", description="SHA-256 of the file's bytes.")
    files: list[ArtifactFile] = Field(
        default_factory=list,
        description="The other files the artifact consists of (e.g. a profile's JSON sidecar), "
        "each pinned by its SHA-256.",
    )

    def pins(self) -> list[tuple[str, str]]:
        """Every file of the artifact with its SHA-256, the main file first."""
        return [(self.path, self.sha256)] + [(f.path, f.sha256) for f in self.files]


class RecipeProvenance(BaseModel):
    """Where a recipe came from (not part of its hash: re-saving changes nothing computed)."""

    model_config = STRICT

    package: str | None = Field(None, description="napari-gpuscope version.")
    software: dict[str, str | None] = Field(
        default_factory=dict, description="Versions of torch, CuPy, NumPy..."
    )
    source: str | None = Field(None, description="The layer or file the recipe was tuned on.")
    created: str | None = Field(None, description="ISO 8601 timestamp (UTC).")


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recipe_provenance(source: str | None) -> RecipeProvenance:
    """This package's and its libraries' versions, ``source`` and the time (UTC), now."""
    versions = software_versions()
    return RecipeProvenance(
        package=versions.get("napari-gpuscope"),
        software={k: v for k, v in versions.items() if k != "napari-gpuscope"},
        source=source,
        created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
