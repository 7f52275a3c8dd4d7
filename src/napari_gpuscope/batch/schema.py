"""The recipe's JSON Schema, published as ``docs/recipe.schema.json``.

The generic part comes from the pydantic model; each registered method's ``params`` are described
from its params model (:meth:`~napari_gpuscope.compute.params.Params.param_info`: types, bounds,
choices, help), selected by the recipe's ``method``. Regenerate the published file after adding
a method or a parameter::

    python -m napari_gpuscope.batch.schema > docs/recipe.schema.json

(``tests/batch/test_recipes.py`` fails, saying this, when it is stale.)
"""

from __future__ import annotations

import json
from typing import Any

from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.methods import METHODS

__all__ = ["params_schema", "recipe_json_schema"]

_JSON_TYPES = {"float": "number", "int": "integer", "bool": "boolean", "str": "string"}


def _value_schema(info: Any) -> dict[str, Any]:
    if info.kind == "floats":
        schema: dict[str, Any] = {"type": "array", "items": _bounded({"type": "number"}, info)}
    else:
        schema = {"type": _JSON_TYPES[info.kind]}
        if info.kind in ("float", "int"):
            _bounded(schema, info)
        if info.choices is not None:
            schema["enum"] = list(info.choices)
    if info.optional:
        return {"anyOf": [schema, {"type": "null"}]}
    return schema


def _bounded(schema: dict[str, Any], info: Any) -> dict[str, Any]:
    if info.minimum is not None:
        schema["exclusiveMinimum" if info.exclusive_minimum else "minimum"] = info.minimum
    if info.maximum is not None:
        schema["maximum"] = info.maximum
    return schema


def params_schema(params_cls: type) -> dict[str, Any]:
    """JSON Schema of one params model (every key optional: defaults fill the rest)."""
    properties = {}
    for info in params_cls.param_info():
        entry = _value_schema(info)
        default = list(info.default) if isinstance(info.default, tuple) else info.default
        entry = {
            **entry,
            "description": info.help + (f" [{info.unit}]" if info.unit else ""),
            "default": default,
        }
        properties[info.name] = entry
    return {
        "title": params_cls.__name__,
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


def recipe_json_schema() -> dict[str, Any]:
    """The recipe's JSON Schema (draft 2020-12), with every registered method's parameters."""
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "napari-gpuscope recipe"
    defs = schema.setdefault("$defs", {})
    schema["properties"]["method"]["enum"] = list(METHODS)
    branches = []
    for method_id, spec in METHODS.items():
        name = f"params_{method_id}"
        defs[name] = params_schema(spec.params_class())
        branches.append(
            {
                "if": {"properties": {"method": {"const": method_id}}},
                "then": {"properties": {"params": {"$ref": f"#/$defs/{name}"}}},
            }
        )
    schema["allOf"] = branches
    return schema


def schema_text() -> str:
    """The published file's text."""
    return json.dumps(recipe_json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
