"""A layer's pixel as a length: the unit of its last axis and its pixel size, the one rule the
docks (eSRRF's drift and resolution) and the figure captions share."""

from __future__ import annotations

import math

__all__ = ["layer_unit", "pixel_of", "unit_symbol"]

_SYMBOLS = {"micrometer": "µm", "um": "µm", "μm": "µm", "nanometer": "nm", "pixel": "px"}


def unit_symbol(unit: object) -> str:
    """A length unit as a short symbol: napari's ``"micrometer"`` (and ``"um"``) as ``"µm"``,
    ``"pixel"`` as ``"px"``; another unit as it is.

    Examples
    --------
    >>> unit_symbol("micrometer"), unit_symbol("um"), unit_symbol("mm")
    ('µm', 'µm', 'mm')
    """
    return _SYMBOLS.get(str(unit), str(unit))


def layer_unit(layer: object | None) -> str:
    """The unit of a layer's last axis as a short symbol (``"µm"``), ``"px"`` without one
    (napari's default unit is ``"pixel"``).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> layer_unit(SimpleNamespace(units=("second", "micrometer", "micrometer")))
    'µm'
    >>> layer_unit(SimpleNamespace(units=("pixel", "pixel"))), layer_unit(None)
    ('px', 'px')
    """
    units = getattr(layer, "units", None)
    if units is None or not len(units):
        return "px"
    return unit_symbol(units[-1])


def pixel_of(layer: object | None) -> tuple[float, str] | None:
    """(pixel size, unit) of a layer with a physical scale; None in pixels.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> pixel_of(SimpleNamespace(units=("um", "um"), scale=(0.1, 0.1)))
    (0.1, 'µm')
    >>> pixel_of(SimpleNamespace(units=("pixel", "pixel"), scale=(2.0, 2.0))) is None
    True
    """
    unit = layer_unit(layer)
    if layer is None or unit == "px":
        return None
    size = abs(float(layer.scale[-1]))  # type: ignore[attr-defined]
    return (size, unit) if math.isfinite(size) and size > 0 else None
