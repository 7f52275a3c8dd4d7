"""What a TV job checks and derives from its input before solving: the weight and the noise."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import arrays
from .._types import ArrayLike
from ..arrays import ANY_IMAGE, InvalidInputError, validate_image
from ..camera import CameraModel
from ..noise import estimate_noise_sigma, estimate_poisson_gaussian
from ..params import ParameterError
from ._params import TVParams
from ._scale import DataScale, ScaledView

__all__ = ["ResolvedWeight", "check_input", "noise_sigma", "resolve_weight"]


@dataclass(frozen=True)
class ResolvedWeight:
    """The weight a TV job solves with, and what it was derived from.

    Attributes
    ----------
    weight : float
        TV weight in the input's intensity units (Anscombe units in Poisson mode).
    noise_sigma : float or None
        The noise level estimated from the image (Gaussian model with a strength), else None.
    camera : CameraModel or None
        Poisson mode's camera model: as given, or estimated from the image.
    """

    weight: float
    noise_sigma: float | None = None
    camera: CameraModel | None = None


def check_input(image: ArrayLike, params: TVParams) -> tuple[int | None, tuple[float, ...]]:
    """Shape checks that need both the image and the parameters; returns the channel axis (a
    non-negative index, or None) and one spacing weight per non-channel axis."""
    # A channel axis comes on top of an image, a volume or a time-lapse, at any place.
    layouts = ANY_IMAGE + tuple("C" + layout for layout in ANY_IMAGE)
    validate_image(
        image,
        layouts=layouts if params.channel_axis is not None else ANY_IMAGE,
        check_values=False,
    )
    ndim = len(image.shape)
    channel = params.channel_axis
    if channel is not None:
        if not -ndim <= channel < ndim:
            raise ParameterError(
                f"TVParams.channel_axis={channel} is out of range for an image with {ndim} "
                "dimensions"
            )
        channel %= ndim
        if ndim - 1 < 2:
            raise InvalidInputError(
                f"image has {ndim - 1} non-channel dimension(s); expected 2 to 4 besides the "
                "channel axis"
            )
    n_spatial = ndim - (channel is not None)
    spacing = params.spacing if params.spacing is not None else (1.0,) * n_spatial
    if len(spacing) != n_spatial:
        raise ParameterError(
            f"TVParams.spacing must have one weight per non-channel axis ({n_spatial} for an "
            f"image of shape {tuple(image.shape)}), got {len(spacing)}: {spacing!r}"
        )
    return channel, spacing


def resolve_weight(
    image: ArrayLike,
    params: TVParams,
    *,
    value_range: tuple[float, float] | None = None,
    camera: CameraModel | None = None,
) -> ResolvedWeight:
    """The weight :func:`~napari_gpuscope.compute.tv.iter_denoise` will solve ``image`` with.

    Exactly what the job does when it starts: an absolute ``weight`` is used as it is; Poisson
    mode uses the camera given in ``params`` or estimates it from the image, and its weight is
    the strength (the variance-stabilised noise has unit standard deviation); the Gaussian model
    with a strength estimates the noise level (Immerkaer's estimate, on data scaled to magnitude
    ~1 so that any units work) and multiplies it by the strength.

    Parameters
    ----------
    image : array-like
        As for :func:`~napari_gpuscope.compute.tv.iter_denoise` (never modified).
    params : TVParams
        The parameters.
    value_range : tuple of float, optional
        :func:`~napari_gpuscope.compute.arrays.value_range` of the image if already known, to
        save a pass over it (read when the noise or the camera is estimated: it refuses NaN
        and infinity, and scales the data for the noise estimate).
    camera : CameraModel, optional
        Poisson mode's camera model when already known in full (overrides ``params``).

    Returns
    -------
    ResolvedWeight
        The weight, the noise level and the camera model; equal to the job's
        ``TVResult.weight``, ``noise_sigma`` and ``camera``.

    Raises
    ------
    InvalidInputError
        For an unusable image, an image that looks noise-free (a strength relative to its noise
        is undefined), or a camera model that cannot be estimated from it.
    ParameterError
        When the parameters do not fit the image (channel axis, spacing).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute import tv
    >>> noisy = np.random.default_rng(0).normal(0.5, 0.1, (128, 128)).astype(np.float32)
    >>> resolved = tv.resolve_weight(noisy, tv.TVParams(strength=2.0))
    >>> round(resolved.noise_sigma, 2), resolved.weight == 2.0 * resolved.noise_sigma
    (0.1, True)
    >>> tv.resolve_weight(noisy, tv.TVParams(weight=0.05))
    ResolvedWeight(weight=0.05, noise_sigma=None, camera=None)
    """
    check_input(image, params)
    poisson = params.noise_model == "poisson"
    estimates = poisson and params.gain is None and camera is None
    reads_data = estimates or (params.weight is None and not poisson)
    if reads_data and value_range is None:
        value_range = arrays.value_range(image)  # refuses NaN and infinity, with their place
    camera = (camera if poisson else None) if camera is not None else _camera(image, params)
    if params.weight is not None:
        return ResolvedWeight(params.weight, None, camera)
    if poisson:
        return ResolvedWeight(params.strength, None, camera)
    low, high = value_range
    sigma = noise_sigma(image, DataScale.for_data(low, high, image.dtype, None, "image"))
    if not (math.isfinite(sigma) and sigma > 0):
        raise InvalidInputError(
            f"the noise level estimated from the image is {sigma:g}: it looks noise-free (or "
            "constant), so a strength relative to the noise is undefined. Pass an absolute "
            "weight instead."
        )
    return ResolvedWeight(params.strength * sigma, sigma, None)


def noise_sigma(image: ArrayLike, scale: DataScale) -> float:
    """Immerkaer's estimate in the input's units, computed on the scaled data (float32-safe)."""
    view = image if scale.factor == 1.0 else ScaledView(image, scale.factor)
    try:
        return estimate_noise_sigma(view) / scale.factor
    except ValueError as exc:
        raise InvalidInputError(
            f"cannot estimate the noise level of this image ({exc}); pass an absolute weight "
            "instead of a strength"
        ) from None


def _camera(image: ArrayLike, params: TVParams) -> CameraModel | None:
    """Poisson mode's camera model: as given, or estimated from (a subsample of) the image."""
    if params.noise_model != "poisson":
        return None
    if params.gain is not None:
        return CameraModel(params.gain, params.offset or 0.0, params.read_noise or 0.0)
    camera = estimate_poisson_gaussian(image)
    values = (camera.gain, camera.offset, camera.read_noise)
    if not all(math.isfinite(v) for v in values) or camera.gain <= 0:
        raise InvalidInputError(
            f"the camera model estimated from the image is not usable ({camera}); pass the "
            "camera's gain (and offset, read noise) or use the Gaussian noise model"
        )
    return camera
