"""What each method does with the frames of a live session, through the registry's jobs only.

- TV (``tv``, job ``denoise``): every frame (or z-stack, ``frames_per_stack``) denoised by the
  registry's job. With ``weight=None`` the weight (and Poisson mode's camera model) is resolved
  once, on the first frame (:func:`~napari_gpuscope.compute.tv.resolve_weight`, exactly what the
  job does when it starts) and held for the session, so every frame is smoothed the same.
- Flat-field (``flatfield``, job ``apply``): a saved profile applied to each frame by the
  registry's apply job (``measure_shading=False``, as batch runs: the shading statistics need
  the whole stack).
- Flat-field (``flatfield``, job ``fit``): a BaSiC profile refitted by the registry's fit job
  over every tile received so far, from :data:`~._live_fit.MIN_TILES` tiles, the next fit
  starting with every tile received by then (:mod:`._live_fit`); ``max_frames`` caps the tiles
  kept.
- Phase (``phase``, job ``reconstruct``): each z-stack reconstructed by the registry's job as
  soon as its last frame is kept (``frames_per_stack``); ``result()`` is the latest stack's.
- eSRRF (``esrrf``, job ``run``): the registry's job reads the frames as they arrive through a
  stack whose reads wait for them (:class:`~._live_esrrf._GrowingStack`), in chunks of the
  frames in hand (up to the job's chunk size, cut at each measurement and drift block), into its
  online temporal statistics: a cumulative reconstruction (``frames_per_timepoint=0``)
  or a new time point every N frames (``frames_per_timepoint=N``); the session's end sends the
  job ``STOP``, which returns the time points over the frames analysed.

Each runs in the session's worker thread (:meth:`LiveMethod.run`). The per-frame methods (TV,
flat-field's apply, phase) are :mod:`._per_frame`, eSRRF :mod:`._live_esrrf`, the flat-field
fit :mod:`._live_fit`, and what a session sees of
any method :mod:`._live_method`; this module picks one for a registered job (:func:`live_method`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..methods import method
from ._live_esrrf import LiveEsrrf
from ._live_fit import LiveFit
from ._live_method import Control, LiveMethod
from ._per_frame import LiveApply, LivePhase, LiveTV

if TYPE_CHECKING:
    from ..compute._types import Device
    from ..compute.params import Params

__all__ = ["LIVE_JOBS", "Control", "LiveMethod", "live_method"]


_CLASSES: dict[tuple[str, str], type[LiveMethod]] = {
    ("tv", "denoise"): LiveTV,
    ("flatfield", "apply"): LiveApply,
    ("flatfield", "fit"): LiveFit,
    ("esrrf", "run"): LiveEsrrf,
    ("phase", "reconstruct"): LivePhase,
}

LIVE_JOBS = frozenset(_CLASSES)
"""The (method, job) pairs a live session runs."""


def live_method(
    method_id: str,
    job_id: str | None,
    params: Params | Mapping[str, Any] | None,
    *,
    device: Device,
    inputs: Mapping[str, Any],
    max_frames: int | None = None,
    frames_per_stack: int | None = None,
) -> LiveMethod:
    """The live form of a registered job, its parameters validated now."""
    spec = method(method_id)
    job = spec.job_spec(job_id)
    key = (spec.id, job.id)
    if key not in _CLASSES:
        raise ValueError(
            f"{spec.title}'s job {job.id!r} does not run live yet; live jobs: "
            + ", ".join(f"{m} {j}" for m, j in sorted(LIVE_JOBS))
        )
    params_class = job.params_class()
    if params is None:
        params = params_class()
    elif isinstance(params, Mapping):
        params = params_class(**params)
    elif not isinstance(params, params_class):
        raise TypeError(f"params must be a {params_class.__name__}, got {type(params).__name__}")
    missing = [name for name in job.needs if name not in inputs]
    if missing:
        raise ValueError(f"{spec.title}'s job {job.id!r} needs {missing} (give them as keywords)")
    # The live fit takes its job's optional inputs too (a dark frame, a (Y, X) mask).
    optional = set(job.accepts) if _CLASSES.get(key) is LiveFit else set()
    unknown = sorted(set(inputs) - set(job.needs) - optional)
    if unknown:
        raise TypeError(f"{spec.title}'s live job {job.id!r} takes no {unknown}")
    cls = _CLASSES[key]
    if cls is LivePhase and frames_per_stack is None:
        raise ValueError("a live phase reconstructs z-stacks: give frames_per_stack (slices)")
    if cls is LiveEsrrf and frames_per_stack not in (None, 1):
        raise ValueError("a live eSRRF takes single frames, not z-stacks (frames_per_stack)")
    if cls is LiveFit and frames_per_stack not in (None, 1):
        raise ValueError(
            "a live flat-field fit takes single tiles, not z-stacks (frames_per_stack)"
        )
    if cls in (LiveEsrrf, LiveFit) and max_frames is not None:
        live = cls(job, params, device, inputs, max_frames=max_frames)
    else:
        live = cls(job, params, device, inputs)
    live.unit = frames_per_stack or 1
    return live
