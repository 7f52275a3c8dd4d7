"""Dock widgets of napari-gpuscope, all built on :class:`MethodDock`.

- :class:`MethodDock` -- the shared base (device row with kernel warm-up, input picker, generated
  parameter rows, Run / Stop & keep / Cancel, progress, metrics plot, streaming, live preview,
  results linked to their input, saved settings, export buttons); see
  :mod:`napari_gpuscope.widgets._base` for what a method dock adds;
- :mod:`napari_gpuscope.widgets._controls` -- the reusable controls;
- :class:`~napari_gpuscope.widgets.tv_dock.TVDenoiseDock` -- the "TV denoise" dock.
"""

from napari_gpuscope.widgets._base import MethodDock, PreviewResult
from napari_gpuscope.widgets._devices import DeviceRow, available_devices
from napari_gpuscope.widgets._runner import JobRunner

__all__ = ["DeviceRow", "JobRunner", "MethodDock", "PreviewResult", "available_devices"]
