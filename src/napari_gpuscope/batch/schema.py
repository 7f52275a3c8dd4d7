"""The recipe's JSON Schema, published as ``docs/recipe.schema.json``.

pydantic writes it from the recipe union (:func:`~napari_gpuscope.batch.recipes.recipe_union`):
one branch per job of every registered method (``oneOf``), each naming its ``method`` and
``job`` and describing its ``params`` from the job's params model, with every parameter's type,
default, bounds (``minimum``, ``exclusiveMinimum``, ``maximum``), choices (``enum``), label
(``title``), help (``description``), ``unit``, ``step`` and ``advanced``. Regenerate the
published file after adding a method or a parameter::

    python -m napari_gpuscope.generate

(``tests/test_generate.py`` fails, naming that command, when it is stale.)

Examples
--------
>>> schema = recipe_json_schema()
>>> schema["properties"]["method"]["enum"][:2]
['tv', 'esrrf']
>>> schema["$defs"]["TVParams"]["properties"]["gain"]["unit"]
'ADU/photon'
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from napari_gpuscope.batch.recipes import SCHEMA_VERSION, recipe_union
from napari_gpuscope.methods import METHODS

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict
    from napari_gpuscope.compute.params import Params

__all__ = ["params_schema", "recipe_json_schema", "schema_text"]


def params_schema(params_cls: type[Params]) -> JSONDict:
    """JSON Schema of one params model (every key optional: defaults fill the rest)."""
    return params_cls.model_json_schema()  # type: ignore[attr-defined]


def recipe_json_schema() -> JSONDict:
    """The recipe's JSON Schema (draft 2020-12), with every registered method's parameters."""
    union = TypeAdapter(recipe_union()).json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "napari-gpuscope recipe",
        "description": (
            f"A recipe (format version {SCHEMA_VERSION}): a method's job, its parameters, the "
            "input facts they were tuned on, the artifacts it needs and provenance."
        ),
        "type": "object",
        # Which methods exist, before the branches say what each one's recipe holds.
        "properties": {"method": {"enum": list(METHODS)}},
        "required": ["schema_version", "method"],
        **union,
    }


def schema_text() -> str:
    """The published file's text."""
    return json.dumps(recipe_json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
