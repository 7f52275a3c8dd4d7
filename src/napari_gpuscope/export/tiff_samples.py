"""A TIFF's sample type: float32 or uint16, and how intensities become uint16 samples.

``"clip"`` rounds to the nearest integer and clips to ``[0, 65535]`` (intensity units kept);
``"minmax"`` maps ``[min, max]`` linearly onto ``[0, 65535]`` and records the calibration
``value = offset + slope * stored`` (:class:`TiffScaling`). See :mod:`napari_gpuscope.export.tiff`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from napari_gpuscope.compute.params import Params, param

__all__ = [
    "DEFAULT_DTYPE",
    "DEFAULT_SCALING",
    "DTYPES",
    "UINT16_SCALINGS",
    "TiffOptions",
    "TiffScaling",
    "smallest_exact_dtype",
    "to_uint16",
]


class TiffOptions(Params):
    """Sample type and uint16 scaling of a TIFF file (see the module docstring).

    Examples
    --------
    >>> TiffOptions(dtype="uint16").uint16_scaling
    'clip'
    >>> try:
    ...     TiffOptions(dtype="uint8")
    ... except ValueError as error:
    ...     print(error)
    TiffOptions.dtype must be one of 'float32', 'uint16', got 'uint8'
    """

    dtype: str = param(
        "float32",
        choices=("float32", "uint16"),
        label="Sample type",
        help="Sample type of the file: float32 keeps intensities exactly",
    )
    uint16_scaling: str = param(
        "clip",
        choices=("clip", "minmax"),
        label="uint16 scaling",
        help="How values become uint16: clip to 0..65535, or map [min, max] onto it",
    )


DTYPES = tuple(TiffOptions.info("dtype").choices or ())
UINT16_SCALINGS = tuple(TiffOptions.info("uint16_scaling").choices or ())
DEFAULT_DTYPE: str = TiffOptions.info("dtype").default
DEFAULT_SCALING: str = TiffOptions.info("uint16_scaling").default
_UINT16_MAX = 65535


@dataclass(frozen=True)
class TiffScaling:
    """Linear calibration of stored integers: ``value = offset + slope * stored``.

    Attributes
    ----------
    slope : float
        Physical value of one stored count (one quantisation step).
    offset : float
        Physical value of a stored 0.
    """

    slope: float
    offset: float

    def apply(self, stored: np.ndarray) -> np.ndarray:
        """Convert stored integers to calibrated float64 values."""
        return self.offset + self.slope * np.asarray(stored, dtype=np.float64)


def to_uint16(data: np.ndarray, scaling: str) -> tuple[np.ndarray, TiffScaling | None]:
    """``data`` as uint16 samples by ``scaling`` (``"clip"`` or ``"minmax"``), with the
    calibration of ``"minmax"`` (None for ``"clip"``); non-finite data are refused."""
    if data.size and not np.all(np.isfinite(data)):
        raise ValueError(
            "Data contain NaN or infinite values, which uint16 cannot represent; "
            "save as float32 instead."
        )
    if scaling == "clip":
        # float64 first: rint of small integer types gives float16, which cannot hold 65535.
        values = np.rint(data.astype(np.float64))
        return np.clip(values, 0, _UINT16_MAX).astype(np.uint16), None
    low = float(data.min()) if data.size else 0.0
    high = float(data.max()) if data.size else 0.0
    # A constant image keeps a unit slope so the calibration stays invertible.
    slope = (high - low) / _UINT16_MAX if high > low else 1.0
    stored = np.clip(np.rint((data.astype(np.float64) - low) / slope), 0, _UINT16_MAX)
    return stored.astype(np.uint16), TiffScaling(slope=slope, offset=low)


def smallest_exact_dtype(array: np.ndarray) -> str:
    """uint16 for integers (and booleans) within 0..65535, which it stores exactly; else float32."""
    if array.dtype.kind in "biu" and array.size:
        low, high = int(array.min()), int(array.max())
        if low >= 0 and high <= _UINT16_MAX:
            return "uint16"
    return "float32"
