"""One parameter model per method: frozen, strict pydantic models that describe themselves.

A method's parameters are a :class:`Params` subclass (a pydantic ``BaseModel``: frozen, strict,
unknown keys forbidden) whose fields are :func:`param`, a pydantic ``Field`` with a label
(``title``), one-line help (``description``), unit, step and "advanced" (``json_schema_extra``)
and a range and choices (its metadata). The model is the single source of truth: compute
functions validate through it, docks build their controls from :meth:`Params.param_info` (a
view of ``model_fields``), provenance, settings and recipes hold :meth:`Params.to_dict`, and
the recipe's JSON Schema is pydantic's schema of the model.

Field types: ``float``, ``int``, ``bool``, ``str`` (with ``choices``) and ``tuple[float, ...]``,
each optionally ``| None``. Values are checked strictly (a string is never a number, ``"no"``
is not a boolean, a boolean is not a number, NaN and infinities are refused); NumPy scalars and
arrays are read as the Python values they hold. Invalid values, and the rules between fields
(:meth:`Params.validate`), raise :class:`ParameterError` naming ``Class.field``, the value and
what is valid, whichever way the model is built (constructor, recipe, ``--set``, a dock).

Examples
--------
>>> class BlurParams(Params):
...     sigma: float = param(1.0, minimum=0.0, unit="px", help="Gaussian sigma")
...     mode: str = param("reflect", choices={"reflect": "Reflect", "wrap": "Wrap"},
...                       help="Boundary handling")
>>> p = BlurParams(sigma=2)
>>> p.sigma, BlurParams.from_json(p.to_json()) == p
(2.0, True)
>>> BlurParams(sigma=-1)
Traceback (most recent call last):
...
napari_gpuscope.compute.params.ParameterError: BlurParams.sigma must be a finite number >= 0, got -1
>>> BlurParams.model_json_schema()["properties"]["sigma"]["minimum"]
0.0
"""

from __future__ import annotations

import inspect
import json
import numbers
import reprlib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

__all__ = [
    "ParamInfo",
    "ParameterError",
    "Params",
    "param",
]


Value = float | int | bool | str | tuple[float, ...] | None
"""What a parameter holds (the field types :func:`param` supports)."""


class ParameterError(ValueError):
    """A parameter value is invalid; the message names ``Class.field``, the value and what is
    valid."""


class _UnknownKeyword(ParameterError, TypeError):
    """``Params(colour=...)``: a TypeError as for any function, and a ParameterError."""


@dataclass(frozen=True)
class _Checks:
    """What a :func:`param` field checks beyond pydantic's ``Field``: the range (of every item
    of a tuple), the choices of a string, and ``added_later``. It is the field's annotation
    metadata: pydantic asks it for the field's strict type (pydantic's custom-type protocol)."""

    minimum: float | None
    maximum: float | None
    exclusive_minimum: bool
    choices: tuple[str, ...] | None
    added_later: bool

    def __get_pydantic_core_schema__(
        self, source: type[object], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        kind, optional = _kind_of(source)
        bounds: dict[str, float] = {}
        if self.minimum is not None:
            bounds["gt" if self.exclusive_minimum else "ge"] = self.minimum
        if self.maximum is not None:
            bounds["le"] = self.maximum
        real = Annotated[float, Field(strict=True, allow_inf_nan=False, **bounds)]
        # NumPy scalars and arrays are read as the Python values they hold (strict types
        # refuse them); anything else reaches the strict check unchanged.
        typed: object = {
            "float": Annotated[real, BeforeValidator(_plain)],
            "int": Annotated[int, Field(strict=True, **bounds), BeforeValidator(_plain)],
            "bool": Annotated[bool, Field(strict=True), BeforeValidator(_plain)],
            "str": Literal[self.choices] if self.choices else Annotated[str, Field(strict=True)],
            "floats": Annotated[
                tuple[Annotated[real, BeforeValidator(_plain)], ...], BeforeValidator(_as_tuple)
            ],
        }[kind]
        return handler.generate_schema(typed | None if optional else typed)


def param(
    default: Value,
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
) -> Any:  # like pydantic's Field: it is the default of a field of any type
    """A parameter field of a :class:`Params` model: a pydantic ``Field`` with this metadata.

    Parameters
    ----------
    default : object
        Default value (immutable: tuples, not lists).
    help : str
        One-line help (tooltips, docs, CLI): the field's ``description``.
    label : str, optional
        Short form label: the field's ``title`` (default: the field name in words).
    unit : str
        Unit of the value ("" when dimensionless).
    minimum, maximum : float, optional
        Inclusive bounds (for tuples: of every item), pydantic's ``ge``/``gt`` and ``le``.
    exclusive_minimum : bool
        Make ``minimum`` itself invalid (``gt`` instead of ``ge``).
    choices : mapping or sequence of str, optional
        Valid values of a string parameter (a mapping gives their display labels).
    advanced : bool
        Belongs in a dock's collapsed "Advanced" section.
    step : float, optional
        Suggested step of a spin box or slider.
    added_later : bool
        The field came after recipes of its model were first saved: it is written (recipes,
        provenance, settings) only when it differs from its default, so an older recipe reads,
        and hashes, as before.

    Returns
    -------
    pydantic.fields.FieldInfo
        The field. Unit, step, advanced and the choices' labels are in its
        ``json_schema_extra`` (so in the JSON Schema); range, choices and ``added_later`` in
        its ``metadata``, which gives the field its strict type.

    Examples
    --------
    >>> from napari_gpuscope.compute.params import Params
    >>> class Blur(Params):
    ...     sigma: float = param(1.0, minimum=0.0, unit="px", help="Gaussian sigma")
    >>> Blur.model_fields["sigma"].description, Blur.info("sigma").range_text()
    ('Gaussian sigma', '>= 0')
    """
    labels = {c: c for c in choices} if isinstance(choices, list | tuple) else choices
    labels = None if labels is None else dict(labels)
    extra: dict[str, object] = {"advanced": advanced}
    if unit:
        extra["unit"] = unit
    if step is not None:
        extra["step"] = step
    if labels is not None:
        extra["choice_labels"] = labels
    field = Field(default, title=label, description=help, json_schema_extra=extra)
    values = None if labels is None else tuple(labels)
    checks = _Checks(minimum, maximum, exclusive_minimum, values, added_later)
    field.metadata.append(checks)
    return field


@dataclass(frozen=True)
class ParamInfo:
    """Read-only view of one parameter field, computed from the model's ``model_fields``
    (:meth:`Params.info`); its attributes are :func:`param`'s arguments, and:

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

    @classmethod
    def of(cls, name: str, field: FieldInfo) -> ParamInfo:
        """The view of ``model_fields[name]`` (a :func:`param` field)."""
        checks = next(m for m in field.metadata if isinstance(m, _Checks))
        extra = typing.cast("dict[str, Any]", field.json_schema_extra)
        labels = extra.get("choice_labels")
        return cls(
            name, *_kind_of(field.annotation), field.default, field.description or "",
            field.title or name, extra.get("unit", ""), checks.minimum, checks.maximum,
            checks.exclusive_minimum, None if labels is None else dict(labels),
            extra["advanced"], extra.get("step"), checks.added_later,
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


_KINDS: dict[object, str] = {float: "float", int: "int", bool: "bool", str: "str"}


def _kind_of(annotation: object) -> tuple[str, bool]:
    """(kind, optional) of a field annotation; other types are refused."""
    args = typing.get_args(annotation)
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    optional = union and type(None) in args
    if optional and len(args) == 2:
        annotation = next(a for a in args if a is not type(None))
    if annotation in _KINDS:
        return _KINDS[annotation], optional
    if typing.get_origin(annotation) is tuple and typing.get_args(annotation) == (float, ...):
        return "floats", optional
    raise TypeError(f"unsupported parameter type {annotation!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def _plain(value: object) -> object:
    """A NumPy scalar (or another registered number type) as the Python value it holds."""
    if isinstance(value, np.number | np.bool_):
        return value.item()
    if _is_number(value) and not isinstance(value, int | float):
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    return value


def _as_tuple(value: object) -> object:
    """A list, array or other sequence of numbers as a tuple (a string or mapping stays)."""
    if isinstance(value, np.ndarray):
        return tuple(value.tolist())
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | tuple):
        return tuple(value)
    return value


def _short(value: object) -> str:
    """``repr(value)`` cut to a line (a message never echoes thousands of values), NumPy
    scalars as plain numbers."""
    shortener = reprlib.Repr()
    shortener.maxlist = shortener.maxtuple = 6
    shortener.maxstring = shortener.maxother = 80
    if isinstance(value, list | tuple):
        return shortener.repr(type(value)(float(v) if _is_number(v) else v for v in value))
    return shortener.repr(_plain(value) if _is_number(value) else value)


class Params(BaseModel):
    """Base class of the per-method parameter models (frozen, strict pydantic models).

    Subclasses declare :func:`param` fields and may override :meth:`validate` for rules between
    fields. Instances are validated on creation (and are frozen: assigning to a field raises
    pydantic's "Instance is frozen" error; :meth:`replace` makes a changed copy), so an
    instance is always valid.
    """

    model_config = ConfigDict(
        frozen=True,
        strict=True,
        extra="forbid",
        validate_default=True,
        # A field's label (its title) defaults to its name in words: "Max iterations".
        field_title_generator=lambda name, _field: name.replace("_", " ").capitalize(),
    )

    method_id: ClassVar[str] = ""
    """Id of the method these parameters belong to (e.g. ``"tv"``)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: object) -> None:
        # ParamInfo (the docks, the CLI, the docs) reads the metadata only param() gives.
        for name, field in cls.model_fields.items():
            if not any(isinstance(meta, _Checks) for meta in field.metadata):
                raise TypeError(f"{cls.__name__}.{name} must be declared with param()")

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The schema's description is the docstring's first paragraph (pydantic would copy
        the whole docstring, doctests included)."""
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        summary = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]
        if summary:
            target["description"] = " ".join(summary.split())
        return schema

    def __init__(self, /, **values: object) -> None:
        # pydantic calls this for nested models too (recipes), so every path gets these errors.
        unknown = [name for name in values if name not in type(self).model_fields]
        if unknown:
            raise _UnknownKeyword(
                f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                f"{unknown[0]!r}"
            )
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _parameter_error(type(self), values, exc) from None

    @model_validator(mode="after")
    def _rules_between_fields(self) -> Self:
        try:
            self.validate()
        except ParameterError:
            raise
        except ValueError as exc:  # a rule that did not use fail(): still a clear message
            raise ParameterError(f"{type(self).__name__}: {exc}") from None
        return self

    def __str__(self) -> str:
        return repr(self)  # "TVParams(weight=None, ...)", not pydantic's bare "weight=None ..."

    def validate(self) -> None:  # type: ignore[override]
        """Check rules that involve several fields (override; report with :meth:`fail`)."""

    def fail(self, name: str, message: str) -> typing.NoReturn:
        """Raise the :class:`ParameterError` of a rule of :meth:`validate` about field
        ``name``: recipes, ``--set`` and the docks all report it as ``Class.name message``.

        Examples
        --------
        >>> class Window(Params):
        ...     low: float = param(0.0, help="Lower end")
        ...     high: float = param(1.0, help="Upper end")
        ...     def validate(self):
        ...         if self.high <= self.low:
        ...             self.fail("high", f"must exceed low ({self.low:g}), got {self.high:g}")
        >>> Window(low=2.0)
        Traceback (most recent call last):
        ...
        napari_gpuscope.compute.params.ParameterError: Window.high must exceed low (2), got 1
        """
        raise ParameterError(f"{type(self).__name__}.{name} {message}")

    @classmethod
    def param_info(cls) -> tuple[ParamInfo, ...]:
        """One :class:`ParamInfo` per field, in declaration order (read from ``model_fields``)."""
        return tuple(ParamInfo.of(name, field) for name, field in cls.model_fields.items())

    @classmethod
    def info(cls, name: str) -> ParamInfo:
        """The :class:`ParamInfo` of field ``name``."""
        if name not in cls.model_fields:
            raise KeyError(f"{cls.__name__} has no parameter {name!r}")
        return ParamInfo.of(name, cls.model_fields[name])

    @classmethod
    def declaration(cls, name: str, **overrides: object) -> Any:  # param()'s
        """Field ``name``'s :func:`param` declaration, for another model that offers the same
        parameter (default, bounds, choices, unit and help stay declared once); keywords of
        :func:`param` override the copy's (e.g. ``label``, ``advanced``, ``added_later``).

        Examples
        --------
        >>> class Blur(Params):
        ...     sigma: float = param(1.0, minimum=0.0, unit="px", help="Gaussian sigma")
        >>> class Pipeline(Params):
        ...     blur_sigma: float = Blur.declaration("sigma", label="Blur sigma")
        >>> info = Pipeline.info("blur_sigma")
        >>> info.default, info.minimum, info.unit, info.label, info.help
        (1.0, 0.0, 'px', 'Blur sigma', 'Gaussian sigma')
        """
        info = cls.info(name)
        keywords = tuple(inspect.signature(param).parameters)[1:]  # all but the default
        unknown = sorted(set(overrides) - set(keywords))
        if unknown:
            raise TypeError(f"{cls.__name__}.declaration() got unknown keyword(s) {unknown}")
        return param(info.default, **{key: getattr(info, key) for key in keywords} | overrides)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Field names in declaration order."""
        return tuple(cls.model_fields)

    # -- (de)serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able values (tuples become lists); a field declared ``added_later`` only
        where it differs from its default."""
        data = self.model_dump(mode="json")
        for info in self.param_info():
            if info.added_later and getattr(self, info.name) == info.default:
                del data[info.name]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """Build from a mapping; unknown keys are an error (a typo must not be ignored)."""
        if not isinstance(data, Mapping):
            raise ParameterError(
                f"{cls.__name__} expects a mapping of parameter names to values, got "
                f"{type(data).__name__}"
            )
        cls._check_names(data)
        return cls(**dict(data))

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON text (floats are written exactly, so the round trip is lossless)."""
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Self:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def to_yaml(self) -> str:
        """YAML text (needs PyYAML)."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str) -> Self:
        """Inverse of :meth:`to_yaml` (PyYAML's safe loader)."""
        import yaml

        return cls.from_dict(yaml.safe_load(text) or {})

    def replace(self, **changes: object) -> Self:
        """A validated copy with some fields changed."""
        self._check_names(changes)
        return type(self)(**{**{name: getattr(self, name) for name in self.names()}, **changes})

    @classmethod
    def _check_names(cls, data: Mapping[str, object]) -> None:
        unknown = sorted(set(data) - set(cls.names()))
        if unknown:
            raise ParameterError(
                f"{cls.__name__} has no parameter(s) {unknown}; valid names: {sorted(cls.names())}"
            )


def _parameter_error(
    cls: type[Params], values: Mapping[str, object], exc: ValidationError
) -> ParameterError:
    """pydantic's first error as the :class:`ParameterError` the field (or rule) gives."""
    error = exc.errors()[0]
    raised = error.get("ctx", {}).get("error")
    if isinstance(raised, ParameterError):  # from a rule between fields
        return raised
    name, *loc = error["loc"]
    info = cls.info(str(name))
    return info.error(values.get(info.name, info.default), tuple(loc), cls.__name__)
