"""Phase in batch runs: the optics are built once per worker process and reused per position.

The batch runner (:mod:`napari_gpuscope.batch`) calls :func:`job` for every position with the
recipe hash as ``cache_key`` (``MethodSpec.batch`` names this module). Every position of a run
shares the optics (shape, pixel sizes, NAs, wavelength), so a worker keeps one
:class:`~._optics.OpticsCache` per recipe: the pupils and transfer functions are built on its
device for the first position and reused for the rest (a tilt estimated per position changes
only the angle part, which the cache keys separately).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..jobs import Job
from ._params import PhaseParams

if TYPE_CHECKING:  # imported when used: validate and recipe load these hooks without torch
    from ._job import PhaseResult
    from ._optics import OpticsCache

__all__ = ["KEPT_RECIPES", "job", "optics_cache"]

KEPT_RECIPES = 2
"""Recipes whose optics a worker keeps (a worker serves one run at a time; two spans a switch)."""

_CACHES: OrderedDict[str, OpticsCache] = OrderedDict()
_LOCK = threading.Lock()


def optics_cache(cache_key: str) -> OpticsCache:
    """This process's optics cache for the recipe ``cache_key`` (made on first use).

    Examples
    --------
    >>> optics_cache("recipe-a") is optics_cache("recipe-a")
    True
    """
    from ._optics import OpticsCache

    with _LOCK:
        cache = _CACHES.get(cache_key)
        if cache is None:
            cache = _CACHES[cache_key] = OpticsCache()
            while len(_CACHES) > KEPT_RECIPES:
                _CACHES.popitem(last=False)
        _CACHES.move_to_end(cache_key)
        return cache


def job(
    data: Any,
    params: PhaseParams,
    *,
    prepared: Any,
    device: str,
    cache_key: str,
) -> Job[PhaseResult]:
    """Reconstruct one position with the worker's optics for this recipe."""
    from ._job import iter_reconstruct

    del prepared  # nothing is prepared once per run: the optics are per worker (per device)
    return iter_reconstruct(data, params, optics_cache=optics_cache(cache_key), device=device)
