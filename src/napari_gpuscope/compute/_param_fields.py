"""The fields of the parameter models: :func:`param` declarations, :class:`ParamInfo` and the
pydantic field each becomes, and the :class:`ParameterError` invalid values raise.

Part of :mod:`napari_gpuscope.compute.params`, which re-exports every public name here (and
names them as its own, so messages and tracebacks say ``compute.params``).
"""

from __future__ import annotations

import functools
import numbers
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError

__all__ = ["ParamInfo", "ParameterError", "param"]


class ParameterError(ValueError):
    """A parameter value is invalid; the message names the parameter, the value and what is
    valid."""


class _UnknownKeyword(ParameterError, TypeError):
    """``Params(colour=...)``: a TypeError as for any function, and a ParameterError."""


@dataclass(frozen=True)
class ParamInfo:
    """Description of one parameter (from its :func:`param` declaration and type).

    Attributes
    ----------
    name : str
        Field name.
    kind : {"float", "int", "bool", "str", "floats"}
        Value type (``"floats"`` is a tuple of floats).
    optional : bool
        Whether ``None`` is allowed (it usually means "estimate" or "automatic").
    default : object
        Default value.
    help : str
        One-line help (tooltips, docs, CLI).
    label : str
        Short label for forms.
    unit : str
        Unit of the value ("" when dimensionless).
    minimum, maximum : float or None
        Inclusive bounds (``minimum`` exclusive when ``exclusive_minimum``); for ``"floats"``
        they bound every item.
    exclusive_minimum : bool
        Whether ``minimum`` itself is invalid.
    choices : Mapping[str, str] or None
        Valid values of a ``"str"`` parameter and their display labels.
    advanced : bool
        Belongs in a dock's collapsed "Advanced" section.
    step : float or None
        Suggested step of a spin box or slider.
    added_later : bool
        The field came after recipes of its model were first saved: it is written (recipes,
        provenance, settings) only when it differs from its default, so an older recipe reads,
        and hashes, as before.
    """

    name: str
    kind: str
    optional: bool
    default: Any
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

    def range_text(self) -> str:
        """The valid range in words, e.g. ``">= 0"``, ``"in [1, 1000000]"``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        low = None
        if self.minimum is not None:
            low = f"{'>' if self.exclusive_minimum else '>='} {self.minimum:g}"
        if self.minimum is not None and self.maximum is not None and not self.exclusive_minimum:
            return f"in [{self.minimum:g}, {self.maximum:g}]"
        if low and self.maximum is not None:
            return f"{low} and <= {self.maximum:g}"
        if low:
            return low
        if self.maximum is not None:
            return f"<= {self.maximum:g}"
        return ""

    def check(self, value: Any, owner: str) -> Any:
        """Validate and normalise ``value``; raise :class:`ParameterError` naming ``owner.name``."""
        try:
            return _adapter(self.field_type())(value)
        except ValidationError as exc:
            raise self.error(value, exc.errors()[0]["loc"], owner) from None

    def field_type(self) -> Any:
        """The pydantic type of the field: bounds, strictness and choices included."""
        number = {
            "float": Annotated[float, Field(strict=True, allow_inf_nan=False, **self._bounds())],
            "int": Annotated[int, Field(strict=True, **self._bounds())],
        }
        if self.kind == "floats":
            item = Annotated[number["float"], BeforeValidator(_plain)]
            base: Any = Annotated[tuple[item, ...], BeforeValidator(_as_tuple)]
        elif self.kind == "str":
            choices = tuple(self.choices or ())
            base = Literal[choices] if choices else Annotated[str, Field(strict=True)]
        elif self.kind == "bool":
            base = Annotated[bool, Field(strict=True), BeforeValidator(_plain)]
        else:
            base = Annotated[number[self.kind], BeforeValidator(_plain)]
        return base | None if self.optional else base

    def error(self, value: Any, loc: tuple[Any, ...], owner: str) -> ParameterError:
        """The :class:`ParameterError` for an invalid ``value`` (``loc``: where in it)."""
        where = f"{owner}.{self.name}"
        if value is None:
            return ParameterError(f"{where} is required ({self._expected()}), got None")
        if self.kind == "bool":
            return ParameterError(f"{where} must be True or False, got {value!r}")
        if self.kind == "floats":
            rng = f" {self.range_text()}" if self.range_text() else ""
            if not loc or not isinstance(loc[0], int):
                return ParameterError(
                    f"{where} must be a sequence of numbers{rng}, got {_short(value)}"
                )
            item = _as_tuple(value)[loc[0]]
            noun = "a finite number" if _is_number(item) else "a number"
            return ParameterError(
                f"{where}[{loc[0]}] must be {noun}{rng}, got {_short(item)} (in {_short(value)})"
            )
        return ParameterError(f"{where} must be {self._expected()}, got {_short(value)}")

    def _bounds(self) -> dict[str, float]:
        bounds = {}
        if self.minimum is not None:
            bounds["gt" if self.exclusive_minimum else "ge"] = self.minimum
        if self.maximum is not None:
            bounds["le"] = self.maximum
        return bounds

    def _expected(self) -> str:
        if self.kind == "bool":
            return "True or False"
        if self.kind == "str":
            return self.range_text() or "a string"
        noun = {"int": "an integer", "float": "a finite number", "floats": "a sequence of numbers"}
        rng = self.range_text()
        return f"{noun[self.kind]} {rng}" if rng else noun[self.kind]


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def _plain(value: Any) -> Any:
    """A NumPy scalar (or another registered number type) as the Python value it holds."""
    if isinstance(value, np.number | np.bool_):
        return value.item()
    if _is_number(value) and not isinstance(value, int | float):
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    return value


def _as_tuple(value: Any) -> Any:
    """A list, array or other sequence of numbers as a tuple (a string or mapping stays)."""
    if isinstance(value, np.ndarray):
        return tuple(value.tolist())
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | tuple):
        return tuple(value)
    return value


@functools.cache
def _adapter(field_type: Any) -> Callable[[Any], Any]:

    return TypeAdapter(field_type).validate_python


@dataclass(frozen=True)
class _Declared:
    """What :func:`param` returns; :class:`Params` turns it into a pydantic field."""

    default: Any
    meta: dict[str, Any]


def param(
    default: Any,
    *,
    help: str,
    label: str | None = None,
    unit: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    choices: Mapping[str, str] | Sequence[str] | None = None,
    advanced: bool = False,
    step: float | None = None,
    added_later: bool = False,
) -> Any:
    """Declare a parameter field of a :class:`Params` model.

    Parameters
    ----------
    default : object
        Default value (immutable: tuples, not lists).
    help : str
        One-line help text (the field's ``description``).
    label : str, optional
        Short form label (the field's ``title``; default: the field name in words).
    unit : str
        Unit of the value.
    minimum, maximum : float, optional
        Inclusive bounds (for tuples: of every item); pydantic's ``ge``/``gt`` and ``le``.
    exclusive_minimum : bool
        Make ``minimum`` itself invalid (``gt`` instead of ``ge``).
    choices : mapping or sequence of str, optional
        Valid values of a string parameter (a mapping gives their display labels).
    advanced : bool
        Belongs in a dock's "Advanced" section.
    step : float, optional
        Suggested step of a spin box or slider.
    added_later : bool
        Written only when it differs from its default (see :class:`ParamInfo`).

    Returns
    -------
    object
        A declaration that :class:`Params` turns into a pydantic field of the annotated type.
    """
    if choices is not None and not isinstance(choices, Mapping):
        choices = {value: value for value in choices}
    meta = {
        "help": help,
        "label": label,
        "unit": unit,
        "minimum": minimum,
        "maximum": maximum,
        "exclusive_minimum": exclusive_minimum,
        "choices": None if choices is None else dict(choices),
        "advanced": advanced,
        "step": step,
        "added_later": added_later,
    }
    return _Declared(default, meta)


_KINDS: dict[Any, str] = {float: "float", int: "int", bool: "bool", str: "str"}


def _kind_of(annotation: Any) -> tuple[str, bool]:
    """(kind, optional) of a field annotation."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) != 1:
            raise TypeError(f"unsupported parameter type {annotation!r}")
        annotation = args[0]
    if annotation in _KINDS:
        return _KINDS[annotation], optional
    if typing.get_origin(annotation) is tuple and typing.get_args(annotation) == (float, ...):
        return "floats", optional
    raise TypeError(f"unsupported parameter type {annotation!r}")


def _pydantic_field(info: ParamInfo) -> Any:
    """The pydantic field of a parameter: default, label, help and the rest of its metadata."""
    extra: dict[str, Any] = {"advanced": info.advanced}
    if info.unit:
        extra["unit"] = info.unit
    if info.step is not None:
        extra["step"] = info.step
    if info.choices is not None:
        extra["choice_labels"] = dict(info.choices)
    return Field(info.default, title=info.label, description=info.help, json_schema_extra=extra)


# Public under napari_gpuscope.compute.params (its error messages and tracebacks name it).
for _public in (ParameterError, _UnknownKeyword, ParamInfo, param):
    _public.__module__ = "napari_gpuscope.compute.params"


def _short(value: Any) -> str:
    """``repr(value)`` cut to a line: a message never echoes thousands of values."""
    import reprlib

    shortener = reprlib.Repr()
    shortener.maxlist = shortener.maxtuple = 6
    shortener.maxstring = shortener.maxother = 80
    if isinstance(value, list | tuple):  # NumPy scalars as plain numbers
        value = type(value)(
            float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else v
            for v in value
        )
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value) if not isinstance(value, numbers.Integral) else int(value)
    return shortener.repr(value)
