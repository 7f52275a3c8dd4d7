"""Dock widgets of napari-gpuscope, all built on :class:`MethodDock`.

- :class:`MethodDock` -- the shared base (device row, Run/Cancel, progress, streaming, live
  preview, provenance, export buttons); see :mod:`napari_gpuscope.widgets._base` for its hooks.
- :class:`~napari_gpuscope.widgets.tv_dock.TVDenoiseDock` -- the "TV denoise" dock.
"""

from napari_gpuscope.widgets._base import MethodDock
from napari_gpuscope.widgets._devices import DeviceRow, available_devices
from napari_gpuscope.widgets._runner import JobRunner

__all__ = ["DeviceRow", "JobRunner", "MethodDock", "available_devices"]
