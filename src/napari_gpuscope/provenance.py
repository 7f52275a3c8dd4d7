"""Provenance records: what produced a result, with which parameters, on which hardware.

Pure Python (no Qt, no napari): the widgets store the record in
``layer.metadata[PROVENANCE_KEY]``; the exporters embed it in PNG text chunks, JSON sidecars
and TIFF descriptions; the headless demo writes it next to its results.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .compute._types import JSONDict, JSONValue

import numpy as np

__all__ = [
    "PROVENANCE_KEY",
    "build_provenance",
    "is_result",
    "provenance_json",
    "provenance_of",
    "software_versions",
]

PROVENANCE_KEY = "napari_gpuscope"


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

    Returns
    -------
    dict
        JSON-serialisable record.
    """
    return _jsonable(
        {
            "method": method,
            "parameters": dict(parameters),
            "result": dict(result or {}),
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
