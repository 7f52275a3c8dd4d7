"""Intensity scaling: every solve runs on data of magnitude ~1, whatever the input's units.

ROF is scale-equivariant: ``ROF(c f, c w) = c ROF(f, w)`` for ``c > 0`` (with a box ``[0, inf)``
too). The solvers work in float32, where squares of values beyond ~1.8e19 overflow and squares
below ~1e-19 underflow, so data in exotic units (``1e30``, or ``1e-25``) used to give NaN images
reported as converged, or energies of exactly 0 read as "solved". Here the data is multiplied
by a power of two ``c`` that brings ``max |f|`` into ``[0.5, 1)`` and the weight by the same
``c``; a power of two changes no bit of the solution (every float operation commutes with it,
barring overflow or underflow, which is the point), so scikit-image parity is kept.

What cannot be represented is refused with the reason: the result is float32 in the input's
units, so data beyond float32's range (float64 ``1e39``), or entirely below its smallest normal
number, has no float32 result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError
from ..camera import CameraModel
from ..noise import anscombe_forward
from ._params import FLOAT32_MAX

if TYPE_CHECKING:
    from types import EllipsisType

    import numpy.typing as npt

__all__ = [
    "NEGLIGIBLE_WEIGHT",
    "WEIGHT_CAP",
    "DataScale",
    "ScaledView",
    "unscale",
]

FLOAT32_TINY = float(np.finfo(np.float32).tiny)
# float64 data this far from 1 is scaled on the host before the float32 conversion, which would
# overflow or lose it in subnormals; other data is converted first and scaled on the device.
_HOST_SCALE_ABOVE = 2.0**100
_HOST_SCALE_BELOW = 2.0**-100

NEGLIGIBLE_WEIGHT = 2.0**-100
"""Scaled weights below this (relative to ``max |f| ~ 1``) cannot move any value by a float32
step: the ROF solution ``u*`` satisfies ``|u* - f| <= |div y*| <= 2 w sum(s_a) <= 2e-26``. The
input is returned as its own solution (the solvers would need ``tau / w`` beyond float32)."""

WEIGHT_CAP = 2.0**60
"""Scaled weights above this give the same solution as the cap itself: the constant
``max(mean f, lo)`` per problem. Proof: with ``|f| < 1`` the constant is optimal as soon as some
``y`` with ``|y_i| <= w`` has ``div y = mean - f``; routing the imbalance (at most ``2N``)
along a spanning tree of the grid needs ``|y_i| <= 2 N sqrt(d) / min(s_a) <= 4.4e16`` for
``N <= 2^40`` voxels, ``d <= 4`` and ``s_a >= 1e-4``, below the cap."""


@dataclass(frozen=True)
class DataScale:
    """How the data is brought to magnitude ~1 before solving.

    Attributes
    ----------
    factor : float
        Power of two ``c``: the solver sees ``c * f`` (``c * A(x)`` in Poisson mode, ``A`` the
        Anscombe transform) and ``c * weight``.
    on_host : bool
        Multiply in float64 on the host before the float32 conversion (float64 data far from
        float32's comfortable range), instead of on the device after it.
    """

    factor: float = 1.0
    on_host: bool = False

    @staticmethod
    def for_data(
        low: float,
        high: float,
        dtype: np.dtype | torch.dtype,
        camera: CameraModel | None,
        name: str,
    ) -> DataScale:
        """The scale for data in ``[low, high]`` of ``dtype`` (NumPy or torch); refuses data
        float32 cannot represent."""
        largest = max(abs(low), abs(high))
        if largest > FLOAT32_MAX:
            raise InvalidInputError(
                f"{name} holds values up to {largest:.3g}, beyond float32's range "
                f"(+-{FLOAT32_MAX:.3g}); the result is float32 in the input's units, so it "
                "cannot hold them. Divide the data (and an absolute weight) by a constant, "
                "e.g. 1e30, first."
            )
        if 0 < largest < FLOAT32_TINY:
            raise InvalidInputError(
                f"{name} holds only values below {largest:.3g}, under float32's smallest normal "
                f"number ({FLOAT32_TINY:.3g}); the result is float32 in the input's units, so "
                "it cannot hold them. Multiply the data (and an absolute weight) by a "
                "constant, e.g. 1e30, first."
            )
        on_host = _wider_than_float32(dtype)
        on_host = on_host and not _HOST_SCALE_BELOW <= largest <= _HOST_SCALE_ABOVE
        if camera is not None:
            if on_host:
                raise InvalidInputError(
                    f"{name} holds values up to {largest:.3g} (ADU): far outside what a camera "
                    "records, and beyond the Poisson model's float32 arithmetic. Use the "
                    "Gaussian noise model for data in other units."
                )
            bounds = anscombe_forward(torch.tensor([low, high], dtype=torch.float64), camera)
            largest = float(bounds.abs().max())
        return DataScale(_power_of_two_below(largest), on_host)

    def weight(self, weight: float) -> float:
        """The weight the solver uses: ``c * weight``, capped at :data:`WEIGHT_CAP`."""
        return min(self.factor * weight, WEIGHT_CAP)


def _wider_than_float32(dtype: np.dtype | torch.dtype) -> bool:
    """Whether a float dtype (NumPy or torch) holds values float32 cannot."""
    if isinstance(dtype, torch.dtype):
        return dtype.is_floating_point and dtype.itemsize > 4
    dtype = np.dtype(dtype)
    return dtype.kind == "f" and dtype.itemsize > 4


def _power_of_two_below(largest: float) -> float:
    """``2^-e`` with ``largest * 2^-e`` in ``[0.5, 1)`` (1 for 0)."""
    if largest == 0 or not math.isfinite(largest):
        return 1.0
    _, exponent = math.frexp(largest)
    return math.ldexp(1.0, -exponent)


class ScaledView:
    """Read-only view of an array multiplied by a power of two, in float64, region by region.

    Lets :func:`~napari_gpuscope.compute.arrays.to_device` and the noise estimators read data
    that float32 could not hold as it is.
    """

    def __init__(self, data: ArrayLike, factor: float) -> None:
        self.data = data
        self.factor = float(factor)
        self.shape = tuple(int(s) for s in data.shape)
        self.ndim = len(self.shape)
        self.dtype = np.dtype(np.float64)

    def __getitem__(self, index: tuple[slice, ...] | slice | EllipsisType) -> np.ndarray:
        return np.asarray(self.data[index], dtype=np.float64) * self.factor

    def __array__(self, dtype: npt.DTypeLike = None, copy: bool | None = None) -> np.ndarray:
        array = self[...]
        return array if dtype is None else array.astype(dtype)


def unscale(u: torch.Tensor, factor: float) -> torch.Tensor:
    """``u / factor`` for a power-of-two ``factor``, exact, in ``u``'s dtype.

    Data near float32's maximum is scaled by ``2**-128``, whose inverse ``2**128`` is itself
    beyond float32: multiplying by it at once gave infinity everywhere (issue 17). Two powers
    of two whose product is the inverse are each representable, and a multiplication by a power
    of two is exact, so the result is the same bits wherever the one-step product was finite.

    Examples
    --------
    >>> u = torch.tensor([0.75, -0.5], dtype=torch.float32)
    >>> unscale(u, 2.0**-128).tolist() == [0.75 * 2.0**128, -0.5 * 2.0**128]
    True
    >>> bool(torch.isinf(u * (1 / 2.0**-128)).all())  # the one-step product
    True
    """
    inverse = 1.0 / factor
    if inverse < 2.0**100:
        return u * inverse
    return u * (inverse / 2.0**64) * 2.0**64
