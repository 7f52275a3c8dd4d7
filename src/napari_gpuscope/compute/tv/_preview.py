"""TV's live preview: a quick solve of the displayed plane that smooths like a run.

For a volume it solves a thin slab around the displayed plane *in 3D* and shows the slab's centre
plane, because 2D TV on the plane alone would not match the 3D result of a full run. The weight
(or camera model) comes from the whole image, as in a run:
:func:`~napari_gpuscope.compute.tv.resolve_weight` (what a run does first, with the same checks)
runs in the preview's worker thread and is remembered per array (:class:`WholeImageWeights`).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

import numpy as np

from .._types import ArrayLike
from ..job_parts import mapped
from ..jobs import Job, Output, Progress
from ..preview import DataIdentity, PlaneView, PreviewResult
from ._job import OUTPUT, iter_denoise
from ._params import TVParams
from ._weight import ResolvedWeight, resolve_weight

__all__ = [
    "PREVIEW_HALF_SLAB",
    "PREVIEW_MAX_ITERATIONS",
    "PREVIEW_TOLERANCE",
    "TVPreview",
    "WholeImageWeights",
    "preview_job",
]

PREVIEW_MAX_ITERATIONS = 50
PREVIEW_TOLERANCE = 1e-2
PREVIEW_HALF_SLAB = 3
"""Planes on each side of the displayed one in a 3D preview slab (7 planes in total)."""


@dataclass(frozen=True)
class TVPreview(PreviewResult):
    """A TV preview: the slab's result (weight and noise level of the whole image), and
    whether the camera model was estimated (gain "auto")."""

    estimated_camera: bool = False


class WholeImageWeights:
    """:func:`~napari_gpuscope.compute.tv.resolve_weight` of a whole input, remembered.

    Only preview jobs (worker threads) use it; the lock keeps it consistent should two ever
    overlap. The key is the array itself, held weakly (a deleted layer's volume must not stay
    in memory for this) and checked against a sample of its values (an array edited in place
    is estimated again: :class:`~napari_gpuscope.compute.preview.DataIdentity`), and the
    parameters that decide the estimate. The strength is not one
    of them: it scales the weight (``TVParams``: weight = strength x noise sigma, or strength
    in Poisson mode), so moving the strength slider estimates nothing again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: DataIdentity | None = None
        self._known: dict[TVParams, ResolvedWeight] = {}

    @staticmethod
    def _key(params: TVParams) -> TVParams:
        """``params`` at strength 1, without what only the solver uses."""
        return TVParams(
            weight=params.weight,
            noise_model=params.noise_model,
            gain=params.gain,
            offset=params.offset,
            read_noise=params.read_noise,
            channel_axis=params.channel_axis,
        )

    def _lookup(self, data: ArrayLike, key: TVParams) -> ResolvedWeight | None:
        same = self._data is not None and self._data.matches(data)
        return self._known.get(key) if same else None

    def known(self, data: ArrayLike, params: TVParams) -> bool:
        """Whether :meth:`resolve` would answer without reading the image."""
        with self._lock:
            return self._lookup(data, self._key(params)) is not None

    def resolve(self, data: ArrayLike, params: TVParams) -> ResolvedWeight:
        """The weight, noise level and camera model a run on ``data`` would use."""
        key = self._key(params)
        with self._lock:
            unit = self._lookup(data, key)
        if unit is None:
            unit = resolve_weight(data, key)  # reads the image: outside the lock
            with self._lock:
                if self._data is None or not self._data.matches(data):
                    self._known = {}
                    self._data = DataIdentity(data)
                if self._data.alive:
                    self._known[key] = unit
        if params.weight is not None:
            return unit
        return dataclasses.replace(unit, weight=params.strength * unit.weight)


def _estimate_message(params: TVParams) -> str | None:
    """What resolving the weight estimates from the whole image, in words (None: nothing)."""
    if params.noise_model == "poisson":
        if params.gain is None:
            return "estimating the camera gain, offset and read noise from the whole image"
        return None
    return "estimating the noise level of the whole image" if params.weight is None else None


def preview_job(
    weights: WholeImageWeights, data: ArrayLike, params: TVParams, device: str, view: PlaneView
) -> Job[TVPreview]:
    """A small-budget TV solve of a slab around the displayed plane, smoothing like a run: the
    weight (or camera model) of the whole image comes from ``weights``, in the worker thread."""
    # Everything below runs in the worker thread (the first line on the first resume).
    message = _estimate_message(params)
    if message is not None and not weights.known(data, params):
        yield Progress(None, message)
    resolved = weights.resolve(data, params)
    fixed: dict[str, object] = {"weight": resolved.weight}  # so the slab smooths like a run
    camera = resolved.camera
    if camera is not None:  # also passed whole below: the fields cannot carry its floor
        fixed.update(gain=camera.gain, offset=camera.offset, read_noise=camera.read_noise)
    slab = view.slab(params.spacing or (1.0,) * len(view.shape), PREVIEW_HALF_SLAB)
    image = np.ascontiguousarray(np.asarray(data[slab.selection]))  # a few planes only
    quick = params.replace(
        **fixed,
        spacing=slab.spacing,
        max_iterations=min(PREVIEW_MAX_ITERATIONS, params.max_iterations),
        tolerance=max(PREVIEW_TOLERANCE, params.tolerance),
    )

    def to_plane(update: Progress) -> Progress:
        output = update.outputs.get(OUTPUT)
        if output is None or output.region is not None:
            return dataclasses.replace(update, outputs={})

        def plane() -> np.ndarray:
            return output.array()[slab.centre]

        return dataclasses.replace(update, outputs={OUTPUT: Output(plane)})

    result = yield from mapped(
        iter_denoise(image, params=quick, device=device, camera=camera), to_plane
    )
    # The weight is strength x the noise level of the whole image, as the result says.
    result = dataclasses.replace(result, noise_sigma=resolved.noise_sigma)
    in_3d = len(slab.spacing) > 2  # coupled to the planes around it
    note = f"displayed plane ({'3D slab, ' if in_3d else ''}at most {quick.max_iterations} "
    note += "iterations)"
    planes = {OUTPUT: np.asarray(result.image)[slab.centre]}
    return TVPreview(result, planes, note, estimated_camera=params.gain is None)
