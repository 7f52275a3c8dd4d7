"""One parameter model per method: frozen, validated, self-describing, JSON/YAML round trip.

A method's parameters are a frozen dataclass deriving from :class:`Params`, each field declared
with :func:`param` (default, bounds, unit, one-line help, choices). The model is the single
source of truth: the compute function validates through it, the dock builds and labels its
controls from :meth:`Params.param_info`, provenance records :meth:`Params.to_dict`, saved
settings and recipes are :meth:`Params.to_json` / :meth:`Params.to_yaml`.

Supported field types: ``float``, ``int``, ``bool``, ``str`` (with ``choices``),
``tuple[float, ...]``, each optionally ``| None``. Values are checked strictly: a string is never
a number, ``"no"`` is not a boolean, a dict is not a sequence.

Examples
--------
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class BlurParams(Params):
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
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import numbers
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

__all__ = [
    "ParamInfo",
    "ParameterError",
    "Params",
    "merge_call",
    "param",
    "params_docstring",
    "takes_params",
]

_META_KEY = "napari_gpuscope.param"


class ParameterError(ValueError):
    """A parameter value is invalid; the message names the parameter, the value and what is
    valid."""


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
        where = f"{owner}.{self.name}"
        if value is None:
            if self.optional:
                return None
            raise ParameterError(f"{where} is required ({self._expected()}), got None")
        if self.kind == "bool":
            if isinstance(value, bool | np.bool_):
                return bool(value)
            raise ParameterError(f"{where} must be True or False, got {value!r}")
        if self.kind == "str":
            if isinstance(value, str) and (self.choices is None or value in self.choices):
                return value
            raise ParameterError(f"{where} must be {self._expected()}, got {value!r}")
        if self.kind == "floats":
            if isinstance(value, str | bytes | Mapping | set | frozenset) or not isinstance(
                value, Sequence | np.ndarray
            ):
                raise ParameterError(
                    f"{where} must be a sequence of numbers{self._item_range()}, got {value!r}"
                )
            items = list(np.asarray(value).tolist()) if isinstance(value, np.ndarray) else value
            checked = []
            for index, item in enumerate(items):
                if not self._is_number(item, integral=False):
                    raise ParameterError(
                        f"{where}[{index}] must be a number{self._item_range()}, got {item!r} "
                        f"(in {value!r})"
                    )
                number = float(item)
                if not self._in_range(number):
                    raise ParameterError(
                        f"{where}[{index}] must be a finite number{self._item_range()}, got "
                        f"{item!r} (in {value!r})"
                    )
                checked.append(number)
            return tuple(checked)
        integral = self.kind == "int"
        if not self._is_number(value, integral=integral):
            raise ParameterError(f"{where} must be {self._expected()}, got {value!r}")
        number = int(value) if integral else float(value)
        if not self._in_range(number):
            raise ParameterError(f"{where} must be {self._expected()}, got {value!r}")
        return number

    # -- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _is_number(value: Any, *, integral: bool) -> bool:
        if isinstance(value, bool | np.bool_):
            return False
        return isinstance(value, numbers.Integral if integral else numbers.Real)

    def _in_range(self, number: float) -> bool:
        if not math.isfinite(number):
            return False
        below = self.minimum is not None and (
            number < self.minimum or (self.exclusive_minimum and number == self.minimum)
        )
        if below:
            return False
        return self.maximum is None or number <= self.maximum

    def _expected(self) -> str:
        if self.kind == "bool":
            return "True or False"
        if self.kind == "str":
            return self.range_text() or "a string"
        noun = {"int": "an integer", "float": "a finite number", "floats": "a sequence of numbers"}
        text = noun[self.kind]
        rng = self.range_text()
        return f"{text} {rng}" if rng else text

    def _item_range(self) -> str:
        rng = self.range_text()
        return f" {rng}" if rng else ""


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
) -> Any:
    """Declare a parameter field of a :class:`Params` dataclass.

    Parameters
    ----------
    default : object
        Default value (immutable: tuples, not lists).
    help : str
        One-line help text.
    label : str, optional
        Short form label (default: the field name in words).
    unit : str
        Unit of the value.
    minimum, maximum : float, optional
        Inclusive bounds (for tuples: of every item).
    exclusive_minimum : bool
        Make ``minimum`` itself invalid.
    choices : mapping or sequence of str, optional
        Valid values of a string parameter (a mapping gives their display labels).
    advanced : bool
        Belongs in a dock's "Advanced" section.
    step : float, optional
        Suggested step of a spin box or slider.

    Returns
    -------
    dataclasses.Field
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
    }
    return dataclasses.field(default=default, metadata={_META_KEY: meta})


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


class Params:
    """Base class of the per-method parameter models (frozen dataclasses).

    Subclasses are declared ``@dataclass(frozen=True)`` with :func:`param` fields and may
    override :meth:`validate` for rules between fields. Instances are validated on creation, so
    an instance is always valid.
    """

    method_id: ClassVar[str] = ""
    """Id of the method these parameters belong to (e.g. ``"tv"``), written into JSON/YAML."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for info in self.param_info():
            object.__setattr__(self, info.name, info.check(getattr(self, info.name), owner))
        self.validate()

    def validate(self) -> None:
        """Check rules that involve several fields (override; raise :class:`ParameterError`)."""

    def fail(self, name: str, message: str) -> typing.NoReturn:
        """Raise a :class:`ParameterError` about field ``name`` (for :meth:`validate`)."""
        raise ParameterError(f"{type(self).__name__}.{name} {message}")

    @classmethod
    @functools.cache
    def param_info(cls) -> tuple[ParamInfo, ...]:
        """One :class:`ParamInfo` per field, in declaration order."""
        hints = typing.get_type_hints(cls)
        infos = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            meta = f.metadata.get(_META_KEY)
            if meta is None:
                raise TypeError(f"{cls.__name__}.{f.name} must be declared with param()")
            kind, optional = _kind_of(hints[f.name])
            label = meta["label"] or f.name.replace("_", " ").capitalize()
            infos.append(
                ParamInfo(
                    name=f.name,
                    kind=kind,
                    optional=optional,
                    default=f.default,
                    **{**meta, "label": label},
                )
            )
        return tuple(infos)

    @classmethod
    def info(cls, name: str) -> ParamInfo:
        """The :class:`ParamInfo` of field ``name``."""
        for item in cls.param_info():
            if item.name == name:
                return item
        raise KeyError(f"{cls.__name__} has no parameter {name!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Field names in declaration order."""
        return tuple(item.name for item in cls.param_info())

    # -- (de)serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (tuples become lists)."""
        out: dict[str, Any] = {}
        for name in self.names():
            value = getattr(self, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build from a mapping; unknown keys are an error (a typo must not be ignored)."""
        if not isinstance(data, Mapping):
            raise ParameterError(
                f"{cls.__name__} expects a mapping of parameter names to values, got "
                f"{type(data).__name__}"
            )
        known = set(cls.names())
        unknown = sorted(set(data) - known)
        if unknown:
            raise ParameterError(
                f"{cls.__name__} has no parameter(s) {unknown}; valid names: {sorted(known)}"
            )
        return cls(**dict(data))

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON text (floats are written exactly, so the round trip is lossless)."""
        return json.dumps(self.to_dict(), indent=indent)

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
        """Inverse of :meth:`to_yaml`."""
        import yaml

        return cls.from_dict(yaml.safe_load(text) or {})

    def replace(self, **changes: Any) -> Self:
        """A validated copy with some fields changed."""
        unknown = sorted(set(changes) - set(self.names()))
        if unknown:
            raise ParameterError(
                f"{type(self).__name__} has no parameter(s) {unknown}; valid names: "
                f"{sorted(self.names())}"
            )
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


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
