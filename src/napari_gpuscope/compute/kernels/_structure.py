"""The arguments of a fused op as a structure of tensors: walk, clone, poison, copy, address.

An op's arguments may nest tensors in tuples, lists, mappings and dataclasses (a solver's
state object, e.g. the flat-field fit's ``AlmState``). The dispatch decides the path on every
tensor in them, and the self-test clones them, fills outputs with NaN and compares outputs.
An output is named by an :data:`Output`: a positional index, a keyword name, or a field of one
of those (``(0, "sparse")``: field ``sparse`` of the first positional argument).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeAlias, TypeVar

import torch

__all__ = [
    "Output",
    "clone",
    "copy_into",
    "is_structure",
    "output_of",
    "poisoned_like",
    "tensors",
    "with_output",
]

Output: TypeAlias = "int | str | tuple[int | str, str]"
"""An output argument: a position, a keyword, or ``(position or keyword, field name)``."""

T = TypeVar("T")


def _is_record(value: object) -> bool:
    """A dataclass instance (not the class itself)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def is_structure(value: object) -> bool:
    """Whether :func:`tensors` looks inside ``value`` (a container or a dataclass)."""
    return isinstance(value, list | tuple | Mapping) or _is_record(value)


def tensors(value: object) -> Iterator[torch.Tensor]:
    """Every tensor in ``value``, depth first, in a fixed order (fields in declaration order)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from tensors(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from tensors(item)
    elif _is_record(value):
        for field in dataclasses.fields(value):  # type: ignore[arg-type]
            yield from tensors(getattr(value, field.name))


def _rebuild(value: object, fn: Callable[[torch.Tensor], torch.Tensor]) -> object:
    """``value`` with every tensor replaced by ``fn(tensor)`` (same containers, new objects)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list | tuple):
        items = [_rebuild(item, fn) for item in value]
        # a named tuple takes its fields as arguments, not one iterable
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, Mapping):
        return {key: _rebuild(item, fn) for key, item in value.items()}
    if _is_record(value):
        changes = {
            f.name: _rebuild(getattr(value, f.name), fn)
            for f in dataclasses.fields(value)  # type: ignore[arg-type]
        }
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]
    return value


def clone(value: T) -> T:
    """A copy of ``value`` with every tensor cloned."""
    return _rebuild(value, torch.Tensor.clone)  # type: ignore[return-value]


def poisoned_like(value: T) -> T:
    """Same structure, every tensor replaced by a NaN-filled one of its shape and device."""
    return _rebuild(value, lambda t: torch.full_like(t, float("nan")))  # type: ignore[return-value]


def copy_into(target: object, source: object) -> None:
    """Copy every tensor of ``source`` into the matching tensor of ``target``."""
    for got, want in zip(tensors(target), tensors(source), strict=True):
        got.copy_(want)


def output_of(
    args: Sequence[object], kwargs: Mapping[str, object], output: Output
) -> torch.Tensor:
    """The tensor ``output`` names among ``args`` and ``kwargs``."""
    holder, field = output if isinstance(output, tuple) else (output, None)
    value = kwargs[holder] if isinstance(holder, str) else args[holder]
    if field is not None:
        value = getattr(value, field)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"output {output!r} is a {type(value).__name__}, not a tensor")
    return value


def with_output(
    args: list[object], kwargs: dict[str, object], output: Output, value: torch.Tensor
) -> None:
    """Set ``output`` to ``value`` in ``args``/``kwargs`` (in place on the containers; a
    dataclass holding it is replaced by a copy, so the caller's original is left alone)."""
    holder, field = output if isinstance(output, tuple) else (output, None)
    new: object = value
    if field is not None:
        record = kwargs[holder] if isinstance(holder, str) else args[holder]
        new = dataclasses.replace(record, **{field: value})  # type: ignore[type-var]
    if isinstance(holder, str):
        kwargs[holder] = new
    else:
        args[holder] = new
