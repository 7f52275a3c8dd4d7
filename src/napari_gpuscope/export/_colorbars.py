"""Which layers of a figure a reader can see, and a colorbar with a short label for each of
their display ranges.

A layer of a panel is *seen* when it is visible, its opacity is above 0 and no picture above it
in the same panel hides it. A layer ``upper`` *hides* a layer ``lower`` below it when all of
these hold:

- ``upper`` is an image layer (labels, surfaces and annotations let what is below show);
- its blending is ``"opaque"`` (blending off: it replaces what is below whatever its opacity),
  or ``"translucent"``/``"translucent_no_depth"`` with opacity 1 and colours without
  transparency (every colormap entry has alpha 1; an RGB image has no alpha channel);
- it is axis-aligned (no rotation or shear), so its bounding box is what it paints;
- its extent on the two displayed axes (pixel edges, not centres) contains ``lower``'s.

Additive, minimum and multiplicative blendings never hide. A colorbar describes one display
range of the seen image layers; its label is the quantity and unit ("Phase (rad)"), and only
when another colorbar has the same label does it start with the few words of the layer names
that tell them apart ("ch0 · Intensity (photons)"), never the whole names.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.export import _drawing as draw
from napari_gpuscope.export import _panels
from napari_gpuscope.export.units import intensity_unit, quantity

if TYPE_CHECKING:
    from napari.layers import Layer
    from napari.utils.colormaps import Colormap
    from napari.viewer import Viewer

    from napari_gpuscope.compute._types import JSONDict

__all__ = [
    "HIDING_BLENDINGS",
    "Colorbar",
    "bar_title",
    "colorbars",
    "distinguishing_words",
    "hides",
    "seen_layers",
]

HIDING_BLENDINGS = ("opaque", "translucent", "translucent_no_depth")
"""Blendings with which an image layer can hide what is below it (see the module's rules)."""

_WORD = re.compile(r"[^\s·\[\],]+")
_SETTINGS = re.compile(r"\s*\[[^\]]*\]")


@dataclass(frozen=True)
class Colorbar:
    """One display range (colormap, contrast limits, gamma, unit) and the layers that use it."""

    layers: tuple[str, ...]
    colormap: Colormap
    contrast_limits: tuple[float, float]
    gamma: float
    unit: str | None
    quantity: str = "Intensity"

    @property
    def label(self) -> str:
        """What the values are and their unit, e.g. "Intensity (ADU)", "Phase (rad)"."""
        return self.quantity + (f" ({self.unit})" if self.unit else "")

    def describe(self) -> JSONDict:
        return {
            "layers": list(self.layers),
            "colormap": str(self.colormap.name),
            "contrast_limits": list(self.contrast_limits),
            "gamma": self.gamma,
            "unit": self.unit,
            "quantity": self.quantity,
            "label": self.label,
        }


def _opaque_colours(layer: Layer) -> bool:
    if getattr(layer, "rgb", False):
        return np.asarray(layer.data).shape[-1] == 3
    colours = np.asarray(layer.colormap.colors, dtype=float)
    return bool(colours.size) and bool(np.all(colours[:, 3] >= 1.0))


def _axis_aligned(layer: Layer) -> bool:
    matrix = np.asarray(layer._data_to_world.linear_matrix, dtype=float)
    return bool(np.allclose(matrix, np.diag(np.diag(matrix))))


def hides(upper: Layer, lower: Layer, viewer: Viewer) -> bool:
    """Whether ``upper`` (drawn above ``lower`` in the same panel) hides ``lower`` entirely.

    The rules are the module's: an opaque, axis-aligned image layer whose displayed extent
    contains ``lower``'s.
    """
    if upper.__class__.__name__ != "Image":  # not isinstance: plugins get proxied layers
        return False
    blending = str(upper.blending)
    if blending not in HIDING_BLENDINGS:
        return False
    if blending != "opaque" and (float(upper.opacity) < 1.0 or not _opaque_colours(upper)):
        return False
    if not _axis_aligned(upper):
        return False
    try:
        upper_low, upper_high = _panels.displayed_bounds(upper, viewer)
        lower_low, lower_high = _panels.displayed_bounds(lower, viewer)
    except ValueError:  # a layer outside the displayed plane hides nothing, is hidden by nothing
        return False
    tolerance = 1e-9 * max(1.0, float(np.abs([*upper_low, *upper_high]).max()))
    return bool(
        np.all(upper_low <= lower_low + tolerance) and np.all(upper_high >= lower_high - tolerance)
    )


def seen_layers(viewer: Viewer, panel: _panels.Panel) -> list[Layer]:
    """The panel's layers a reader can see, bottom to top (the module's rules)."""
    layers = list(panel.layers)
    return [
        layer
        for index, layer in enumerate(layers)
        if layer.visible
        and float(layer.opacity) > 0.0
        and not any(hides(upper, layer, viewer) for upper in layers[index + 1 :])
    ]


def colorbars(viewer: Viewer, panels: Sequence[_panels.Panel]) -> list[Colorbar]:
    """One colorbar per distinct display range of the seen image layers, naming every layer
    drawn with it."""
    found: dict[tuple, Colorbar] = {}
    for panel in panels:
        for layer in seen_layers(viewer, panel):
            if layer.__class__.__name__ != "Image" or layer.rgb:
                continue
            low, high = (float(v) for v in layer.contrast_limits)
            gamma, unit = float(layer.gamma), intensity_unit(layer, viewer.layers)
            what = quantity(layer)
            colors = np.asarray(layer.colormap.colors).tobytes()
            key = (layer.colormap.name, colors, low, high, gamma, unit, what)
            if key in found:
                shared = found[key]
                found[key] = dataclasses.replace(shared, layers=(*shared.layers, layer.name))
            else:
                found[key] = Colorbar((layer.name,), layer.colormap, (low, high), gamma, unit, what)
    return list(found.values())


def _words_not_in_all(names: Sequence[str]) -> list[str]:
    words = [_WORD.findall(name) for name in names]
    common = set.intersection(*(set(w) for w in words)) if words else set()
    return [" ".join(w for w in these if w not in common) for these in words]


def distinguishing_words(names: Sequence[str]) -> list[str]:
    """For each name, its words that are not in every name (in their order): what tells
    layers of one quantity apart. The settings in brackets count only when the names differ
    in nothing else.

    Examples
    --------
    >>> distinguishing_words(["eSRRF · cells ch0 [mag=5]", "eSRRF · cells ch1 [mag=5]"])
    ['ch0', 'ch1']
    >>> distinguishing_words(["phase · stack [reg=0.01]", "absorption · stack [reg=0.01]"])
    ['phase', 'absorption']
    >>> distinguishing_words(["cells ch0", "eSRRF · cells ch0 [mag=5 r=1.5]"])
    ['', 'eSRRF']
    >>> distinguishing_words(["TV denoised · cells [s=1]", "TV denoised · cells [s=2]"])
    ['s=1', 's=2']
    """
    tags = _words_not_in_all([_SETTINGS.sub("", name) for name in names])
    if len(set(tags)) == len(tags):
        return tags
    return _words_not_in_all(names)


def bar_title(bar: Colorbar, others: Sequence[Colorbar], face: draw.Face, span: int) -> str:
    """The colorbar's label: the quantity and its unit. Only when another colorbar of the
    figure has the same label does it start with what tells their layers apart (e.g. "ch0 ·
    Intensity (photons)"; the whole name when all its words are in the others', as an input's
    are in its results' names; shortened to 8 lines of text). The label is shortened to the
    longer of the bar and 30 lines of text."""
    same = [other for other in others if other.label == bar.label]
    title = bar.label
    if len(same) > 1:
        names = [", ".join(other.layers) for other in same]
        index = next(i for i, other in enumerate(same) if other is bar)
        # A name whose every word is in the others' (the input beside its results) is its own tag.
        tag = distinguishing_words(names)[index] or names[index]
        title = f"{draw.truncate(face, tag, 8 * draw.line_height(face))} · {bar.label}"
    return draw.truncate(face, title, max(span, 30 * draw.line_height(face)))
