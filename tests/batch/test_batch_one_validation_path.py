"""One validation path (issue 26): a value a params model refuses is refused with the model's
own message by the constructor, a recipe and ``napari-gpuscope recipe --set``, for one field
and for a rule between fields alike."""

from __future__ import annotations

import pytest

from napari_gpuscope.batch.recipes import Recipe, RecipeError
from napari_gpuscope.cli import main
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.compute.tv import TVParams

# (the recipe key, --set texts, the model's keywords, the message): the messages are written
# here from the rules TVParams states (its ranges and its gain/offset rule), not copied from a run.
CASES = [
    (
        "strength",
        ["strength=-2"],
        {"strength": -2},
        "TVParams.strength must be a finite number in [0, 100], got -2",
    ),
    (
        "nonnegative",
        ["nonnegative=maybe"],
        {"nonnegative": "maybe"},
        "TVParams.nonnegative must be True or False, got 'maybe'",
    ),
    (
        "gain",  # a rule between fields: offset without a gain
        ["offset=3"],
        {"offset": 3},
        "TVParams.gain is None (estimate the whole camera model), so offset and read_noise must "
        "be None too; got offset=3.0, read_noise=None",  # offset is a float field: 3.0
    ),
]


@pytest.mark.parametrize(("key", "changes", "kwargs", "message"), CASES)
def test_constructor_recipe_and_set_report_the_same_message(
    key, changes, kwargs, message, tmp_path, capsys
):
    with pytest.raises(ParameterError) as direct:
        TVParams(**kwargs)
    assert str(direct.value) == message

    data = {"schema_version": 1, "method": "tv", "params": kwargs}
    with pytest.raises(RecipeError) as recipe:
        Recipe.from_data(data)
    assert str(recipe.value) == f"recipe: params.{key}: {message}"

    sets = [arg for change in changes for arg in ("--set", change)]
    assert main(["recipe", "tv", *sets, "-o", str(tmp_path / "r.yaml")]) == 2
    assert f"params.{key}: {message}" in capsys.readouterr().err
    assert not (tmp_path / "r.yaml").exists()
