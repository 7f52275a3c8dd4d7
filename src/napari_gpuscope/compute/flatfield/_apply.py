"""The apply job: correct images with a profile, then measure the shading left.

Applying a profile is flat-field's second job (the fit is the first). Its options are fields of
:class:`BasicParams` (:data:`~._params.APPLY_FIELDS`: ``output_dtype``, ``clip_negative``,
``timelapse_baseline``), so the dock's Apply, a script and a batch run read the same model and
give the same image. The result follows the result protocol (:mod:`napari_gpuscope.compute.
results`): its ``layers()`` are the corrected layer, its ``summary()`` the provenance facts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..jobs import Job, Progress, blocking
from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ..signatures import merge_call
from ._correct import iter_correct
from ._params import APPLY_FIELDS, BasicParams
from ._profile import ShadingProfile

__all__ = [
    "CorrectionResult",
    "ShadingStats",
    "apply_profile",
    "centre_lines",
    "iter_apply_profile",
    "shading_stats",
]


def centre_lines(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The centre row and column of ``image / image.mean()``, each averaged over a band of
    1/20 of the image (a single line is noisy).

    Examples
    --------
    >>> import numpy as np
    >>> row, column = centre_lines(np.arange(1.0, 5.0)[None].repeat(3, axis=0))
    >>> row.tolist(), column.tolist()
    ([0.4, 0.8, 1.2, 1.6], [1.2, 1.2, 1.2])
    """
    normalised = image / image.mean()
    y, x = normalised.shape
    band_y, band_x = max(1, y // 20), max(1, x // 20)
    row = normalised[y // 2 - band_y // 2 : y // 2 + band_y // 2 + 1].mean(axis=0)
    column = normalised[:, x // 2 - band_x // 2 : x // 2 + band_x // 2 + 1].mean(axis=1)
    return row, column


@dataclass(frozen=True)
class ShadingStats:
    """How flat a stack is: the shading of its mean image and each frame's mean.

    Attributes
    ----------
    row, column : numpy.ndarray
        float64 centre lines of the normalised mean image (:func:`centre_lines`): 1 everywhere
        for a flat stack.
    cv : float
        Coefficient of variation (std / |mean|) of the mean image; NaN when its mean is 0.
    frame_means : numpy.ndarray
        float64 ``(T,)``: each frame's mean (the baseline plot).
    """

    row: np.ndarray
    column: np.ndarray
    cv: float
    frame_means: np.ndarray


def _frame_means(stack: ArrayLike) -> np.ndarray:
    return np.array([np.asarray(stack[t], dtype=np.float64).mean() for t in range(stack.shape[0])])


def shading_stats(stack: ArrayLike) -> ShadingStats:
    """Mean image, its centre lines, coefficient of variation and per-frame means of a
    ``(T, Y, X)`` stack (float64 sums, frame by frame: a memmap is never loaded whole).

    Examples
    --------
    >>> import numpy as np
    >>> stats = shading_stats(np.stack([np.full((4, 4), 2.0), np.full((4, 4), 4.0)]))
    >>> stats.cv, stats.frame_means.tolist()
    (0.0, [2.0, 4.0])
    """
    total = np.zeros(stack.shape[-2:], dtype=np.float64)
    frame_means = np.empty(stack.shape[0], dtype=np.float64)
    for t in range(stack.shape[0]):
        frame = np.asarray(stack[t], dtype=np.float64)
        total += frame
        frame_means[t] = frame.mean()
    mean_image = total / stack.shape[0]
    row, column = centre_lines(mean_image)
    cv = float(mean_image.std() / abs(mean_image.mean())) if mean_image.mean() else float("nan")
    return ShadingStats(row, column, cv, frame_means)


@dataclass(frozen=True)
class CorrectionResult:
    """Images corrected with a shading profile, and the shading before and after (result
    protocol).

    Attributes
    ----------
    image : array-like
        The corrected images, the input's shape: ``(image - darkfield) / flatfield`` (minus each
        frame's baseline with ``timelapse_baseline``), of type ``params.output_dtype`` (``out``
        when one was given).
    profile : ShadingProfile
        The profile applied.
    params : BasicParams
        The parameters whose apply fields (:data:`APPLY_FIELDS`) were used.
    before, after : ShadingStats or None
        The shading of ``image - darkfield`` and of ``(image - darkfield) / flatfield`` (also in
        timelapse mode: subtracting each frame's baseline moves the mean image towards 0, which
        says nothing about flatness); ``after.frame_means`` are those of the output. None when
        not measured (batch runs).
    stopped_early : bool
        Always False: a correction is not stopped and kept.
    """

    image: Any
    profile: ShadingProfile
    params: BasicParams = dataclasses.field(default_factory=BasicParams)
    before: ShadingStats | None = None
    after: ShadingStats | None = None
    stopped_early: bool = False

    @property
    def options(self) -> dict[str, Any]:
        """The apply fields of :attr:`params`, by name (what the correction was asked to do)."""
        return {name: getattr(self.params, name) for name in APPLY_FIELDS}

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance: the options, the output type, the profile's facts,
        the corrected range (in-memory outputs) and the shading's CV before and after."""
        facts: dict[str, Any] = {
            **self.options,
            "dtype": str(np.dtype(self.image.dtype)),
            "profile": self.profile.summary(),
        }
        if isinstance(self.image, np.ndarray) and self.image.size:
            facts["corrected_range"] = [
                float(np.nanmin(self.image)),
                float(np.nanmax(self.image)),
            ]
        if self.before is not None and self.after is not None:
            facts["shading_cv_before"] = self.before.cv
            facts["shading_cv_after"] = self.after.cv
        facts["stopped_early"] = bool(self.stopped_early)
        return facts

    def describe(self) -> str:
        """One line in plain words, e.g. ``"corrected 24 images: shading of the mean image
        (CV) 0.180 -> 0.012"``."""
        shape = tuple(self.image.shape)
        count = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
        what = f"corrected {count} image{'' if count == 1 else 's'}"
        done = []
        if self.params.timelapse_baseline:
            done.append("each frame's baseline removed")
        if self.params.clip_negative:
            done.append("negative values clipped at 0")
        if self.params.output_dtype != "float32":
            done.append(f"written as {np.dtype(self.image.dtype)}")
        extra = f" ({', '.join(done)})" if done else ""
        if self.before is not None and self.after is not None:
            return (
                f"{what}: shading of the mean image (CV) {self.before.cv:.3f} -> "
                f"{self.after.cv:.3f}{extra}"
            )
        return f"{what} with a profile ({self.profile.describe()}){extra}"

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """The corrected images as one layer, ``"flat-field corrected · <name>"``, in the
        input's geometry (no colormap or contrast limits: a viewer shows it like its input, e.g.
        the demo figure on the input's display range; the dock's Apply displays it from its
        percentiles, :func:`display_limits`)."""
        return [
            image_layer(
                self.image,
                result_name("flat-field corrected", name),
                geometry,
                metadata=metadata,
            )
        ]


DISPLAY_PERCENTILES = (0.5, 99.5)
"""The corrected layer's display range: a few hot pixels or a dark tile corner must not turn
the corrected tiles nearly black, as napari's min-max range did (59-5537 on the sample)."""
_DISPLAY_SAMPLE = 1 << 22


def display_limits(image: Any) -> tuple[float, float] | None:
    """The 0.5th and 99.5th percentiles of ``image``'s finite values (of every k-th value
    beyond 4 Mi of them, so a large stack costs one strided read), or None when the image is
    not in memory (a zarr output), empty, or constant.

    Examples
    --------
    >>> import numpy as np
    >>> image = np.arange(1001, dtype=np.float32)
    >>> image[0] = 1e6  # one hot pixel does not set the range
    >>> display_limits(image)
    (6.0, 996.0)
    """
    if not isinstance(image, np.ndarray) or image.size == 0:
        return None
    values = image.reshape(-1)[:: max(1, image.size // _DISPLAY_SAMPLE)]
    values = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if values.size == 0:
        return None
    low, high = (float(v) for v in np.percentile(values, DISPLAY_PERCENTILES))
    return (low, high) if high > low else None


class _Frames:
    """``(stack - dark) [/ flat]`` frame by frame, in float64 (nothing is kept)."""

    def __init__(self, stack: ArrayLike, dark: np.ndarray, flat: np.ndarray | None) -> None:
        self.stack, self.dark, self.flat, self.shape = stack, dark, flat, stack.shape

    def __getitem__(self, t: int) -> np.ndarray:
        frame = np.asarray(self.stack[t], dtype=np.float64) - self.dark
        return frame if self.flat is None else frame / self.flat


def iter_apply_profile(
    images: ArrayLike,
    profile: ShadingProfile,
    params: BasicParams | None = None,
    *,
    measure_shading: bool = True,
    out: Any = None,
    batch_axis: int | None = None,
    chunk_frames: int | None = None,
    device: str | torch.device | None = None,
    **options: Any,
) -> Job[CorrectionResult]:
    """Apply a shading profile as a job: correct, then measure the shading left.

    The correction is :func:`iter_correct` with the apply fields of ``params``; the inputs are
    checked when this is called (a wrong size, timelapse on one image: ``ValueError`` at once),
    the work happens when the job runs.

    Parameters
    ----------
    images : array-like
        ``(T, Y, X)`` or ``(Y, X)``, or 4D with ``batch_axis``; read chunk by chunk, never
        modified.
    profile : ShadingProfile
        Fitted (:func:`fit_basic`) or loaded (:meth:`ShadingProfile.load`).
    params : BasicParams, optional
        Its ``output_dtype``, ``clip_negative`` and ``timelapse_baseline`` are used (default:
        float32, negatives kept, no baseline removed); the fit's fields are not.
    measure_shading : bool
        Measure the shading before and after (:class:`ShadingStats`: three more passes over
        the images on the host, in float64), as the dock's Apply and batch runs do; live runs
        skip it.
    out : array-like, optional
        Where to write (a ``numpy.memmap``, a zarr array); default a new NumPy array.
    batch_axis : int, optional
        4D input: the axis of independent problems.
    chunk_frames : int, optional
        Frames per device chunk (default: planned from free memory); the result does not
        depend on it.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` when named.
    **options
        Apply fields given as keywords (``output_dtype="uint16"``...): they override
        ``params``.

    Returns
    -------
    generator
        Yields progress per chunk, returns a :class:`CorrectionResult`.

    Raises
    ------
    InvalidInputError
        Images and profile of different sizes, timelapse on a single image, unsupported types.
    ParameterError
        An invalid option value.
    TypeError
        A keyword that is not an apply field.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.flatfield import ShadingProfile, apply_profile
    >>> flat = np.full((8, 8), 2.0); flat[:, :4] = 1.0
    >>> profile = ShadingProfile.from_arrays(flat, camera_offset=10)
    >>> images = 10 + 6.4 * flat[None] / flat.mean() * np.ones((3, 1, 1))
    >>> result = apply_profile(images, profile, output_dtype="uint16", device="cpu")
    >>> result.image.dtype, int(result.image.max()), round(result.after.cv, 6)
    (dtype('uint16'), 6, 0.0)
    >>> result.describe()
    'corrected 3 images: shading of the mean image (CV) 0.333 -> 0.000 (written as uint16)'
    """
    unknown = sorted(set(options) - set(APPLY_FIELDS))
    if unknown:
        raise TypeError(
            f"iter_apply_profile() got unexpected keyword argument(s) {unknown}; the apply "
            f"fields are {list(APPLY_FIELDS)}"
        )
    params = merge_call(BasicParams, params, options, "iter_apply_profile")
    correction = iter_correct(
        images,
        profile,
        timelapse=params.timelapse_baseline,
        clip=params.clip_negative,
        dtype=params.output_dtype,
        out=out,
        batch_axis=batch_axis,
        chunk_frames=chunk_frames,
        device=device,
    )
    return _run(images, profile, params, correction, measure_shading)


def _run(
    images: ArrayLike,
    profile: ShadingProfile,
    params: BasicParams,
    correction: Job[Any],
    measure_shading: bool,
) -> Job[CorrectionResult]:
    corrected = yield from correction
    if not measure_shading:
        return CorrectionResult(corrected, profile, params)
    yield Progress(None, "measuring the shading left")
    stack = corrected if corrected.ndim == 3 else corrected.reshape(-1, *corrected.shape[-2:])
    source = images if getattr(images, "ndim", 3) == 3 else np.asarray(images).reshape(stack.shape)
    dark = np.asarray(profile.darkfield, dtype=np.float64)
    flat = np.asarray(profile.flatfield, dtype=np.float64)
    if dark.ndim == 3:  # several problems: the first one's profile shows the idea
        dark, flat = dark[0], flat[0]
    before = shading_stats(_Frames(source, dark, None))
    after = shading_stats(_Frames(source, dark, flat))
    # The frame means (the baseline plot) are those of the output.
    after = dataclasses.replace(after, frame_means=_frame_means(stack))
    return CorrectionResult(corrected, profile, params, before, after)


apply_profile = blocking(iter_apply_profile)
apply_profile.__doc__ = """Apply a shading profile (blocking :func:`iter_apply_profile`).

Returns
-------
CorrectionResult

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.flatfield import BasicParams, ShadingProfile, apply_profile
>>> profile = ShadingProfile.from_arrays(np.ones((4, 4)), camera_offset=3)
>>> result = apply_profile(np.zeros((2, 4, 4)), profile, BasicParams(clip_negative=True),
...                        measure_shading=False, device="cpu")
>>> float(result.image.min()), result.before is None
(0.0, True)
"""
