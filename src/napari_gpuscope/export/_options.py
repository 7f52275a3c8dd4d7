"""Figure options and their limits (no Qt, no napari)."""

from __future__ import annotations

from napari_gpuscope.compute.params import Params, param

__all__ = [
    "DEFAULT_DPI",
    "DPI_RANGE",
    "MAX_PIXELS",
    "MAX_ZOOM",
    "MM_PER_INCH",
    "PUBLICATION_WIDTH_PX",
    "FigureOptions",
    "figure_zoom",
    "split_zoom",
]

DEFAULT_DPI = 300.0
MAX_ZOOM = 16
"""The largest zoom napari renders at and the largest a user chooses; the automatic zoom goes
beyond it by repeating each rendered pixel (:func:`split_zoom`)."""
MAX_PIXELS = 150_000_000
DPI_RANGE = (10.0, 10_000.0)
MM_PER_INCH = 25.4
PUBLICATION_WIDTH_PX = 1600
"""The automatic zoom makes the panels at least this wide at :data:`DEFAULT_DPI` (135 mm, a
two-column figure): text sized in points then stays small beside the data, as in print."""


def split_zoom(zoom: int) -> tuple[int, int]:
    """``(rendered, repeat)``: the zoom napari renders at (at most :data:`MAX_ZOOM`) and the
    whole factor each rendered pixel is then repeated by (nearest neighbour), with
    ``rendered * repeat == zoom``; the largest rendered zoom that divides ``zoom``, so that
    annotations (arrows, points) are drawn as finely as napari can.

    Examples
    --------
    >>> split_zoom(12), split_zoom(18), split_zoom(50)
    ((12, 1), (9, 2), (10, 5))
    """
    repeat = -(-zoom // MAX_ZOOM)
    while zoom % repeat:
        repeat += 1
    return zoom // repeat, repeat


def figure_zoom(needed: int) -> int:
    """The smallest zoom of at least ``needed`` that :func:`split_zoom` splits into a rendered
    zoom of at most :data:`MAX_ZOOM` times a repeat (``needed`` itself up to :data:`MAX_ZOOM`).

    Examples
    --------
    >>> figure_zoom(16), figure_zoom(17), figure_zoom(50)
    (16, 18, 52)
    """
    repeat = max(1, -(-needed // MAX_ZOOM))
    return -(-needed // repeat) * repeat


class FigureOptions(Params):
    """How to draw the figure; checked on creation (:class:`~napari_gpuscope.compute.params.
    ParameterError`, a ``ValueError``, names the bad option and its valid range).

    Attributes
    ----------
    zoom : int, optional
        Screen pixels per data pixel of the finest layer, along each axis (1 = native size), 1
        to :data:`MAX_ZOOM`. Default: automatic, the smallest zoom that makes the panels
        publication-size (:data:`PUBLICATION_WIDTH_PX` wide at 300 dpi; at another DPI or
        print width, the same print width), whatever the viewer's own zoom; beyond
        :data:`MAX_ZOOM` for small data, each rendered pixel repeated (:func:`split_zoom`).
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
    >>> FigureOptions(zoom=2, width_mm=85.0, colorbar=True).zoom
    2
    >>> FigureOptions().zoom is None  # automatic
    True
    >>> try:
    ...     FigureOptions(zoom=0)
    ... except ValueError as error:
    ...     print(error)
    FigureOptions.zoom must be an integer in [1, 16], got 0
    """

    zoom: int | None = param(
        None,
        minimum=1,
        maximum=MAX_ZOOM,
        unit="×",
        help=(
            "Screen pixels per data pixel of the finest layer, along each axis; default: the "
            "smallest that makes the figure publication-size"
        ),
    )
    dpi: float | None = param(
        None,
        minimum=DPI_RANGE[0],
        maximum=DPI_RANGE[1],
        unit="dpi",
        label="Resolution",
        help=f"Dots per inch written to the PNG; {DEFAULT_DPI:g} unless width_mm is given",
    )
    width_mm: float | None = param(
        None,
        minimum=0.0,
        exclusive_minimum=True,
        unit="mm",
        label="Print width",
        help="Print width; the DPI follows from the figure's pixels",
    )
    colorbar: bool = param(False, help="A colorbar per display range, with the intensity unit")
    scale_bar: bool = param(True, help="A scale bar, when the layers have a physical pixel size")
    titles: bool | None = param(
        None, help="Layer names above the panels; default: when there are several panels"
    )

    def validate(self) -> None:
        """DPI and print width are two views of one choice: at most one is given."""
        if self.dpi is not None and self.width_mm is not None:
            self.fail("dpi", "and width_mm cannot both be given: one follows from the other.")
