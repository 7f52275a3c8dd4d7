"""napari's status bar after a job: what the cursor is over now, never a layer that is gone.

napari recomputes its status only when the cursor moves, so after a run it kept "TV running ·
cells" (the streamed layer, replaced by the result) until the mouse moved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from napari.components import ViewerModel

__all__ = ["refresh_viewer_status"]

READY = "Ready"


def _named_layer(status: object) -> str | None:
    """The layer a napari status names (its cursor status is a dict with ``layer_name``)."""
    if isinstance(status, dict):
        name = status.get("layer_name")
        return name if isinstance(name, str) else None
    return None


def refresh_viewer_status(viewer: ViewerModel) -> None:
    """Recompute ``viewer``'s status from the cursor; when the cursor is off the canvas and the
    status still names a layer that is no longer in the viewer (a job's streamed layer,
    renamed or replaced by its result), say "Ready" instead.

    Parameters
    ----------
    viewer : napari.components.ViewerModel
        The viewer whose status bar to refresh (main thread only).

    Examples
    --------
    >>> from napari.components import ViewerModel
    >>> viewer = ViewerModel()
    >>> viewer.status = {"layer_name": "TV running · cells", "coordinates": " [1 2]: 3"}
    >>> refresh_viewer_status(viewer)
    >>> viewer.status
    'Ready'
    """
    viewer.update_status_from_cursor()
    status = viewer.status
    named = _named_layer(status)
    if named is not None and named not in {layer.name for layer in viewer.layers}:
        viewer.status = READY
