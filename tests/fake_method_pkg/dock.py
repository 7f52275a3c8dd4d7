"""The clip method's dock: a MethodDock that only names its method."""

from __future__ import annotations

from napari_gpuscope.widgets import MethodDock


class ClipDock(MethodDock):
    """Clips the input layer (``fake_method_pkg.compute.iter_clip``)."""

    method_id = "clip"
