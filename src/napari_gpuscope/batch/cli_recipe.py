"""``napari-gpuscope recipe``: a recipe from a method's defaults, ``--set`` changes and
``--artifact`` files pinned by their SHA-256."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.cli_fail import fail

if TYPE_CHECKING:
    from napari_gpuscope.compute.params import Params

__all__ = ["recipe"]


def recipe(args: argparse.Namespace) -> int:
    """Write the recipe ``args`` describe; returns the exit code."""
    from napari_gpuscope.batch.recipe_sections import Artifact, ArtifactFile, file_sha256
    from napari_gpuscope.batch.recipes import SCHEMA_VERSION, Recipe, RecipeError
    from napari_gpuscope.methods import method

    try:
        params_class = method(args.method).job_spec(args.job).params_class()
    except KeyError as exc:
        return fail(f"--job: {exc.args[0]}")
    import yaml

    changes: dict[str, object] = {}
    for item in args.changes:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            return fail(f"--set {item!r}: expected NAME=VALUE")
        try:
            changes[name.strip()] = _field_value(params_class, name.strip(), value)
        except (ValueError, yaml.YAMLError) as exc:  # or a number beyond Python's 4300 digits
            why = " ".join(str(exc).split(";")[0].split())
            return fail(f"--set {name.strip()}: cannot read {value[:40]!r}: {why}")
    from napari_gpuscope.methods import load

    job = method(args.method).job_spec(args.job)
    # The hooks are loaded only to check artifacts: a recipe of defaults loads no job code.
    hooks = load(job.batch) if job.batch and args.artifacts else None
    check = getattr(hooks, "check_artifact", None)
    artifacts = []
    for item in args.artifacts:
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not name or not Path(path).is_file():
            return fail(f"--artifact {item!r}: expected NAME=PATH of an existing file")
        folder = args.output.resolve().parent
        if not Path(path).resolve().is_relative_to(folder):
            # Allowed (a shared profiles folder), but the recipe names it relative to itself.
            print(
                f"warning: --artifact {item!r} is outside the recipe's folder {folder}; the "
                "recipe names it by a relative path: move the recipe and the artifact together",
                file=sys.stderr,
            )
        if not job.batch:  # artifacts reach a job only through its batch hooks
            return fail(f"--artifact {item!r}: the {job.id!r} job of {args.method} takes none")
        try:  # loads as what the job needs; the other files it consists of are pinned too
            others = [Path(other) for other in check(name, Path(path))] if check else []
        except (ValueError, OSError) as exc:
            return fail(f"--artifact {item!r}: {exc}")

        def relative(file: Path) -> str:
            # Relative to the recipe, which is how run and validate resolve it.
            return os.path.relpath(Path(file).resolve(), args.output.resolve().parent)

        files = [ArtifactFile(path=relative(f), sha256=file_sha256(f)) for f in others]
        artifacts.append(
            Artifact(name=name, path=relative(Path(path)), sha256=file_sha256(path), files=files)
        )
    data = {
        "schema_version": SCHEMA_VERSION,
        "method": args.method,
        "job": args.job,
        "params": {**params_class().to_dict(), **changes},
        "artifacts": [artifact.model_dump() for artifact in artifacts],
    }
    try:
        checked = Recipe.from_data(data, origin="--set")
        consistent = getattr(hooks, "check_params", None)
        if consistent is not None:  # artifacts that contradict the parameters
            try:
                consistent(checked.params_model(), [artifact.name for artifact in artifacts])
            except ValueError as exc:
                return fail(str(exc))
        recipe = Recipe.from_params(
            checked.params_model(),
            job=args.job,
            artifacts=artifacts,
            source="napari-gpuscope recipe (defaults)",
        )
    except RecipeError as exc:
        return fail(str(exc))
    recipe.save(args.output)
    job = f" {recipe.job}" if recipe.job else ""
    print(f"wrote {args.output} ({args.method}{job}, recipe {recipe.hash()[:12]})")
    return 0


def _field_value(params_class: type[Params], name: str, text: str) -> object:
    """``--set NAME=TEXT`` read as the field's type (the model validates the value itself).

    A choice or string field takes the text as it is (``--set noise_model=no`` is the string,
    not YAML's false); ``null``/``none``/``~`` is None where the field allows it; numbers,
    booleans and lists are YAML, a number written ``1e-5`` included (YAML 1.1 reads it as a
    string). An unknown name is passed on, for the recipe's error that lists the valid names.
    """
    import yaml

    if name not in params_class.names():
        return yaml.safe_load(text)
    info = params_class.info(name)
    stripped = text.strip()
    if info.optional and stripped.lower() in ("null", "none", "~"):
        return None
    if info.kind == "str":
        return stripped
    parsed = yaml.safe_load(text)
    if info.kind == "floats" and isinstance(parsed, list):
        return [_number(item) for item in parsed]
    return _number(parsed) if info.kind in ("float", "int") else parsed


def _number(parsed: object) -> object:
    """A YAML 1.1 string that is a number (``1e-5``) as that number; anything else unchanged."""
    if isinstance(parsed, str) and parsed.strip().lower() not in ("nan", "inf", "-inf", "+inf"):
        try:
            return float(parsed)
        except ValueError:
            return parsed
    return parsed
