"""What a parameter field declares, read back (:class:`ParamInfo`), and the
:class:`ParameterError` an invalid value of it raises.

The docks, the CLI and the docs read :class:`ParamInfo`; its :meth:`ParamInfo.error` words every
refusal the same way, whichever way the model is built. :mod:`.params` is the public home of
both names.
"""

from __future__ import annotations

import reprlib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo

from ._param_fields import (
    SAME_AS_DEFAULT,
    Value,
    _as_tuple,
    _Checks,
    _is_number,
    _kind_of,
    _plain,
)

# The errors are documented, shown in tracebacks and pickled (batch workers) as names of
# compute.params, which imports them.
_PUBLIC_MODULE = "napari_gpuscope.compute.params"


class ParameterError(ValueError):
    """A parameter value is invalid; the message names ``Class.field``, the value and what is
    valid."""

    __module__ = _PUBLIC_MODULE


class _UnknownKeyword(ParameterError, TypeError):
    """``Params(colour=...)``: a TypeError as for any function, and a ParameterError."""

    __module__ = _PUBLIC_MODULE


@dataclass(frozen=True)
class ParamInfo:
    """Read-only view of one parameter field, computed from the model's ``model_fields``
    (:meth:`~.params.Params.info`); its attributes are :func:`~.params.param`'s arguments, and:

    Attributes
    ----------
    name : str
        Field name.
    kind : {"float", "int", "bool", "str", "floats"}
        Value type (``"floats"`` is a tuple of floats).
    optional : bool
        Whether ``None`` is allowed (it usually means "estimate" or "automatic").
    """

    name: str
    kind: str
    optional: bool
    default: Value
    help: str
    label: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: Mapping[str, str] | None = None
    advanced: bool = False
    step: float | None = None
    added_later: bool = False
    older_default: Value = SAME_AS_DEFAULT

    @property
    def absent_value(self) -> Value:
        """What a record without this field means: ``older_default`` where the default
        changed, else the default."""
        return self.default if self.older_default is SAME_AS_DEFAULT else self.older_default

    @classmethod
    def of(cls, name: str, field: FieldInfo) -> ParamInfo:
        """The view of ``model_fields[name]`` (a :func:`~.params.param` field)."""
        checks = next(m for m in field.metadata if isinstance(m, _Checks))
        extra = typing.cast("dict[str, Any]", field.json_schema_extra)
        labels = extra.get("choice_labels")
        return cls(
            name, *_kind_of(field.annotation), field.default, field.description or "",
            field.title or name, extra.get("unit", ""), checks.minimum, checks.maximum,
            checks.exclusive_minimum, None if labels is None else dict(labels),
            extra["advanced"], extra.get("step"), checks.added_later, checks.older_default,
        )  # fmt: skip

    def range_text(self) -> str:
        """The valid range in words, e.g. ``">= 0"``, ``"in [1, 1000000]"``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        low = high = ""
        if self.minimum is not None:
            low = f"{'>' if self.exclusive_minimum else '>='} {self.minimum:g}"
        if self.maximum is not None:
            high = f"<= {self.maximum:g}"
        if low and high and not self.exclusive_minimum:
            return f"in [{self.minimum:g}, {self.maximum:g}]"
        return " and ".join(part for part in (low, high) if part)

    def error(self, value: object, loc: tuple[int | str, ...], owner: str) -> ParameterError:
        """The :class:`ParameterError` for an invalid ``value`` (``loc``: where in it)."""
        where = f"{owner}.{self.name}"
        if value is None:
            return ParameterError(f"{where} is required ({self._expected()}), got None")
        if self.kind == "bool":
            return ParameterError(f"{where} must be True or False, got {value!r}")
        if self.kind == "floats" and loc and isinstance(loc[0], int):
            item = _as_tuple(value)[loc[0]]
            noun = "a finite number" if _is_number(item) else "a number"
            rng = f" {self.range_text()}" if self.range_text() else ""
            return ParameterError(
                f"{where}[{loc[0]}] must be {noun}{rng}, got {_short(item)} (in {_short(value)})"
            )
        return ParameterError(f"{where} must be {self._expected()}, got {_short(value)}")

    def _expected(self) -> str:
        if self.kind in ("bool", "str"):
            return "True or False" if self.kind == "bool" else self.range_text() or "a string"
        noun = {"int": "an integer", "float": "a finite number", "floats": "a sequence of numbers"}
        return f"{noun[self.kind]} {self.range_text()}".rstrip()


def _short(value: object) -> str:
    """``repr(value)`` cut to a line (a message never echoes thousands of values), NumPy
    scalars as plain numbers."""
    shortener = reprlib.Repr()
    shortener.maxlist = shortener.maxtuple = 6
    shortener.maxstring = shortener.maxother = 80
    if isinstance(value, list | tuple):
        return shortener.repr(type(value)(float(v) if _is_number(v) else v for v in value))
    return shortener.repr(_plain(value) if _is_number(value) else value)
