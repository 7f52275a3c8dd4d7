"""BaSiC in batch runs: fit one profile for the whole experiment, then correct every position.

The batch runner (:mod:`napari_gpuscope.batch`) calls :func:`prepare` once per run and
:func:`job` once per position (``MethodSpec.batch`` names this module). Shading belongs to the
microscope, not to one tile, so the profile is fitted on the frames of *all* positions together
(read lazily, a few at a time, through the fit's working-size reader) or taken from a saved
profile the recipe names as its ``profile`` artifact; each position is then corrected with it by
the apply job (:func:`~._apply.iter_apply_profile`) with the recipe's apply fields
(``output_dtype``, ``clip_negative``, ``timelapse_baseline``), which is what the dock's Apply
does with the same parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._types import ArrayLike
from ..jobs import Job
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
    "job",
    "prepare",
    "screen",
]

PROFILE_ARTIFACT = "profile"
"""Recipe artifact name of a saved profile (``ShadingProfile.save``) that replaces the fit."""

DARK_FRAME_ARTIFACT = "dark_frame"
"""Recipe artifact name of a measured dark frame, a ``(Y, X)`` TIFF: the fit's ``dark_frame``
(the dock's "Dark frame" layer)."""

WEIGHT_ARTIFACT = "fitting_weight"
"""Recipe artifact name of a background mask TIFF: the fit's ``fitting_weight`` (pixels > 0
are fitted; the dock's "Fit on" Labels layer), ``(Y, X)`` or the fitted stack's shape."""

FIT_ARTIFACTS = (PROFILE_ARTIFACT, DARK_FRAME_ARTIFACT, WEIGHT_ARTIFACT)
"""The artifacts the fit job takes (``JobSpec.accepts``); all optional."""


def __getattr__(name: str) -> Any:
    # CorrectedPosition: the result of one position (the name it had before the apply job
    # existed), the apply job's result, imported (with torch) when used.
    if name == "CorrectedPosition":
        from ._apply import CorrectionResult

        return CorrectionResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _ranks(batch_axis: int | None) -> tuple[int, ...]:
    """The position ranks a fit takes: tiles and stacks, and 4D with an independent axis."""
    return (2, 3) if batch_axis is None else (2, 3, 4)


def _lazy_frames(tiles: Sequence[Callable[[], Any]], batch_axis: int | None = None) -> Any:
    """All positions' frames as one lazy Dask array (a position is read when the fit's reader
    reaches its frames, and never kept): ``(T, Y, X)``, or for 4D positions with
    ``batch_axis`` the positions' frames joined along the other leading axis, so each
    independent problem (a channel, a z-plane) is fitted on every position's frames of it, as
    the dock fits one 4D layer."""
    import dask
    import dask.array as da

    first = np.asarray(tiles[0]())
    if first.ndim not in _ranks(batch_axis):
        four = "" if batch_axis is None else f", or 4D with the independent axis {batch_axis}"
        raise ValueError(
            f"flat-field batch: positions must be (Y, X) tiles or (T, Y, X) stacks{four}, the "
            f"first has shape {first.shape}"
        )

    def read(reader: Callable[[], Any]) -> np.ndarray:
        array = np.asarray(reader())
        if array.shape != first.shape:
            raise ValueError(
                f"flat-field batch: every position must have the first's shape {first.shape} "
                f"to share one profile; one has {array.shape}"
            )
        return array

    parts = [
        da.from_delayed(dask.delayed(read)(reader), first.shape, first.dtype) for reader in tiles
    ]
    if first.ndim == 2:
        return da.stack(parts)
    return da.concatenate(parts, axis=0 if first.ndim == 3 else 1 - int(batch_axis or 0))


def screen(params: BasicParams, tiles: Sequence[Callable[[], Any]]) -> dict[int, str]:
    """Positions that must not enter the fit, by index, with the reason.

    Every position is read once (and let go) before the fit: one that cannot be read, is not a
    ``(Y, X)`` tile or ``(T, Y, X)`` stack (or 4D, with the recipe's ``batch_axis``), holds NaN
    or infinite pixels, or has another shape than most positions (ties: the first's) would sink
    the fit of all of them; the batch run
    leaves it out of the fit and fails it with this reason, and the others are fitted and
    corrected as if it were absent.

    Examples
    --------
    >>> import numpy as np
    >>> good = np.ones((4, 4), np.float32)
    >>> nan = good.copy(); nan[1, 2] = np.nan
    >>> bad = screen(BasicParams(), [lambda: good, lambda: nan, lambda: good[:3], lambda: good])
    >>> for index, reason in bad.items():
    ...     print(index, reason)
    1 contains 1 NaN or infinite pixel(s) (first at (1, 2))
    2 shape (3, 4), most positions have (4, 4): one profile needs one shape
    """
    from collections import Counter

    ranks = _ranks(params.batch_axis)
    bad: dict[int, str] = {}
    shapes: dict[int, tuple[int, ...]] = {}
    for index, reader in enumerate(tiles):
        try:
            array = np.asarray(reader())
        except Exception as exc:
            bad[index] = f"unreadable: {type(exc).__name__}: {exc}"
            continue
        if array.ndim not in ranks or array.size == 0:
            what = "" if params.batch_axis is None else " or a 4D stack"
            bad[index] = f"shape {array.shape}: not a (Y, X) tile or a (T, Y, X) stack{what}"
        elif not (
            np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
        ):
            bad[index] = f"dtype {array.dtype}: not an image of numbers"
        elif np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            where = np.argwhere(~np.isfinite(array))
            bad[index] = (
                f"contains {len(where)} NaN or infinite pixel(s) (first at "
                f"{tuple(int(i) for i in where[0])})"
            )
        else:
            shapes[index] = array.shape
        del array
    if shapes:
        common = Counter(shapes.values()).most_common(1)[0][0]
        for index, shape in shapes.items():
            if shape != common:
                bad[index] = (
                    f"shape {shape}, most positions have {common}: one profile needs one shape"
                )
    return dict(sorted(bad.items()))


def read_image_artifact(name: str, path: Path) -> np.ndarray:
    """The pixels of a dark-frame or mask artifact (a TIFF), refused with the artifact's name
    and what would be valid when it is not a finite image of numbers of the right rank.

    Examples
    --------
    >>> import pathlib, tempfile, tifffile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> tifffile.imwrite(folder / "dark.tif", np.zeros((2, 3, 4), np.uint16))
    >>> read_image_artifact("dark_frame", folder / "dark.tif")
    Traceback (most recent call last):
    ...
    ValueError: artifact 'dark_frame' (dark.tif): shape (2, 3, 4); a dark frame is one (Y, X) image
    """
    import tifffile

    path = Path(path)
    what = f"artifact {name!r} ({path.name})"
    try:
        array = np.asarray(tifffile.imread(path))
    except Exception as exc:
        raise ValueError(
            f"{what}: not a readable TIFF image ({type(exc).__name__}: {exc})"
        ) from None
    numeric = np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    if not numeric and array.dtype != bool:
        raise ValueError(f"{what}: dtype {array.dtype} is not an image of numbers")
    if name == DARK_FRAME_ARTIFACT and array.ndim != 2:
        raise ValueError(f"{what}: shape {array.shape}; a dark frame is one (Y, X) image")
    if name == WEIGHT_ARTIFACT and array.ndim not in (2, 3):
        raise ValueError(
            f"{what}: shape {array.shape}; a mask is (Y, X) (one for every image) or "
            f"(T, Y, X) (the fitted stack's shape)"
        )
    if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        raise ValueError(f"{what}: contains NaN or infinite values")
    return array


def check_params(params: BasicParams, artifacts: Sequence[str]) -> None:
    """Refuse a fit recipe whose artifacts contradict its parameters (called when a recipe is
    made and before a run prepares): a dark frame is the darkfield, so it excludes
    ``get_darkfield`` and ``camera_offset``.

    Examples
    --------
    >>> check_params(BasicParams(get_darkfield=True), ["dark_frame"])
    Traceback (most recent call last):
    ...
    ValueError: artifact 'dark_frame' cannot be combined with get_darkfield=True: ...
    """
    if DARK_FRAME_ARTIFACT not in artifacts:
        return
    conflicts = []
    if params.get_darkfield:
        conflicts.append("get_darkfield=True")
    if params.camera_offset is not None:
        conflicts.append(f"camera_offset={params.camera_offset:g}")
    if conflicts:
        raise ValueError(
            f"artifact {DARK_FRAME_ARTIFACT!r} cannot be combined with {' and '.join(conflicts)}: "
            f"the dark frame is the darkfield; valid: a dark frame with get_darkfield=false and "
            f"camera_offset=null, or no {DARK_FRAME_ARTIFACT!r} artifact"
        )


def replaces_fit(names: set[str]) -> bool:
    """Whether these artifacts replace the fit (a saved profile does: the positions are then
    not screened); a dark frame or a mask is an input of the fit."""
    return PROFILE_ARTIFACT in names


def check_artifact(name: str, path: Path) -> list[Path]:
    """Check a fit recipe's artifact when the recipe is made; returns the other files it
    consists of (pinned in the recipe with it).

    ``profile`` is checked by :func:`check_profile`; ``dark_frame`` must be a ``(Y, X)``
    TIFF and ``fitting_weight`` a ``(Y, X)`` or ``(T, Y, X)`` TIFF of finite numbers
    (:func:`read_image_artifact`); both are one file.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> text = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
    >>> _ = text.write_text("hello")
    >>> check_artifact("dark", text)
    Traceback (most recent call last):
    ...
    ValueError: flat-field's fit takes the artifacts 'profile', 'dark_frame', ... not 'dark'
    """
    if name in (DARK_FRAME_ARTIFACT, WEIGHT_ARTIFACT):
        read_image_artifact(name, path)
        return []
    if name != PROFILE_ARTIFACT:
        raise ValueError(
            f"flat-field's fit takes the artifacts {', '.join(map(repr, FIT_ARTIFACTS))}, not "
            f"{name!r}"
        )
    return check_profile(name, path)


def check_profile(name: str, path: Path) -> list[Path]:
    """Check a recipe's ``profile`` artifact when the recipe is made; returns the other files
    it consists of (pinned in the recipe with it).

    The ``profile`` must load as a :class:`ShadingProfile` (``ShadingProfile.save``'s TIFF
    and its JSON sidecar, which is returned: both are pinned by their SHA-256).

    Raises
    ------
    ValueError
        Another artifact name, or a file that is not a saved profile (the reason says why).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> text = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
    >>> _ = text.write_text("hello")
    >>> check_profile("profile", text)
    Traceback (most recent call last):
    ...
    ValueError: not a shading profile saved from the dock or by ShadingProfile.save ...
    """
    if name != PROFILE_ARTIFACT:
        raise ValueError(f"flat-field takes only a {PROFILE_ARTIFACT!r} artifact, not {name!r}")
    path = Path(path)
    if path.suffix.lower() not in (".tif", ".tiff", ".json"):
        raise ValueError(
            f"not a shading profile saved from the dock or by ShadingProfile.save (give its "
            f".tif; got {path.name!r})"
        )
    try:
        ShadingProfile.load(path)
    except Exception as exc:
        raise ValueError(
            f"not a shading profile saved from the dock or by ShadingProfile.save "
            f"({type(exc).__name__}: {exc})"
        ) from None
    sidecar = path.with_suffix(".json")
    if path.suffix.lower() == ".json":  # given the sidecar: the TIFF it names is the other file
        import json

        return [path.parent / json.loads(path.read_text())["tiff"]]
    return [sidecar]


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
