"""Phase in batch runs: the optics are built once per worker process and reused per position.

The batch runner (:mod:`napari_gpuscope.batch`) calls :func:`job` for every position
(``MethodSpec.batch`` names this module). It is the registry's job as the dock runs it: the
reconstruction uses this process's optics cache of its device
(:func:`~._optics.shared_cache`, keyed by the optics: shape, pixel sizes, NAs, wavelength,
z positions, angles), so the pupils and transfer functions are built on the worker's device
for the first position and reused for the rest (a tilt estimated per position changes only
the angle part, which the cache keys separately).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._types import ArrayLike
from ..jobs import Job
from ._params import PhaseParams

if TYPE_CHECKING:  # imported when used: validate and recipe load these hooks without torch
    from ._result import PhaseResult

__all__ = ["job"]


def job(
    data: ArrayLike,
    params: PhaseParams,
    *,
    prepared: Any,
    device: str,
    cache_key: str,
) -> Job[PhaseResult]:
    """Reconstruct one position: the registry's job, with the process's optics cache."""
    from ._job import iter_reconstruct

    del prepared, cache_key  # nothing is prepared per run; the optics are keyed by themselves
    return iter_reconstruct(data, params, device=device)
