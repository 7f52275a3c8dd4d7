"""The recipe types of the registry's jobs and their union, selected by ``method`` and ``job``.

One idea: from the registry (:data:`napari_gpuscope.methods.METHODS`, read when called, so a
method registered at run time has its recipes), one recipe type per job of every method, made
from a base recipe model (:class:`napari_gpuscope.batch.recipes.Recipe`): its ``method`` and
``job`` are literals and its ``params`` is the job's params model, so validating a recipe
validates the parameters. Their discriminated union validates a recipe's data as its job's type
(:func:`validate`) and is what the JSON Schema describes; :func:`explain` words pydantic's
errors as ``key.path: what is wrong``. The base is passed in, so this module imports no recipe
model (the model imports it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    PlainSerializer,
    Tag,
    TypeAdapter,
    ValidationError,
    create_model,
)

from napari_gpuscope.methods import METHODS, JobSpec, MethodSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic.fields import FieldInfo

    from napari_gpuscope.compute.params import Params

__all__ = ["explain", "job_recipe_types", "job_recipe_union", "validate"]


def _name(*ids: str) -> str:
    return "".join(part.capitalize() for i in ids for part in i.split("_"))


def _params_field(params_class: type[Params]) -> tuple[object, FieldInfo]:
    """The ``params`` field of a job's recipe type: validated by the job's model, held (and
    written) as the model's dict."""

    def known_names(value: object) -> object:
        if isinstance(value, Mapping):
            params_class._check_names(value)  # "TVParams has no parameter(s) [...]"
            return params_class.with_older_defaults(value)  # an older recipe keeps its values
        return value

    annotated = Annotated[
        params_class,
        BeforeValidator(known_names),
        AfterValidator(lambda model: model.to_dict()),
        PlainSerializer(dict, return_type=dict[str, Any]),
    ]
    older = [  # a field whose default changed: its absence means the older one
        f"{info.name} absent is {info.older_default!r}, as in recipes saved before its "
        "default changed"
        for info in params_class.param_info()
        if info.absent_value != info.default
    ]
    exceptions = f"; but {'; '.join(older)}" if older else ""
    description = (
        f"Parameters of {params_class.__name__} (absent ones take their defaults{exceptions})."
    )
    return (annotated, Field(default_factory=dict, validate_default=True, description=description))


@functools.cache
def _recipe_type(spec: MethodSpec, job: JobSpec, base: type[BaseModel]) -> type[BaseModel]:
    main = job.id == spec.jobs[0].id
    job_type: Any = Literal[job.id]
    job_field = (
        (job_type | None, Field(None, description=f"{job.title}; absent: this, the main job."))
        if main
        else (job_type, Field(description=job.title))
    )
    return create_model(
        _name(spec.id, job.id, "recipe"),
        __base__=base,
        __module__=base.__module__,
        __doc__=f"A recipe of {spec.title}: {job.title}. {job.description}".strip(),
        method=(Literal[spec.id], Field(description=spec.title)),
        job=job_field,
        params=_params_field(job.params_class()),
    )


def job_recipe_types(base: type[BaseModel]) -> dict[tuple[str, str], type[BaseModel]]:
    """The recipe type of every job of every registered method, by ``(method, job)``: a
    subclass of ``base`` whose ``method`` and ``job`` are literals and whose ``params`` is the
    job's params model."""
    return {(s.id, j.id): _recipe_type(s, j, base) for s in METHODS.values() for j in s.jobs}


def _tag(value: object) -> str:
    """The recipe type a recipe's data selects: ``"method:job"``, or ``""`` (none)."""
    get = value.get if isinstance(value, Mapping) else lambda key: getattr(value, key, None)
    spec = METHODS.get(get("method")) if isinstance(get("method"), str) else None
    job = get("job")
    if spec is None or not (job is None or job in spec.job_ids):
        return ""
    return f"{spec.id}:{job or spec.jobs[0].id}"


def job_recipe_union(base: type[BaseModel], *, fallback: bool = False) -> object:
    """The union of :func:`job_recipe_types`, selected by ``method`` and ``job``.

    ``fallback`` adds ``base`` itself for data that selects none (a missing or unknown method
    or job), so that validation reports what is wrong with it.
    """
    members = [Annotated[t, Tag(f"{m}:{j}")] for (m, j), t in job_recipe_types(base).items()]
    if fallback:
        members.append(Annotated[base, Tag("")])
    return Annotated[Union[tuple(members)], Discriminator(_tag)]  # noqa: UP007


def _registry_key() -> tuple[tuple[MethodSpec, ...], ...]:
    return (tuple(METHODS.values()),)


@functools.cache
def _validator(
    key: tuple[tuple[MethodSpec, ...], ...], base: type[BaseModel]
) -> Callable[[object], BaseModel]:
    return TypeAdapter(job_recipe_union(base, fallback=True)).validate_python


def validate(base: type[BaseModel], data: Mapping[str, object]) -> BaseModel:
    """Validate ``data`` as the recipe type its ``method`` and ``job`` select (``base`` when
    they select none); raises pydantic's :class:`~pydantic.ValidationError`
    (:func:`explain` words it)."""
    return _validator(_registry_key(), base)(data)


def explain(exc: ValidationError) -> str:
    """pydantic's errors as ``key.path: what is wrong`` lines (without the union's tag)."""
    lines = []
    for error in exc.errors():
        loc = error["loc"]
        if loc and isinstance(loc[0], str) and (loc[0] == "" or ":" in loc[0]):
            loc = loc[1:]
        key = ".".join(str(part) for part in loc) or "(top level)"
        kind = error["type"]
        if kind == "extra_forbidden":
            lines.append(f"{key}: unknown key")
        elif kind == "missing":
            lines.append(f"{key}: required key missing")
        elif kind == "value_error":
            message = str(error.get("ctx", {}).get("error", error["msg"]))
            if loc[:1] == ("params",):
                lines.append(_param_message(message))
            elif loc:
                lines.append(f"{key}: {message}")
            else:
                lines.append(message)
        else:
            lines.append(f"{key}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(lines)


def _param_message(text: str) -> str:
    """``"params.weight: TVParams.weight must be..."`` from a ParameterError message;
    ``"params: TVParams: ..."`` for a rule between fields that names none."""
    head = text.split(" ", 1)[0]
    if "." in head:  # "TVParams.weight" -> the key is "weight"
        return f"params.{head.split('.', 1)[1]}: {text}"
    if "no parameter(s) [" in text:
        names = text.split("no parameter(s) [", 1)[1].split("]", 1)[0]
        keys = ", ".join(n.strip().strip("'") for n in names.split(","))
        return f"params.{keys}: {text}"
    return f"params: {text}"
