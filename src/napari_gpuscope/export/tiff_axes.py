"""A TIFF's axes and units in ImageJ's terms: napari axis labels as ImageJ axis letters
(``TZCYX``), pint unit names as the ASCII spellings ImageJ understands, checked per axis."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "IMAGEJ_ORDER",
    "axes_from_labels",
    "default_axes",
    "per_axis",
    "unit_name",
    "validate_axes",
]

IMAGEJ_ORDER = "TZCYX"
_DEFAULT_AXES = {2: "YX", 3: "ZYX", 4: "TZYX", 5: "TZCYX"}

# napari axis labels (lower-cased) -> ImageJ axis letters.
_LABEL_TO_AXIS = {
    "t": "T",
    "time": "T",
    "z": "Z",
    "c": "C",
    "channel": "C",
    "channels": "C",
    "y": "Y",
    "x": "X",
}

# pint unit names -> the ASCII spellings ImageJ understands ("um" is shown as µm by ImageJ).
_UNIT_ALIASES = {
    "micrometer": "um",
    "micron": "um",
    "µm": "um",
    "nanometer": "nm",
    "millimeter": "mm",
    "centimeter": "cm",
    "meter": "m",
    "angstrom": "A",
    "pixel": "pixel",
    "second": "s",
    "millisecond": "ms",
    "microsecond": "us",
    "minute": "min",
    "hour": "h",
}


def unit_name(unit: object) -> str | None:
    """The ImageJ spelling of ``unit`` (a string or a pint unit); None when it says nothing."""
    if unit is None:
        return None
    name = str(unit).strip()
    if not name:
        return None
    return _UNIT_ALIASES.get(name.lower(), _UNIT_ALIASES.get(name, name))


def axes_from_labels(labels: Sequence[str], ndim: int | None = None) -> str:
    """Map napari axis labels (``t``, ``z``, ``c``, ``y``, ``x``) to ImageJ axis letters.

    Parameters
    ----------
    labels : sequence of str
        napari ``layer.axis_labels``.
    ndim : int, optional
        Number of axes; defaults to ``len(labels)``.

    Returns
    -------
    str
        Axis letters, or the default for ``ndim`` (``YX``, ``ZYX``, ``TZYX``, ``TZCYX``) when
        the labels are napari's defaults (``"-2"``, ``"-1"``...) or not recognised.
    """
    ndim = len(labels) if ndim is None else ndim
    letters = [_LABEL_TO_AXIS.get(str(label).strip().lower()) for label in labels]
    if len(letters) == ndim and all(letters) and len(set(letters)) == ndim:
        return "".join(letters)  # type: ignore[arg-type]
    return default_axes(ndim)


def default_axes(ndim: int) -> str:
    """``YX``, ``ZYX``, ``TZYX`` or ``TZCYX`` by ``ndim``; other dimensions are refused."""
    try:
        return _DEFAULT_AXES[ndim]
    except KeyError:
        raise ValueError(f"TIFF export supports 2 to 5 dimensions, got {ndim}.") from None


def validate_axes(axes: str, ndim: int) -> str:
    """``axes`` upper-cased, checked: one letter per axis from ``TZCYX``, ending in ``YX``."""
    axes = axes.upper()
    if len(axes) != ndim:
        raise ValueError(f"axes {axes!r} has {len(axes)} letters but the data has {ndim} axes.")
    if set(axes) - set(IMAGEJ_ORDER) or len(set(axes)) != ndim:
        raise ValueError(
            f"axes {axes!r} must use each of the letters {IMAGEJ_ORDER!r} at most once."
        )
    if not axes.endswith("YX"):
        raise ValueError(f"axes {axes!r} must end with 'YX' (the image plane).")
    return axes


def per_axis(value: object, ndim: int, name: str) -> list[object] | None:
    """``value`` as one entry per axis: a single value repeated, a sequence checked for length."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray):
        return [value] * ndim
    values = list(value)
    if len(values) != ndim:
        raise ValueError(f"{name} has {len(values)} entries but the data has {ndim} axes.")
    return values
