"""The artifacts a flat-field recipe may name (a saved profile, a dark frame, a fitting mask):
their names, and the checks run when a recipe is made and before a run reads them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._params import BasicParams
from ._profile import ShadingProfile

__all__ = [
    "DARK_FRAME_ARTIFACT",
    "FIT_ARTIFACTS",
    "PROFILE_ARTIFACT",
    "WEIGHT_ARTIFACT",
    "check_artifact",
    "check_params",
    "check_profile",
    "read_image_artifact",
    "replaces_fit",
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
