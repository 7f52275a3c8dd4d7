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
from typing import Any

import numpy as np

__all__ = ["PROVENANCE_KEY", "build_provenance", "provenance_json", "software_versions"]

PROVENANCE_KEY = "napari_gpuscope"


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


def _jsonable(value: Any) -> Any:
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
    parameters: Mapping[str, Any],
    *,
    device: str,
    input_name: str | None,
    elapsed_seconds: float,
    result: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
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


def provenance_json(record: Mapping[str, Any] | list[Any], *, indent: int | None = None) -> str:
    """Serialise a provenance record (or a list of them) to JSON."""
    return json.dumps(_jsonable(record), indent=indent, sort_keys=True)
