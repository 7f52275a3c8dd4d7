"""``napari-gpuscope validate`` and ``status``: the read-only subcommands, which check an
input against a recipe or report a store's positions, and compute nothing."""

from __future__ import annotations

import argparse

__all__ = ["status", "validate"]


def validate(args: argparse.Namespace) -> int:
    """Check every position of the input against the recipe; returns the exit code."""
    from napari_gpuscope.batch.inputs import discover_all
    from napari_gpuscope.batch.recipes import load_recipe
    from napari_gpuscope.batch.status import validate_inputs

    recipe = load_recipe(args.recipe)
    positions = discover_all(args.input)
    from napari_gpuscope.batch.status import has_input_facts

    problems = validate_inputs(recipe, positions, recipe_dir=args.recipe.parent)
    for problem in problems:
        print(problem)
    if not has_input_facts(recipe):
        print(
            f"note: {args.recipe} records no input facts (axes, pixel size, units, ndim, dtype), "
            "so the positions were checked for readability, pixels and the job's own input "
            "checks only; save the recipe from the dock (its Recipe row records the layer's "
            "facts) or add an 'input' section"
        )
    print(
        f"{len(positions)} positions, {len(problems)} problem(s); recipe {recipe.method} "
        f"{recipe.hash()[:12]}"
    )
    return 1 if problems else 0


def status(args: argparse.Namespace) -> int:
    """Print done / failed / pending per position of the store; returns the exit code."""
    from napari_gpuscope.batch.status import store_status

    status = store_status(args.out)
    for line in status.lines():
        print(line)
    return 1 if status.failed else 0
