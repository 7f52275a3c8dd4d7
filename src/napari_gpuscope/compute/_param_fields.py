"""How a parameter field is declared: :func:`param` and the strict type its checks give it.

A :func:`param` field is a pydantic ``Field`` whose metadata holds a :class:`_Checks` (range,
choices, ``added_later``); pydantic asks it for the field's strict type. The helpers here read
NumPy values as the Python values they hold. :mod:`.params` is the public home of all of it.
"""

from __future__ import annotations

import numbers
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema

Value = float | int | bool | str | tuple[float, ...] | None
"""What a parameter holds (the field types :func:`param` supports)."""


class _SameAsDefault:
    """The ``older_default`` of a field whose default never changed. One object, compared by
    identity: a copy or an unpickled field gets it back, not a lookalike."""

    def __repr__(self) -> str:
        return "SAME_AS_DEFAULT"

    def __reduce__(self) -> str:
        return "SAME_AS_DEFAULT"  # the module global of that name

    def __copy__(self) -> _SameAsDefault:
        return self

    def __deepcopy__(self, memo: dict) -> _SameAsDefault:
        return self


SAME_AS_DEFAULT: Any = _SameAsDefault()
"""``older_default`` of :func:`param` when an older record without the field meant today's
default."""


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
    older_default: Value = SAME_AS_DEFAULT

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
    older_default: Value = SAME_AS_DEFAULT,
) -> Any:  # like pydantic's Field: it is the default of a field of any type
    """A parameter field of a :class:`~.params.Params` model: a pydantic ``Field`` with this
    metadata.

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
    older_default : object, optional
        For an ``added_later`` field whose default changed since: the value a record without
        the field meant (its default then). Records leave the field out when it holds this
        value, and reading one without it gives this value (:meth:`~.params.Params.from_dict`
        and recipes), so an older recipe keeps its number and its hash, while a new record
        at today's default writes it.

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
    if older_default is not SAME_AS_DEFAULT and not added_later:
        raise TypeError("param(): older_default is for an added_later field")
    field.metadata.append(
        _Checks(minimum, maximum, exclusive_minimum, values, added_later, older_default)
    )
    return field


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
