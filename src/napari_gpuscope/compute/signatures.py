"""A method's public job functions, their signature and docstring generated from its params
model: ``iter_denoise(image, weight=None, *, params=None, strength=1.0, ..., device=None)`` from
``TVParams``, with one numpydoc entry per field, and each call's parameters merged from a params
object and keyword arguments.

Examples
--------
>>> from napari_gpuscope.compute.tv import TVParams
>>> merge_call(TVParams, None, {"strength": 2.0}, "denoise").strength
2.0
"""

from __future__ import annotations

import functools
import inspect
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from .params import ParameterError, Params

__all__ = ["merge_call", "params_docstring", "takes_params"]

R = TypeVar("R")


def merge_call(
    params_cls: type[Params], params: Params | None, overrides: Mapping[str, object], function: str
) -> Params:
    """The parameters of one call: ``params`` (or the defaults) with explicit overrides.

    Used by the public functions that accept both a params object and keyword arguments.

    Examples
    --------
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> merge_call(TVParams, TVParams(strength=2.0), {"tolerance": 0.0}, "denoise").strength
    2.0
    """
    if params is not None and not isinstance(params, params_cls):
        raise ParameterError(
            f"{function}: params must be a {params_cls.__name__}, got {type(params).__name__}"
        )
    unknown = sorted(set(overrides) - set(params_cls.names()))
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword argument(s) {unknown}")
    if params is None:
        return params_cls(**dict(overrides))
    return params.replace(**overrides) if overrides else params


_KIND_DOC = {"float": "float", "int": "int", "bool": "bool", "str": "str"}


def params_docstring(params_cls: type[Params]) -> str:
    """numpydoc ``Parameters`` entries for every field of ``params_cls`` (4-space indented)."""
    entries = []
    for info in params_cls.param_info():
        kind = _KIND_DOC.get(info.kind, "sequence of float")
        if info.choices is not None:
            kind = "{" + ", ".join(repr(c) for c in info.choices) + "}"
        details = info.help.rstrip(".") + "." + (f" Unit: {info.unit}." if info.unit else "")
        if info.range_text() and info.choices is None:
            details += f" Valid: {info.range_text()}."
        default = list(info.default) if isinstance(info.default, tuple) else info.default
        details += f" Default: {default!r}."
        body = textwrap.fill(details, width=96, initial_indent=" " * 8, subsequent_indent=" " * 8)
        optional = " or None" if info.optional else ""
        entries.append(f"    {info.name} : {kind}{optional}, optional\n{body}")
    return "\n".join(entries)


def takes_params(
    params_cls: type[Params], *, positional: Sequence[str] = ()
) -> Callable[[Callable[..., R]], Callable[..., R]]:
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
        The method's :class:`~napari_gpuscope.compute.params.Params` subclass.
    positional : sequence of str
        Fields that may also be passed positionally after ``data`` (e.g. ``("weight",)``).

    Returns
    -------
    callable
        A decorator.

    Examples
    --------
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> @takes_params(TVParams, positional=("weight",))
    ... def smooth(data, params, *, device=None):
    ...     return params.weight
    >>> smooth(None, 0.5), smooth(None, params=TVParams(weight=0.2), weight=0.3)
    (0.5, 0.3)
    """
    from .params import Params

    positional = tuple(positional)
    names = params_cls.names()
    for name in positional:
        if name not in names:
            raise TypeError(f"{params_cls.__name__} has no parameter {name!r}")

    def decorate(impl: Callable[..., R]) -> Callable[..., R]:
        impl_signature = inspect.signature(impl)
        impl_parameters = list(impl_signature.parameters.values())
        runtime = [p for p in impl_parameters[2:] if p.kind is inspect.Parameter.KEYWORD_ONLY]
        runtime_names = {p.name for p in runtime}
        function = impl.__name__

        @functools.wraps(impl)
        def api(data: object, *args: object, params: Params | None = None, **kwargs: object) -> R:
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
            return impl(data, merge_call(params_cls, params, overrides, function), **kwargs)

        keyword = inspect.Parameter.KEYWORD_ONLY
        defaults = {info.name: info.default for info in params_cls.param_info()}
        api.__signature__ = impl_signature.replace(  # type: ignore[attr-defined]
            parameters=[
                impl_parameters[0].replace(kind=inspect.Parameter.POSITIONAL_ONLY),
                *(
                    inspect.Parameter(
                        n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[n]
                    )
                    for n in positional
                ),
                inspect.Parameter("params", keyword, default=None),
                *(
                    inspect.Parameter(n, keyword, default=d)
                    for n, d in defaults.items()
                    if n not in positional
                ),
                *runtime,
            ]
        )
        if api.__doc__ and "{params}" in api.__doc__:
            api.__doc__ = api.__doc__.replace("    {params}", params_docstring(params_cls))
        api.params_class = params_cls  # type: ignore[attr-defined]
        return api

    return decorate
