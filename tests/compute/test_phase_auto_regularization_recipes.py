"""Phase recipes saved before ``regularization="auto"`` keep their number and their hash.

The files were written by ``tests/fixtures/phase/recipes_before_auto/write.py`` with the code
of the commit before the automatic regularization: each stores ``regularization: <number>``
explicitly, and ``run --resume`` skips a position only while its recipe's hash is stable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from napari_gpuscope.batch.recipes import load_recipe

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "phase" / "recipes_before_auto"
EXPECTED = json.loads((OLD / "hashes.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_recipe_saved_before_auto_keeps_its_regularization_and_hash(name):
    recipe = load_recipe(OLD / f"{name}.yaml")
    assert recipe.hash() == EXPECTED[name]["hash"]
    params = recipe.params_model()
    assert params.regularization == EXPECTED[name]["regularization"]
    # Saved again by the current code: the same number, the same hash.
    assert params.to_dict()["regularization"] == EXPECTED[name]["regularization"]
    assert type(recipe).from_params(params).hash() == EXPECTED[name]["hash"]
    # The TV strength, automatic since, keeps its number too (2e-3 saved, else the 1e-3 default).
    assert params.tv_strength == (2e-3 if name == "phase-tv" else 1e-3)
