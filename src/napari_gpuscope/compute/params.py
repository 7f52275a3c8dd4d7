"""One parameter model per method: frozen, strict pydantic models that describe themselves.

A method's parameters are a class deriving from :class:`Params` (a pydantic ``BaseModel``:
frozen, strict, unknown keys forbidden), each field declared with :func:`param` (default,
bounds, unit, label, one-line help, choices, "advanced"). That metadata lives in the pydantic
field (bounds as ``ge``/``gt``/``le``, choices as a ``Literal``, the rest in ``title``,
``description`` and ``json_schema_extra``), so the model is the single source of truth: the
compute function validates through it, the dock builds and labels its controls from
:meth:`Params.param_info`, provenance records :meth:`Params.to_dict`, saved settings and
recipes hold that dict, and the recipe's JSON Schema is pydantic's schema of the model.

Supported field types: ``float``, ``int``, ``bool``, ``str`` (with ``choices``),
``tuple[float, ...]``, each optionally ``| None``. Values are checked strictly: a string is never
a number, ``"no"`` is not a boolean, a boolean is not a number, NaN and infinities are refused.
NumPy scalars and arrays are read as the Python values they hold. Invalid values raise
:class:`ParameterError` (a ``ValueError``) naming ``Class.field``, the value and what is valid;
pydantic's ``ValidationError`` never leaves this module's constructors. The fields themselves
(:func:`param`, :class:`ParamInfo`, the pydantic field each becomes) are in
:mod:`._param_fields`; the public job signatures generated from a model
(:func:`takes_params`) are here.

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

import functools
import inspect
import json
import textwrap
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, TypeVar

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, ValidationError, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ._param_fields import ParameterError, ParamInfo, _Checks, _UnknownKeyword, param

__all__ = [
    "ParamInfo",
    "ParameterError",
    "Params",
    "merge_call",
    "param",
    "params_docstring",
    "takes_params",
]

P = TypeVar("P", bound="Params")
R = TypeVar("R")


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


def merge_call(
    params_cls: type[Params],
    params: Params | None,
    overrides: Mapping[str, Any],
    function: str,
) -> Params:
    """The parameters of one call: ``params`` (or the defaults) with explicit overrides.

    Used by the public functions that accept both a params object and keyword arguments.
    """
    if params is None:
        base = None
    elif isinstance(params, params_cls):
        base = params
    else:
        raise ParameterError(
            f"{function}: params must be a {params_cls.__name__}, got {type(params).__name__}"
        )
    unknown = sorted(set(overrides) - set(params_cls.names()))
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword argument(s) {unknown}")
    if base is None:
        return params_cls(**dict(overrides))
    return base.replace(**overrides) if overrides else base


_KIND_DOC = {
    "float": "float",
    "int": "int",
    "bool": "bool",
    "str": "str",
    "floats": "sequence of float",
}


def _numpydoc_entry(info: ParamInfo) -> str:
    kind = _KIND_DOC[info.kind]
    if info.choices is not None:
        kind = "{" + ", ".join(repr(c) for c in info.choices) + "}"
    if info.optional:
        kind += " or None"
    details = info.help.rstrip(".") + "."
    if info.unit:
        details += f" Unit: {info.unit}."
    rng = info.range_text()
    if rng and info.choices is None:
        details += f" Valid: {rng}."
    default = list(info.default) if isinstance(info.default, tuple) else info.default
    details += f" Default: {default!r}."
    body = textwrap.fill(details, width=96, initial_indent=" " * 8, subsequent_indent=" " * 8)
    return f"    {info.name} : {kind}, optional\n{body}"


def params_docstring(params_cls: type[Params]) -> str:
    """numpydoc ``Parameters`` entries for every field of ``params_cls`` (4-space indented)."""
    return "\n".join(_numpydoc_entry(info) for info in params_cls.param_info())


def takes_params(params_cls: type[Params], *, positional: Sequence[str] = ()) -> Callable:
    """Give a method's job function its public signature, generated from its params model.

    The decorated implementation is ``impl(data, params, *, <runtime keywords>)``. The public
    function accepts ``data``, then the ``positional`` parameters, then every other parameter
    as a keyword, a ``params=`` object (or a params object in place of the first positional
    parameter), and the runtime keywords (``device=``, ``memory_budget=``...). Explicit keywords
    override the fields of a ``params`` object. The parameter list is therefore written once,
    in the model; ``{params}`` in the implementation's docstring is replaced by its numpydoc
    entries.

    Parameters
    ----------
    params_cls : type
        The method's :class:`Params` subclass.
    positional : sequence of str
        Fields that may also be passed positionally after ``data`` (e.g. ``("weight",)``).

    Returns
    -------
    callable
        A decorator.
    """
    positional = tuple(positional)
    names = params_cls.names()
    for name in positional:
        if name not in names:
            raise TypeError(f"{params_cls.__name__} has no parameter {name!r}")

    def decorate(impl: Callable[..., Any]) -> Callable[..., Any]:
        impl_signature = inspect.signature(impl)
        impl_parameters = list(impl_signature.parameters.values())
        data_parameter = impl_parameters[0]
        runtime = [p for p in impl_parameters[2:] if p.kind is inspect.Parameter.KEYWORD_ONLY]
        runtime_names = {p.name for p in runtime}
        function = impl.__name__

        @functools.wraps(impl)
        def api(data: Any, *args: Any, params: Params | None = None, **kwargs: Any) -> Any:
            if args and isinstance(args[0], Params):
                if params is not None:
                    raise TypeError(f"{function}() got two params objects")
                params, args = args[0], args[1:]
            if len(args) > len(positional):
                raise TypeError(
                    f"{function}() takes at most {len(positional) + 1} positional arguments "
                    f"({', '.join(('data', *positional))})"
                )
            overrides = dict(zip(positional, args, strict=False))
            for name in list(kwargs):
                if name in runtime_names:
                    continue
                if name in overrides:
                    raise TypeError(f"{function}() got multiple values for argument {name!r}")
                overrides[name] = kwargs.pop(name)
            merged = merge_call(params_cls, params, overrides, function)
            return impl(data, merged, **kwargs)

        fields = {info.name: info for info in params_cls.param_info()}
        signature_parameters = [data_parameter.replace(kind=inspect.Parameter.POSITIONAL_ONLY)]
        for name in positional:
            signature_parameters.append(
                inspect.Parameter(
                    name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=fields[name].default
                )
            )
        signature_parameters.append(
            inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, default=None)
        )
        for name, info in fields.items():
            if name not in positional:
                signature_parameters.append(
                    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info.default)
                )
        signature_parameters.extend(runtime)
        api.__signature__ = impl_signature.replace(parameters=signature_parameters)  # type: ignore[attr-defined]
        if api.__doc__ and "{params}" in api.__doc__:
            api.__doc__ = api.__doc__.replace("    {params}", params_docstring(params_cls))
        api.params_class = params_cls  # type: ignore[attr-defined]
        return api

    return decorate
