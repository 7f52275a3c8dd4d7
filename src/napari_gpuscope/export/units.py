"""The intensity unit of a layer, for colorbar labels.

napari layers carry spatial units (``layer.units``) but no intensity unit. A layer states its
intensity unit as ``layer.metadata["intensity_unit"]`` (e.g. ``"ADU"``, ``"photons"``,
``"a.u."``; the plugin's samples state ``"ADU"``). Without it, a result layer (with a
provenance record) is in the unit of the input layer its record names, when that layer is in
the viewer. Methods whose results are not in their input's unit must set ``intensity_unit`` on
the result layer.

Otherwise the unit is unknown and the colorbar says just "Intensity": never a guess.

A layer that is not an intensity states what it shows as ``layer.metadata["quantity"]`` (e.g.
``"phase"``, ``"flatfield"``): the colorbar then says "Phase (rad)" instead of "Intensity (rad)".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from napari_gpuscope.provenance import provenance_of

__all__ = ["INTENSITY_UNIT_KEY", "QUANTITY_KEY", "intensity_unit", "quantity"]

INTENSITY_UNIT_KEY = "intensity_unit"
QUANTITY_KEY = "quantity"
DEFAULT_QUANTITY = "Intensity"


def _stated(metadata: Mapping[str, object], key: str = INTENSITY_UNIT_KEY) -> str | None:
    unit = metadata.get(key)
    if isinstance(unit, str) and unit.strip():
        return unit.strip()
    return None


def intensity_unit(layer: object, layers: Iterable[object] = ()) -> str | None:
    """The intensity unit of ``layer``, or ``None`` when unknown.

    Parameters
    ----------
    layer : napari.layers.Layer
        The layer (anything with a ``metadata`` mapping).
    layers : iterable of Layer
        The viewer's layers, to follow a result's provenance to its input.

    Returns
    -------
    str or None

    Examples
    --------
    >>> from types import SimpleNamespace as Layer
    >>> raw = Layer(name="raw", metadata={"intensity_unit": "ADU"})
    >>> provenance = {"napari_gpuscope": {"input": "raw"}}
    >>> result = Layer(name="TV denoised · raw [s=1]", metadata=provenance)
    >>> intensity_unit(result, [raw, result])
    'ADU'
    >>> intensity_unit(result) is None
    True
    """
    by_name = {getattr(other, "name", None): other for other in layers}
    seen: set[int] = set()
    current = layer
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        metadata = getattr(current, "metadata", None) or {}
        unit = _stated(metadata)
        if unit is not None:
            return unit
        record = provenance_of(current)
        source = record.get("input") if isinstance(record, dict) else None
        current = by_name.get(source) if isinstance(source, str) else None
    return None


def quantity(layer: object) -> str:
    """What ``layer``'s values are, for a colorbar label: its stated quantity with the first
    letter capitalised (not in a name like "eSRRF"), else "Intensity".

    Examples
    --------
    >>> from types import SimpleNamespace as Layer
    >>> quantity(Layer(metadata={"quantity": "phase"})), quantity(Layer(metadata={}))
    ('Phase', 'Intensity')
    >>> quantity(Layer(metadata={"quantity": "eSRRF"}))
    'eSRRF'
    """
    stated = _stated(getattr(layer, "metadata", None) or {}, QUANTITY_KEY)
    if stated is None:
        return DEFAULT_QUANTITY
    if stated[:1].islower() and not stated[1:2].isupper():
        return stated[0].upper() + stated[1:]
    return stated
