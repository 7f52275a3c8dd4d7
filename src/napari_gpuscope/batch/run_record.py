"""A batch store's ``run.json``: the recipe, its hash and every position's identity.

One idea: what the record of a run holds, and how a resumed run (a ``--resume``, or a round of
``run --watch``) adds its positions to the earlier record instead of replacing it, so that
``napari-gpuscope status`` counts every position ever recorded, not the last round's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from napari_gpuscope.batch.store import marker_key

if TYPE_CHECKING:
    from napari_gpuscope.batch.inputs import Position
    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.compute._types import JSONDict

__all__ = ["merge_run_records", "run_record"]


def run_record(
    recipe: Recipe, recipe_hash: str, positions: Sequence[Position], input_name: str
) -> JSONDict:
    """The record of a run of ``recipe`` over ``positions``: each position's name, source and
    marker key (None when its identity cannot be read).

    Examples
    --------
    >>> from napari_gpuscope.batch.recipes import Recipe
    >>> recipe = Recipe.from_defaults("tv")
    >>> record = run_record(recipe, recipe.hash(), [], "in/*.tif")
    >>> record["positions"], record["input"]
    ([], 'in/*.tif')
    """
    entries = []
    for position in positions:
        try:
            key = marker_key(recipe_hash, position.identity())
        except (OSError, ValueError, KeyError):
            key = None
        entries.append({"name": position.name, "source": position.source, "key": key})
    return {
        "recipe_hash": recipe_hash,
        "recipe": recipe.model_dump(mode="json"),
        "input": input_name,
        "positions": entries,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def merge_run_records(earlier: JSONDict | None, record: JSONDict) -> JSONDict:
    """A resumed run's ``run.json``: ``record`` with the earlier record's positions kept.

    The positions are the union, in the earlier record's order with this run's new ones after
    it; a position in both takes this run's entry (its source and key now). With another
    recipe the earlier positions not in this run keep their names and sources but lose their
    key: they are not done with this recipe, so ``status`` counts them pending (or failed),
    never done.

    Examples
    --------
    >>> earlier = {"recipe_hash": "h", "positions": [{"name": "a", "key": "1"},
    ...                                              {"name": "b", "key": "2"}]}
    >>> now = {"recipe_hash": "h", "positions": [{"name": "c", "key": "3"},
    ...                                          {"name": "a", "key": "4"}]}
    >>> merge_run_records(earlier, now)["positions"]
    [{'name': 'a', 'key': '4'}, {'name': 'b', 'key': '2'}, {'name': 'c', 'key': '3'}]
    >>> merge_run_records(earlier, {**now, "recipe_hash": "g"})["positions"][1]
    {'name': 'b', 'key': None}
    """
    if not earlier:
        return record
    new = {entry["name"]: entry for entry in record["positions"]}
    same_recipe = earlier.get("recipe_hash") == record["recipe_hash"]
    merged = []
    for entry in earlier["positions"]:
        if entry["name"] in new:
            merged.append(new.pop(entry["name"]))
        else:
            merged.append(entry if same_recipe else {**entry, "key": None})
    return {**record, "positions": merged + list(new.values())}
