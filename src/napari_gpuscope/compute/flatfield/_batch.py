"""BaSiC in batch runs: fit one profile for the whole experiment, then correct every position.

The batch runner (:mod:`napari_gpuscope.batch`) calls :func:`prepare` once per run and
:func:`job` once per position (``MethodSpec.batch`` names this module). Shading belongs to the
microscope, not to one tile, so the profile is fitted on the frames of *all* positions together
(read lazily, a few at a time, through the fit's working-size reader) or taken from a saved
profile the recipe names as its ``profile`` artifact; each position is then corrected with it by
the apply job (:func:`~._apply.iter_apply_profile`) with the recipe's apply fields
(``output_dtype``, ``clip_negative``, ``timelapse_baseline``), which is what the dock's Apply
does with the same parameters.

The hooks the runner looks up by name are all here: the artifacts' names and checks come from
:mod:`._batch_artifacts`, the screening and lazy reading of the positions from
:mod:`._batch_positions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._types import ArrayLike
from ..jobs import Job
from ._batch_artifacts import (
    DARK_FRAME_ARTIFACT,
    FIT_ARTIFACTS,
    PROFILE_ARTIFACT,
    WEIGHT_ARTIFACT,
    check_artifact,
    check_params,
    check_profile,
    read_image_artifact,
    replaces_fit,
)
from ._batch_positions import _lazy_frames, screen
from ._params import BasicParams
from ._profile import ShadingProfile

if TYPE_CHECKING:  # imported when used: validate and recipe load these hooks without torch
    from ._apply import CorrectionResult

__all__ = [
    "DARK_FRAME_ARTIFACT",
    "FIT_ARTIFACTS",
    "PROFILE_ARTIFACT",
    "WEIGHT_ARTIFACT",
    "ApplyHooks",
    "CorrectedPosition",  # noqa: F822 (module __getattr__)
    "apply_hooks",
    "check_artifact",
    "check_params",
    "check_profile",
    "job",
    "prepare",
    "read_image_artifact",
    "replaces_fit",
    "screen",
]


def __getattr__(name: str) -> Any:
    # CorrectedPosition: the result of one position (the name it had before the apply job
    # existed), the apply job's result, imported (with torch) when used.
    if name == "CorrectedPosition":
        from ._apply import CorrectionResult

        return CorrectionResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def prepare(
    params: BasicParams,
    tiles: Sequence[Callable[[], Any]],
    *,
    device: str,
    artifacts: Mapping[str, Path],
) -> ShadingProfile:
    """The run's profile: the recipe's saved ``profile`` artifact, else a fit on all positions.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.sample_data._shading import shaded_tiles
    >>> tiles = shaded_tiles(24, (64, 64), seed=0).images
    >>> profile = prepare(BasicParams(), [lambda t=t: t for t in tiles], device="cpu",
    ...                   artifacts={})
    >>> profile.flatfield.shape, round(float(profile.flatfield.mean()), 3)
    ((64, 64), 1.0)
    """
    if PROFILE_ARTIFACT in artifacts:
        return ShadingProfile.load(artifacts[PROFILE_ARTIFACT])
    check_params(params, list(artifacts))
    if not tiles:
        raise ValueError("flat-field batch: no positions to fit a profile on")
    from ..arrays import InvalidInputError
    from ._fit import broadcast_weight, fit_basic

    frames = _lazy_frames(tiles, params.batch_axis)
    inputs: dict[str, Any] = {}
    for name in (DARK_FRAME_ARTIFACT, WEIGHT_ARTIFACT):
        if name in artifacts:
            inputs[name] = read_image_artifact(name, artifacts[name])
    if DARK_FRAME_ARTIFACT in inputs and inputs[DARK_FRAME_ARTIFACT].shape != frames.shape[-2:]:
        raise ValueError(
            f"artifact {DARK_FRAME_ARTIFACT!r} ({Path(artifacts[DARK_FRAME_ARTIFACT]).name}): "
            f"shape {inputs[DARK_FRAME_ARTIFACT].shape}; the positions' frames are (Y, X) = "
            f"{tuple(frames.shape[-2:])}"
        )
    if WEIGHT_ARTIFACT in inputs:
        try:
            inputs[WEIGHT_ARTIFACT] = broadcast_weight(
                inputs[WEIGHT_ARTIFACT],
                frames.shape,
                name=f"artifact {WEIGHT_ARTIFACT!r} ({Path(artifacts[WEIGHT_ARTIFACT]).name})",
            )
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None
    return fit_basic(frames, params, device=device, **inputs)


def job(
    data: ArrayLike,
    params: BasicParams,
    *,
    prepared: ShadingProfile,
    device: str,
    cache_key: str,
) -> Job[CorrectionResult]:
    """Correct one position with the run's profile and the recipe's apply fields, and measure
    the shading left, as the dock's Apply does (a 4D position along the recipe's
    ``batch_axis``; ``cache_key`` is not needed here).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> profile = ShadingProfile.from_arrays(np.ones((4, 4)), camera_offset=100)
    >>> tile = np.full((4, 4), 90, np.uint16)
    >>> params = BasicParams(output_dtype="same", clip_negative=True)
    >>> result = run_job(job(tile, params, prepared=profile, device="cpu", cache_key=""))
    >>> result.image.dtype, int(result.image.max())
    (dtype('uint16'), 0)
    """
    from ._apply import iter_apply_profile

    del cache_key
    batch_axis = params.batch_axis if len(np.shape(data)) == 4 else None
    return iter_apply_profile(data, prepared, params, batch_axis=batch_axis, device=device)


class ApplyHooks:
    """The apply job's batch hooks: every position corrected with the recipe's saved profile.

    Unlike the fit job, nothing is fitted: a recipe of ``job: apply`` without a ``profile``
    artifact fails before any position is read.

    Examples
    --------
    >>> apply_hooks.prepare(BasicParams(), [], device="cpu", artifacts={})
    Traceback (most recent call last):
    ...
    ValueError: flat-field apply: the recipe names no 'profile' artifact ...
    """

    @staticmethod
    def prepare(
        params: BasicParams,
        tiles: Sequence[Callable[[], Any]],
        *,
        device: str,
        artifacts: Mapping[str, Path],
    ) -> ShadingProfile:
        """The recipe's saved profile (``--artifact profile=PATH``)."""
        del params, tiles, device
        if PROFILE_ARTIFACT not in artifacts:
            raise ValueError(
                f"flat-field apply: the recipe names no {PROFILE_ARTIFACT!r} artifact (a profile "
                f"saved from the dock or by ShadingProfile.save); add one with --artifact "
                f"{PROFILE_ARTIFACT}=PATH, or use the fit job"
            )
        return ShadingProfile.load(artifacts[PROFILE_ARTIFACT])

    @staticmethod
    def check_artifact(name: str, path: Path) -> list[Path]:
        """Only a ``profile`` (:func:`check_profile`)."""
        if name != PROFILE_ARTIFACT:
            raise ValueError(f"flat-field takes only a {PROFILE_ARTIFACT!r} artifact, not {name!r}")
        return check_profile(name, path)

    job = staticmethod(job)


apply_hooks = ApplyHooks()
"""The apply job's hooks (``JobSpec.batch`` of flat-field's ``apply``)."""
