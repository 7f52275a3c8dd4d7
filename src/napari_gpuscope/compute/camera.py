"""The camera model shared by the noise estimators, the Poisson mode of the methods and the
sample data (pure Python: no torch, no NumPy)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

__all__ = ["CameraModel"]


@dataclass(frozen=True)
class CameraModel:
    """Camera noise model in ADU: ``x = gain * Poisson(lambda) + offset + N(0, read_noise^2)``.

    Attributes
    ----------
    gain : float
        ADU per photon (> 0).
    offset : float
        Camera offset (bias) in ADU.
    read_noise : float
        Standard deviation of the Gaussian read noise in ADU (>= 0).
    floor_variance : float or None
        The smallest noise variance the data can have (ADU^2); ``None`` (default) means
        ``read_noise**2``, the variance at zero photons. Below the level where the
        photon-transfer line reaches it, the generalized Anscombe transform continues along its
        tangent, which stabilises that (Gaussian) noise, instead of clipping at the square
        root's zero. A model fitted to one image (:func:`~napari_gpuscope.compute.noise.
        estimate_poisson_gaussian`) cannot tell read noise from offset and sets it to the
        variance of the darkest level it measured.

    Notes
    -----
    The generalized Anscombe transform and its inverses depend on ``offset`` and ``read_noise``
    only through ``beta = read_noise**2 - gain * offset`` (the intercept of the variance-vs-mean
    line), so two models with the same ``gain`` and ``beta`` transform identically (apart from
    where the inverse clips at zero photons).

    Examples
    --------
    >>> CameraModel(gain=2.0, offset=100.0, read_noise=3.0).beta
    -191.0
    """

    gain: float
    offset: float = 0.0
    read_noise: float = 0.0
    floor_variance: float | None = None

    def __post_init__(self) -> None:
        if self.floor_variance is not None:
            floor = self.floor_variance
            if isinstance(floor, bool) or not isinstance(floor, numbers.Real):
                raise ValueError(f"CameraModel.floor_variance must be a number, got {floor!r}")
            if not (math.isfinite(floor) and floor >= 0):
                raise ValueError(f"floor_variance must be >= 0 (ADU^2), got {floor!r}")
            object.__setattr__(self, "floor_variance", float(floor))
        for name in ("gain", "offset", "read_noise"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"CameraModel.{name} must be a number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if not (math.isfinite(self.gain) and self.gain > 0):
            raise ValueError(f"gain must be a positive number (ADU per photon), got {self.gain!r}")
        if not (math.isfinite(self.read_noise) and self.read_noise >= 0):
            raise ValueError(f"read_noise must be >= 0 (ADU), got {self.read_noise!r}")
        if not math.isfinite(self.offset):
            raise ValueError(f"offset must be a finite number (ADU), got {self.offset!r}")

    @property
    def beta(self) -> float:
        """Intercept of the photon-transfer line ``variance = gain * mean + beta`` (ADU^2)."""
        return self.read_noise**2 - self.gain * self.offset

    @property
    def knot(self) -> float:
        """Where the transform's square root ends: ``3/8 gain**2`` plus the floor variance
        (ADU^2, in the units of ``gain * x + 3/8 gain**2 + beta``)."""
        floor = self.read_noise**2 if self.floor_variance is None else self.floor_variance
        return 0.375 * self.gain**2 + floor
