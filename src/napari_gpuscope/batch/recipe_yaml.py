"""Recipe YAML: the text a recipe is read from and written as.

One idea: PyYAML's *safe* loader, made strict (a duplicate key is refused, PyYAML would keep
the last; a value it cannot read names its key and line; tags that would build Python objects
are refused), and its safe dumper. The text becomes a plain mapping here; what the mapping
means is the recipe model's business (:mod:`napari_gpuscope.batch.recipes`).

Examples
--------
>>> read_yaml("method: tv\\nparams: {strength: 1.2}\\n")
{'method': 'tv', 'params': {'strength': 1.2}}
>>> read_yaml("method: tv\\nmethod: esrrf\\n")
Traceback (most recent call last):
...
napari_gpuscope.batch.recipe_yaml.RecipeYamlError: key 'method' appears twice in one mapping ...
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import yaml

    from napari_gpuscope.compute._types import JSONDict, JSONValue

__all__ = ["RecipeYamlError", "read_yaml", "write_yaml"]


class RecipeYamlError(ValueError):
    """A recipe's YAML cannot be read; the message says what and where (the caller names the
    file)."""


def read_yaml(text: str) -> JSONValue:
    """Parse YAML text with the strict safe loader.

    Raises
    ------
    RecipeYamlError
        A duplicate key, an unreadable value, or text that is not safe YAML.
    """
    import yaml

    try:
        return yaml.load(text, Loader=_strict_loader())  # a SafeLoader
    except _KeyError as exc:
        raise RecipeYamlError(str(exc)) from None
    except yaml.YAMLError as exc:
        # The safe loader refuses python/* tags: say so rather than just "constructor".
        raise RecipeYamlError(f"not a safe YAML recipe: {_yaml_problem(exc)}") from None


def write_yaml(data: JSONDict) -> str:
    """YAML text of plain data (safe types only), keys in their order."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line: what is wrong and where (its message spans several lines,
    quoting the text)."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


class _KeyError(ValueError):
    """A duplicate key, or a value that cannot be read, in a recipe's YAML."""


@functools.cache
def _strict_loader() -> type:
    """PyYAML's safe loader refusing duplicate keys (PyYAML keeps the last) and naming the key
    and line of a value it cannot read (a 5,000-digit integer exceeds Python's limit)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[object, object]:
            if not isinstance(node, yaml.MappingNode):
                return super().construct_mapping(node, deep=deep)
            self.flatten_mapping(node)
            mapping: dict[object, object] = {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                try:
                    hash(key)
                except TypeError:
                    raise _KeyError(f"line {line}: a key must be a plain value") from None
                if key in mapping:
                    raise _KeyError(
                        f"key {key!r} appears twice in one mapping (again on line {line}); keep one"
                    )
                try:
                    mapping[key] = self.construct_object(value_node, deep=deep)
                except (ValueError, OverflowError) as exc:
                    why = str(exc).split(";")[0]  # not Python's advice to raise its limit
                    raise _KeyError(
                        f"{key}: line {value_node.start_mark.line + 1}: cannot read the value "
                        f"({why}); write a shorter number"
                    ) from None
            return mapping

    return StrictLoader
