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
:func:`param` and the strict types it declares live in :mod:`._param_fields`; :class:`ParamInfo`
and the wording of the errors in :mod:`._param_info`.

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
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, ValidationError, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ._param_fields import SAME_AS_DEFAULT, _Checks, param
from ._param_info import ParameterError, ParamInfo, _UnknownKeyword

__all__ = [
    "ParamInfo",
    "ParameterError",
    "Params",
    "param",
]


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
        where it differs from what a record without it means (its default, or its
        ``older_default`` where the default changed since)."""
        data = self.model_dump(mode="json")
        for info in self.param_info():
            if info.added_later and getattr(self, info.name) == info.absent_value:
                del data[info.name]
        return data

    @classmethod
    def with_older_defaults(cls, data: Mapping[str, object]) -> dict[str, object]:
        """``data`` (a record: a recipe's, provenance's or settings' parameters) with the
        fields it lacks whose default changed since it could have been written filled with
        what their absence meant then (their ``older_default``)."""
        filled = dict(data)
        for info in cls.param_info():
            if info.older_default is not SAME_AS_DEFAULT and info.name not in filled:
                filled[info.name] = info.older_default
        return filled

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """Build from a record; unknown keys are an error (a typo must not be ignored), and a
        missing field whose default changed takes its older default
        (:meth:`with_older_defaults`)."""
        if not isinstance(data, Mapping):
            raise ParameterError(
                f"{cls.__name__} expects a mapping of parameter names to values, got "
                f"{type(data).__name__}"
            )
        cls._check_names(data)
        return cls(**cls.with_older_defaults(data))

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
