"""Provenance records: what produced a result, with which parameters, on which hardware.

Pure Python (no Qt, no napari): the widgets store the record in
``layer.metadata[PROVENANCE_KEY]``; the exporters embed it in PNG text chunks, JSON sidecars
and TIFF descriptions; the headless demo writes it next to its results.

Every value a run chose from the data (phase's regularization and TV strength, TV denoising's
weight from the measured noise, eSRRF's drift block length) is named in one place: a result
that made such choices has ``automatic_choices() -> dict[str, str]`` (:class:`AutomaticChoices`;
name -> value with its unit) and puts the same mapping in its ``summary()`` under
``"automatic"``; :func:`build_provenance` records it under the record's top-level key
:data:`AUTOMATIC_KEY`, which the figure caption and the batch report read.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .compute._types import JSONDict, JSONValue

import numpy as np

__all__ = [
    "AUTOMATIC_KEY",
    "PROVENANCE_KEY",
    "AutomaticChoices",
    "automatic_choices",
    "build_provenance",
    "is_result",
    "provenance_json",
    "provenance_of",
    "software_versions",
]

PROVENANCE_KEY = "napari_gpuscope"
AUTOMATIC_KEY = "automatic"
"""Key of a record's automatic choices, and of a result summary's (a dict of str to str)."""


@runtime_checkable
class AutomaticChoices(Protocol):
    """A result that chose values from the data says which, and what they came to.

    Examples
    --------
    >>> class Result:
    ...     def automatic_choices(self) -> dict[str, str]:
    ...         return {"drift block length": "24 frames"}
    >>> isinstance(Result(), AutomaticChoices)
    True
    """

    def automatic_choices(self) -> dict[str, str]:
        """Name -> value with its unit, e.g. ``{"regularization": "0.0093"}``; empty when
        every value was given."""
        ...


def automatic_choices(result: object) -> dict[str, str]:
    """The automatic choices of a result object or of its ``summary()`` mapping.

    From a mapping: its ``"automatic"`` entry and those of the sub-results it nests one level
    down (eSRRF's summary holds its drift estimate's under ``"drift"``); a choice named twice
    keeps the outer value.

    Examples
    --------
    >>> automatic_choices({"automatic": {"regularization": "0.0093"}, "iterations": 3})
    {'regularization': '0.0093'}
    >>> automatic_choices({"drift": {"automatic": {"drift block length": "24 frames"}}})
    {'drift block length': '24 frames'}
    >>> automatic_choices(object())
    {}
    """
    if isinstance(result, AutomaticChoices):
        return {str(k): str(v) for k, v in result.automatic_choices().items()}
    if not isinstance(result, Mapping):
        return {}
    found: dict[str, str] = {}
    for value in result.values():
        if isinstance(value, Mapping) and isinstance(value.get(AUTOMATIC_KEY), Mapping):
            found.update({str(k): str(v) for k, v in value[AUTOMATIC_KEY].items()})
    own = result.get(AUTOMATIC_KEY)
    if isinstance(own, Mapping):
        found.update({str(k): str(v) for k, v in own.items()})
    return found


def provenance_of(layer: object) -> JSONDict | list[JSONValue] | None:
    """The provenance record a layer carries in ``metadata[PROVENANCE_KEY]``, else ``None``.

    Parameters
    ----------
    layer : napari.layers.Layer
        Any object with a ``metadata`` mapping.

    Returns
    -------
    dict or list or None
        The record (a list when a layer combines several results).

    Examples
    --------
    >>> from types import SimpleNamespace as Layer
    >>> provenance_of(Layer(metadata={PROVENANCE_KEY: {"method": "tv"}}))
    {'method': 'tv'}
    >>> provenance_of(Layer(metadata={PROVENANCE_KEY: "not a record"})) is None
    True
    """
    record = (getattr(layer, "metadata", None) or {}).get(PROVENANCE_KEY)
    return record if isinstance(record, dict | list) else None


def is_result(layer: object) -> bool:
    """Whether ``layer`` is a result: it carries a provenance record.

    The figure export lists the provenance of the visible result layers, "Save result as TIFF"
    prefers a selected result, and a result's intensity unit follows its record to its input.

    Examples
    --------
    >>> from types import SimpleNamespace as Layer
    >>> is_result(Layer(metadata={PROVENANCE_KEY: {"method": "tv"}})), is_result(Layer(metadata={}))
    (True, False)
    """
    return provenance_of(layer) is not None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def software_versions() -> dict[str, str | None]:
    """Versions of the packages that determine a result (``None`` when not installed)."""
    cupy = next((v for d in ("cupy-cuda12x", "cupy-cuda13x", "cupy") if (v := _version(d))), None)
    return {
        "napari-gpuscope": _version("napari-gpuscope"),
        "torch": _version("torch"),
        "cupy": cupy,
        "numpy": _version("numpy"),
    }


def _jsonable(value: object) -> JSONValue:
    """Convert numpy scalars/arrays, tuples and non-finite floats into plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def build_provenance(
    method: str,
    parameters: Mapping[str, object],
    *,
    device: str,
    input_name: str | None,
    elapsed_seconds: float,
    result: Mapping[str, object] | None = None,
    automatic: Mapping[str, str] | None = None,
) -> JSONDict:
    """Assemble a provenance record.

    Parameters
    ----------
    method : str
        Method id, e.g. ``"tv"``.
    parameters : Mapping
        The parameters exactly as passed to the compute function.
    device : str
        Device description, e.g. ``"cuda:0 (NVIDIA RTX 4090)"``.
    input_name : str or None
        Name of the input layer (or file).
    elapsed_seconds : float
        Wall-clock run time.
    result : Mapping, optional
        Method-specific facts about the run (iterations, final gap, estimated noise...).
    automatic : Mapping, optional
        The values chosen from the data (name -> value with unit); default: those ``result``
        names (:func:`automatic_choices`).

    Returns
    -------
    dict
        JSON-serialisable record; ``"automatic"`` (:data:`AUTOMATIC_KEY`) always holds the
        automatic choices, empty when every value was given.

    Examples
    --------
    >>> record = build_provenance("phase", {"regularization": None}, device="cpu",
    ...     input_name="stack", elapsed_seconds=1.0,
    ...     result={"automatic": {"regularization": "0.0093"}})
    >>> record["automatic"]
    {'regularization': '0.0093'}
    """
    chosen = automatic_choices(result or {}) if automatic is None else dict(automatic)
    return _jsonable(
        {
            "method": method,
            "parameters": dict(parameters),
            "result": dict(result or {}),
            AUTOMATIC_KEY: {str(k): str(v) for k, v in chosen.items()},
            "input": input_name,
            "device": device,
            "software": software_versions(),
            "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "elapsed_seconds": round(float(elapsed_seconds), 4),
        }
    )


def provenance_json(
    record: Mapping[str, object] | list[JSONValue], *, indent: int | None = None
) -> str:
    """Serialise a provenance record (or a list of them) to JSON."""
    return json.dumps(_jsonable(record), indent=indent, sort_keys=True)
