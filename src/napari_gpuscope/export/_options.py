"""Figure options and their limits (no Qt, no napari)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DEFAULT_DPI", "DPI_RANGE", "MAX_PIXELS", "MAX_ZOOM", "MM_PER_INCH", "FigureOptions"]

DEFAULT_DPI = 300.0
MAX_ZOOM = 16
MAX_PIXELS = 150_000_000
DPI_RANGE = (10.0, 10_000.0)
MM_PER_INCH = 25.4


@dataclass(frozen=True)
class FigureOptions:
    """How to draw the figure.

    Attributes
    ----------
    zoom : int
        Screen pixels per data pixel of the finest layer, along each axis (1 = native size).
    dpi : float, optional
        Dots per inch written to the PNG; default 300 unless ``width_mm`` is given.
    width_mm : float, optional
        Print width; the DPI follows (``width in pixels / width in inches``).
    colorbar : bool
        Draw a colorbar per distinct display range of the visible image layers.
    scale_bar : bool
        Draw a scale bar (only when the layers have a physical pixel size).
    titles : bool, optional
        Layer names above the panels; default: when there is more than one panel.

    Examples
    --------
    >>> FigureOptions(zoom=2, width_mm=85.0, colorbar=True).validated().zoom
    2
    >>> FigureOptions(zoom=0).validated()
    Traceback (most recent call last):
    ...
    ValueError: zoom must be from 1 to 16, got 0.
    """

    zoom: int = 1
    dpi: float | None = None
    width_mm: float | None = None
    colorbar: bool = False
    scale_bar: bool = True
    titles: bool | None = None

    def validated(self) -> FigureOptions:
        """These options, checked; raises ValueError naming the bad one and the valid range."""
        if isinstance(self.zoom, bool) or int(self.zoom) != self.zoom:
            raise ValueError(f"zoom must be a whole number from 1 to {MAX_ZOOM}, got {self.zoom}.")
        if not 1 <= self.zoom <= MAX_ZOOM:
            raise ValueError(f"zoom must be from 1 to {MAX_ZOOM}, got {self.zoom}.")
        if self.dpi is not None and self.width_mm is not None:
            raise ValueError("Give either dpi or width_mm, not both: one follows from the other.")
        if self.dpi is not None and not (
            math.isfinite(self.dpi) and DPI_RANGE[0] <= self.dpi <= DPI_RANGE[1]
        ):
            raise ValueError(
                f"dpi must be from {DPI_RANGE[0]:g} to {DPI_RANGE[1]:g}, got {self.dpi}."
            )
        if self.width_mm is not None and not (math.isfinite(self.width_mm) and self.width_mm > 0):
            raise ValueError(f"width_mm must be a positive length, got {self.width_mm}.")
        return self
