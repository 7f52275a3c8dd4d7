"""What the viewer shows, as figure panels: which layers, over which world region, at which
pixel size and unit, and where the shown plane lies.

A *panel* is one grid viewbox of the canvas (or the whole canvas when the grid is off): its
visible layers drawn over each other. Every panel covers the same world region (the union of the
visible layers' extents, as napari's grid does), so panels side by side are directly comparable.
:mod:`._render` renders them pixel-exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.compute.results import split_result_name

if TYPE_CHECKING:
    import pint
    from napari.layers import Layer
    from napari.viewer import Viewer

__all__ = [
    "PICTURE_TYPES",
    "Panel",
    "Region",
    "SliderPosition",
    "displayed_bounds",
    "figure_panels",
    "is_picture",
    "length_unit",
    "panel_title",
    "slider_positions",
    "theme_name",
    "window_pixel_ratio",
    "world_region",
]


@dataclass(frozen=True)
class Panel:
    """One viewbox of the figure.

    Attributes
    ----------
    layers : tuple of Layer
        Its visible layers, bottom to top.
    row, column : int
        Position in napari's grid (``0, 0`` when the grid is off).
    """

    layers: tuple[Layer, ...]
    row: int
    column: int

    @property
    def title(self) -> str:
        """:func:`panel_title` of all its layers (a figure names only those a reader sees)."""
        return panel_title(self.layers)


def panel_title(layers: Sequence[Layer]) -> str:
    """The names of the pictures among ``layers`` (bottom to top), top layer first, then the
    annotations (only their kind when they come from the picture's input: "phase · cells
    [reg=0.01] + tilt").

    Examples
    --------
    >>> from types import SimpleNamespace as L
    >>> Image = type("Image", (L,), {}); Vectors = type("Vectors", (L,), {})
    >>> panel_title([Image(name="phase · cells [reg=0.01]"), Vectors(name="tilt · cells")])
    'phase · cells [reg=0.01] + tilt'
    """
    pictures = [layer.name for layer in reversed(layers) if is_picture(layer)]
    title = " / ".join(pictures)
    inputs = {_input_of(name) for name in pictures}
    for layer in layers:
        if is_picture(layer):
            continue
        parts = split_result_name(layer.name)
        short = parts[0] if parts is not None and parts[1] in inputs else layer.name
        title = f"{title} + {short}" if title else short
    return title


def _input_of(name: str) -> str:
    """The input a result layer was made from (its own name for any other layer)."""
    parts = split_result_name(name)
    return name if parts is None else parts[1]


@dataclass(frozen=True)
class Region:
    """The world rectangle every panel shows (displayed axes only, napari's axis order).

    Attributes
    ----------
    corner : tuple of float
        World coordinates of the top-left *edge* (not pixel centre).
    step : float
        World size of one data pixel of the finest visible layer.
    shape : tuple of int
        Size of the region in those data pixels (rows, columns).
    """

    corner: tuple[float, float]
    step: float
    shape: tuple[int, int]


def figure_panels(viewer: Viewer) -> list[Panel]:
    """The panels of the current view, in napari's grid order.

    A viewbox that holds only annotation layers (vectors, points, shapes: e.g. tilt arrows) is
    no panel of its own: its layers are drawn over the panel before it, and the panels after it
    move up one cell.

    Raises
    ------
    ValueError
        When no layer is visible.
    """
    layers = list(viewer.layers)
    visible = [layer for layer in layers if layer.visible]
    if not visible:
        raise ValueError("Nothing to export: no layer is visible.")
    grid = viewer.canvas.grid
    if not grid.enabled or viewer.dims.ndisplay == 3:
        return [Panel(tuple(visible), 0, 0)]
    boxes: list[Panel] = []
    columns, merged = 1, False
    for (row, column), indices in grid.iter_viewboxes(viewer.layers):
        columns = max(columns, int(column) + 1)
        members = tuple(layers[i] for i in sorted(indices) if layers[i].visible)
        if not members:
            continue
        if boxes and not any(is_picture(layer) for layer in members):
            # Arrows or points alone say nothing: draw them over the panel before them.
            previous = boxes[-1]
            boxes[-1] = Panel((*previous.layers, *members), previous.row, previous.column)
            merged = True
        else:
            boxes.append(Panel(members, int(row), int(column)))
    if not merged:
        return boxes
    # Panels were merged: fill the grid row by row again, so no cell stays empty in between.
    columns = min(columns, len(boxes))
    return [
        Panel(panel.layers, index // columns, index % columns) for index, panel in enumerate(boxes)
    ]


#: Layer types that fill a panel; others (vectors, points, shapes, tracks) annotate one.
PICTURE_TYPES = ("Image", "Labels", "Surface")


def is_picture(layer: Layer) -> bool:
    return layer.__class__.__name__ in PICTURE_TYPES  # not isinstance: proxied layers


def theme_name(viewer: Viewer) -> str:
    """The theme the viewer is drawn with: its own, else the settings'; ``"system"`` resolved
    to the light or dark theme the system uses."""
    from napari.settings import get_settings
    from napari.utils.theme import get_system_theme

    name = getattr(viewer, "theme", None) or get_settings().appearance.theme
    return get_system_theme() if name == "system" else name


@dataclass(frozen=True)
class SliderPosition:
    """Where the shown plane lies on one axis the viewer does not display.

    Attributes
    ----------
    axis : int
        World axis.
    label : str
        Its axis label (e.g. ``"z"``).
    world : float
        World coordinate of the plane.
    index : int
        Slider step.
    steps : int
        Number of slider steps.
    """

    axis: int
    label: str
    world: float
    index: int
    steps: int


def slider_positions(viewer: Viewer) -> list[SliderPosition]:
    """The position of the shown plane on every axis not displayed (e.g. which z plane)."""
    dims = viewer.dims
    return [
        SliderPosition(
            axis,
            str(dims.axis_labels[axis]),
            float(dims.point[axis]),
            int(dims.current_step[axis]),
            int(dims.nsteps[axis]),
        )
        for axis in range(dims.ndim)
        if axis not in dims.displayed
    ]


def _displayed_axes(layer: Layer, viewer: Viewer) -> list[int]:
    """The layer's own axes that the viewer displays (layer dims are the trailing world dims)."""
    offset = viewer.dims.ndim - layer.ndim
    return [axis - offset for axis in viewer.dims.displayed if axis - offset >= 0]


def displayed_bounds(layer: Layer, viewer: Viewer) -> tuple[np.ndarray, np.ndarray]:
    """World coordinates of the layer's outer pixel edges (not centres) on the displayed axes;
    a ``ValueError`` when the layer does not span both displayed axes."""
    axes = _displayed_axes(layer, viewer)
    if len(axes) != 2:
        raise ValueError(
            f"Layer {layer.name!r} does not span the two displayed axes; "
            "a figure needs every visible layer in the displayed plane."
        )
    extent = layer.extent
    step = np.abs(np.asarray(extent.step, dtype=float)[axes])
    # extent.world spans pixel centres; a pixel reaches half a step beyond them.
    low = np.asarray(extent.world[0], dtype=float)[axes] - step / 2
    high = np.asarray(extent.world[1], dtype=float)[axes] + step / 2
    return low, high


def world_region(viewer: Viewer, layers: Sequence[Layer]) -> Region:
    """The union of the layers' extents on the displayed axes, in data pixels of the finest one.

    Raises
    ------
    ValueError
        When a layer does not span both displayed axes.
    """
    low = np.full(2, np.inf)
    high = np.full(2, -np.inf)
    steps = []
    for layer in layers:
        layer_low, layer_high = displayed_bounds(layer, viewer)
        low, high = np.minimum(low, layer_low), np.maximum(high, layer_high)
        step = np.abs(np.asarray(layer.extent.step, dtype=float)[_displayed_axes(layer, viewer)])
        steps.extend(float(s) for s in step if s > 0)
    step = min(steps)
    size = (high - low) / step
    # Layers on one pixel grid give whole numbers; round away float noise before the ceiling.
    shape = tuple(math.ceil(round(float(n), 6)) for n in size)
    return Region(corner=(float(low[0]), float(low[1])), step=step, shape=shape)  # type: ignore[arg-type]


def length_unit(viewer: Viewer, layers: Sequence[Layer]) -> pint.Unit | None:
    """The pint unit of the displayed axes when all layers agree and it is a length, else None."""
    units = set()
    for layer in layers:
        layer_units = getattr(layer, "units", None)
        if layer_units is None:
            return None
        for axis in _displayed_axes(layer, viewer):
            units.add(layer_units[axis])
    if len(units) != 1:
        return None
    (unit,) = units
    try:
        is_length = unit.dimensionality == {"[length]": 1}
    except AttributeError:
        return None
    return unit if is_length else None


def window_pixel_ratio(viewer: Viewer) -> float:
    """Device pixels per logical pixel of the viewer's window (1 under Xvfb, 2 on Retina)."""
    from qtpy.QtWidgets import QApplication

    title = getattr(viewer, "title", None)
    for widget in QApplication.topLevelWidgets():
        if widget.isWindow() and widget.windowTitle() == title:
            return float(widget.devicePixelRatioF())
    screen = QApplication.primaryScreen()
    return float(screen.devicePixelRatio()) if screen is not None else 1.0
