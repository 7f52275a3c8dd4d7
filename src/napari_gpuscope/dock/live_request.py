"""What a dock asks a live session to run: the registered job, its parameters and inputs,
and what differs from the dock's offline run, in words (:func:`live_request`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_gpuscope import live

if TYPE_CHECKING:
    from napari_gpuscope.compute.params import Params

__all__ = [
    "FIT_AS_TILES_ARRIVE",
    "LIVE_METHODS",
    "FitAsTilesArrive",
    "LiveRequest",
    "live_request",
]

# One job per method unless a dock says otherwise: flat-field applies a profile, or fits one
# when given a FitAsTilesArrive.
_DEFAULT_JOB = {"flatfield": "apply"}
_LIVE_JOB = {method: _DEFAULT_JOB.get(method, job) for method, job in live.LIVE_JOBS}
LIVE_METHODS = frozenset(_LIVE_JOB)
"""The methods a dock can run live."""


@dataclass(frozen=True, eq=False)  # arrays: compared by identity, never element by element
class FitAsTilesArrive:
    """The flat-field dock's "fit the profile as tiles arrive" choice, with the fit's optional
    inputs: a measured ``(Y, X)`` dark frame and a ``(Y, X)`` mask of the pixels fitted on
    (the dock's "Dark frame" and "Fit on" layers; ``names`` name them in the notes).

    :data:`FIT_AS_TILES_ARRIVE` is the choice without either.

    Examples
    --------
    >>> import numpy as np
    >>> choice = FitAsTilesArrive(dark_frame=np.zeros((4, 4)), names={"dark_frame": "dark"})
    >>> sorted(choice.inputs())
    ['dark_frame']
    """

    dark_frame: np.ndarray | None = None
    fitting_weight: np.ndarray | None = None
    names: Mapping[str, str] = field(default_factory=dict)
    """The layers' names per input (missing: unnamed)."""

    def inputs(self) -> dict[str, np.ndarray]:
        """The fit job's inputs given, each checked to be one ``(Y, X)`` image (every tile of a
        scan is fitted with it, whatever the scan's length) and copied: a mask painted while
        the session runs does not change its later fits."""
        given = {"dark_frame": self.dark_frame, "fitting_weight": self.fitting_weight}
        inputs = {name: np.array(array) for name, array in given.items() if array is not None}
        for name, array in inputs.items():
            if array.ndim != 2:
                label = _INPUT_LABELS[name]
                layer = f" {self.names[name]!r}" if name in self.names else ""
                raise ValueError(
                    f"the live fit takes a (Y, X) {label}; the {label} layer{layer} has shape "
                    f"{array.shape}: choose a 2D layer (one image for every tile)"
                )
        return inputs

    def given(self) -> list[str]:
        """The names of the inputs given (nothing checked or copied)."""
        return [name for name in _INPUT_LABELS if getattr(self, name) is not None]

    def __repr__(self) -> str:
        return f"FitAsTilesArrive({', '.join(self.given())})"


_INPUT_LABELS = {"dark_frame": "dark frame", "fitting_weight": "mask (Fit on)"}

FIT_AS_TILES_ARRIVE = FitAsTilesArrive()
"""Given as flat-field's ``profile`` to :func:`live_request`: fit a BaSiC profile over the
tiles as they arrive (the fit job, refitted over every tile received so far) instead of
applying one. :class:`FitAsTilesArrive` adds a dark frame or a mask."""


@dataclass(frozen=True)
class LiveRequest:
    """What a dock asks a live session to run: a registered job with its parameters.

    Attributes
    ----------
    method_id, job_id : str
        The registered method and job (:data:`napari_gpuscope.live.LIVE_JOBS`).
    params : Params
        The job's parameters.
    inputs : Mapping
        The job's other inputs (flat-field's ``profile``).
    frames_per_stack : int or None
        Slices per z-stack when the unit of work is a stack (phase).
    notes : tuple of str
        What differs from the dock's offline run, in words (shown when the session starts).
    """

    method_id: str
    job_id: str
    params: Params
    inputs: Mapping[str, Any]
    frames_per_stack: int | None = None
    notes: tuple[str, ...] = ()


def live_request(
    method_id: str,
    params: Params,
    *,
    profile: object | None = None,
    frames_per_stack: int | None = None,
) -> LiveRequest:
    """The live job a dock of ``method_id`` runs with its ``params``.

    Raises ValueError, in words, when the method cannot run live or lacks an input: flat-field
    applies a fitted or loaded ``profile`` (or, given a :class:`FitAsTilesArrive` such as
    :data:`FIT_AS_TILES_ARRIVE`, fits one over the tiles as they arrive: the fit job, with its
    dark frame or mask if given, from :data:`~napari_gpuscope.live.MIN_TILES` tiles on, said
    in the notes); phase reconstructs z-stacks of ``frames_per_stack`` slices. eSRRF runs
    without drift correction and with consecutive time points (both need frames not acquired
    yet), and says so in :attr:`LiveRequest.notes`.

    Examples
    --------
    >>> from napari_gpuscope.compute.esrrf import EsrrfParams
    >>> request = live_request("esrrf", EsrrfParams(drift_correction=True))
    >>> request.job_id, request.params.drift_correction, request.notes
    ('run', False, ('drift correction is off live (it needs frames not acquired yet)',))
    >>> from napari_gpuscope.compute.flatfield import BasicParams
    >>> live_request("flatfield", BasicParams(), profile=FIT_AS_TILES_ARRIVE).job_id
    'fit'
    """
    if method_id not in _LIVE_JOB:
        raise ValueError(f"method {method_id!r} does not run live (live: {sorted(_LIVE_JOB)})")
    notes: list[str] = []
    inputs: dict[str, Any] = {}
    if method_id == "esrrf":
        if getattr(params, "drift_correction", False):
            params = params.replace(drift_correction=False)
            notes.append("drift correction is off live (it needs frames not acquired yet)")
        if getattr(params, "measure_resolution", False):
            params = params.replace(measure_resolution=False)
            notes.append(
                "the FRC resolution is not measured live (it reads every frame again); "
                "the decorrelation resolution is tracked below"
            )
        if getattr(params, "frame_gap", 0):
            params = params.replace(frame_gap=0)
            notes.append("time points are consecutive live (frame gap 0)")
    spacing = getattr(params, "spacing", None)
    if method_id == "tv" and spacing is not None and len(spacing) > 2:
        # The dock's spacing follows its input layer; a dock's live TV denoises each (Y, X)
        # frame (z-stacks live are for scripts: live.attach(..., frames_per_stack=Z)).
        params = params.replace(spacing=tuple(spacing[-2:]))
    job_id = _LIVE_JOB[method_id]
    if method_id == "flatfield":
        if getattr(params, "timelapse_baseline", False) and not isinstance(
            profile, FitAsTilesArrive
        ):
            params = params.replace(timelapse_baseline=False)
            notes.append(
                "each frame's baseline is not removed live (it is fitted over the whole stack)"
            )
        if isinstance(profile, FitAsTilesArrive):
            job_id = "fit"
            inputs.update(profile.inputs())
            notes.append(_fit_note(profile))
        elif profile is None:
            raise ValueError(
                "a live flat-field applies a profile: fit one or load one first, or choose "
                "to fit the profile as the tiles arrive"
            )
        else:
            inputs["profile"] = profile
    if method_id == "phase" and not frames_per_stack:
        raise ValueError("a live phase reconstructs z-stacks: give the slices per stack")
    stack = frames_per_stack if method_id == "phase" else None
    return LiveRequest(method_id, job_id, params, inputs, stack, tuple(notes))


def _fit_note(choice: FitAsTilesArrive) -> str:
    labels = {name: _INPUT_LABELS[name] for name in choice.given()}
    given = [
        f"{label} {choice.names[name]!r}" if name in choice.names else label
        for name, label in labels.items()
    ]
    taken = f", with the {' and the '.join(given)}" if given else ""
    return (
        f"the profile is fitted over all the tiles received so far{taken}, from "
        f"{live.MIN_TILES} tiles on, and again whenever new tiles came; Stop & keep keeps the "
        "last complete fit"
    )
