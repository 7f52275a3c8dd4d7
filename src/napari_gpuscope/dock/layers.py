"""Layer helpers shared by the docks: input checks and spacing weights from a layer's scale.

Kept free of Qt so they are trivially unit-testable; they only read napari layer attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    import napari.layers
    from numpy.typing import ArrayLike

__all__ = [
    "check_image_layer",
    "is_time_axis",
    "spacing_from_layer",
]

_TIME_UNITS = {"s", "ms", "us", "µs", "ns", "min", "h", "second", "millisecond", "minute", "hour"}
_TIME_LABELS = {"t", "time", "frame", "frames", "timepoint", "timepoints"}


def _unit_text(unit: object) -> str:
    """A layer unit (pint unit, string or None) as lower-case text."""
    if unit is None:
        return ""
    return str(unit).strip().lower()


def is_time_axis(label: object, unit: object) -> bool:
    """Whether an axis is time, judged from its napari axis label or unit.

    Parameters
    ----------
    label : str or None
        Axis label, e.g. ``"t"`` or ``"time"``.
    unit : object
        Axis unit (napari stores pint units; ``"second"``, ``"ms"``...).

    Returns
    -------
    bool
    """
    text = str(label or "").strip().lower()
    if text in _TIME_LABELS:
        return True
    unit_text = _unit_text(unit)
    return unit_text in _TIME_UNITS or unit_text.endswith("second")


def spacing_from_layer(layer: napari.layers.Layer) -> tuple[float, ...]:
    """Per-axis TV spacing weights ``s_a = x_pixel / scale_a`` from a layer's scale.

    The last axis (x) is the reference, so ``s_x = 1``; e.g. a 0.5 µm z-step with 0.1 µm pixels
    gives ``s_z = 0.2``. Time axes (by label or unit) get 0, i.e. frames are denoised
    independently.

    Parameters
    ----------
    layer : napari.layers.Layer

    Returns
    -------
    tuple of float
        One weight per layer axis.
    """
    from napari_gpuscope.compute.geometry import spacing_from_scale

    ndim = len(layer.scale)
    labels = list(getattr(layer, "axis_labels", None) or [None] * ndim)
    units = list(getattr(layer, "units", None) or [None] * ndim)
    time_axes = [
        axis
        for axis, (label, unit) in enumerate(zip(labels, units, strict=False))
        if is_time_axis(label, unit)
    ]
    return spacing_from_scale(layer.scale, uncoupled=time_axes)


def check_image_layer(
    layer: napari.layers.Layer | None,
    *,
    layouts: Sequence[str] = ("YX", "ZYX", "TYX", "TZYX"),
    method: str = "",
    check_values: bool = True,
) -> ArrayLike:
    """Validate a method's input layer and return its data (never a copy).

    Layer-level checks (type, RGB, multiscale) are made here; the array itself is checked by
    :func:`napari_gpuscope.compute.arrays.validate_image`, the same check the compute job makes.
    Every refusal names the layer (and its shape where that is the problem) and the axis
    layouts the method accepts.

    Parameters
    ----------
    layer : napari.layers.Layer or None
        The candidate input layer.
    layouts : sequence of str
        The axis layouts the method accepts, one letter an axis (``("TYX", "CTYX")``).
    method : str
        The method's title in the message (``"Phase takes ..."``); empty: "The input must be ...".
    check_values : bool
        Scan in-memory data for NaN/inf. Lazy (dask/zarr) data are never scanned here: the
        compute job checks them in its worker thread, so the GUI never waits for a volume.

    Returns
    -------
    array-like
        ``layer.data`` as is (NumPy, dask, zarr) -- read-only use; the input is never modified.

    Raises
    ------
    ValueError
        With a message that names the layer and says what is valid.

    Examples
    --------
    >>> import napari.layers
    >>> check_image_layer(napari.layers.Image(np.ones((8, 8)), name="bf"), layouts=("ZYX",),
    ...                   method="Phase")
    Traceback (most recent call last):
    ...
    ValueError: Layer 'bf' has shape (8, 8), 2 dimensions. Phase takes an image layer shaped (Z, ...
    """
    from napari.layers import Image

    from napari_gpuscope.compute.arrays import InvalidInputError, layouts_text, validate_image

    valid = f"an image layer shaped {layouts_text(layouts)}"
    takes = f"{method} takes {valid}" if method else f"The input must be {valid}"
    if layer is None:
        raise ValueError(f"No input layer selected. {takes}.")
    name = getattr(layer, "name", repr(layer))
    if not isinstance(layer, Image):
        kind = layer.__class__.__name__  # not type(): napari hands plugins proxies
        raise ValueError(f"Layer '{name}' is a {kind} layer. {takes}.")
    if layer.rgb:
        raise ValueError(
            f"Layer '{name}' is RGB: split the colour channels into separate layers first. {takes}."
        )
    if layer.multiscale:
        raise ValueError(f"Layer '{name}' is multiscale. {takes}.")
    data = layer.data
    try:
        validate_image(
            data,
            name=f"Layer '{name}'",
            layouts=layouts,
            check_values=check_values and isinstance(data, np.ndarray),
        )
    except InvalidInputError as exc:
        text = str(exc)
        # The shape's refusal already ends with the layouts: say them once, as the method's.
        head, sep, _ = text.partition("; expected ")
        raise ValueError(f"{head}. {takes}." if sep else f"{text} {takes}.") from None
    return data
