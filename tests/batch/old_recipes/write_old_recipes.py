"""Write the old-form recipe fixtures and their hashes (run once, before the params models
moved to pydantic; kept to show where the files and hashes came from).

The recipes are the four methods' defaults and one changed recipe per method, saved by
``Recipe.save`` as the package wrote them before recipes had a ``job`` key; ``hashes.json``
holds ``Recipe.hash()`` of each as computed then. ``tests/batch/test_batch_recipes.py`` loads
them with the current code and asserts the same hashes: ``run --resume`` across versions skips
positions only while a recipe's hash is stable.

    python tests/batch/old_recipes/write_old_recipes.py
"""

from __future__ import annotations

import json
from pathlib import Path

from napari_gpuscope.batch.recipes import Recipe

HERE = Path(__file__).parent

RECIPES = {
    "tv-defaults": ("tv", {}),
    "tv-changed": (
        "tv",
        {"strength": 1.25, "noise_model": "poisson", "gain": 2, "spacing": [0.4, 0.1, 0.1]},
    ),
    "esrrf-defaults": ("esrrf", {}),
    "esrrf-changed": ("esrrf", {"magnification": 4, "radius": 2, "temporal": "VAR"}),
    "flatfield-defaults": ("flatfield", {}),
    "flatfield-changed": ("flatfield", {"get_darkfield": True, "output_dtype": "uint16"}),
    "phase-defaults": ("phase", {}),
    "phase-changed": ("phase", {"regularization": 1e-4, "tilt_mode": "tiles", "tiles_y": 3}),
}


def main() -> None:
    hashes = {}
    for name, (method_id, changes) in RECIPES.items():
        recipe = Recipe.from_defaults(method_id, **changes)
        recipe.save(HERE / f"{name}.yaml")
        hashes[name] = recipe.hash()
    # One in JSON (a YAML subset: load_recipe reads it too).
    recipe = Recipe.from_defaults("tv", weight=0.05)
    (HERE / "tv-weight.json").write_text(recipe.model_dump_json(indent=2) + "\n")
    hashes["tv-weight"] = recipe.hash()
    (HERE / "hashes.json").write_text(json.dumps(hashes, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
