"""Dock widgets of napari-gpuscope, one per method, all built on :class:`MethodDock`.

- :class:`MethodDock` -- the shared base (device row with kernel warm-up, input picker, generated
  parameter rows, Run / Stop & keep / Cancel, progress, metrics plot, streaming, live preview,
  results linked to their input, saved settings, recipes, export buttons); see
  :mod:`napari_gpuscope.widgets._base` for what a method dock adds;
- :class:`~napari_gpuscope.dock.jobs.DockController` -- the Qt-free controller of a
  dock: its one runner (every job of the dock goes through it, one at a time; a second request
  is refused in words), the job state machine and the settings;
- :class:`JobRunner` -- runs jobs on napari's thread worker, at most one at a time (a newer
  job supersedes an older one);
- :class:`~napari_gpuscope.dock.context.DockContext` -- what a dock's parts (recipe row,
  sweep and apply panels) may ask of their dock;
- :class:`DeviceRow` -- the device choice (:func:`available_devices`);
- :mod:`napari_gpuscope.widgets._controls` -- the reusable controls;
- the method docks, opened from napari's menus (the registry,
  :data:`napari_gpuscope.methods.METHODS`, names them):
  :class:`~napari_gpuscope.widgets.tv.dock.TVDenoiseDock` ("TV denoise"),
  :class:`~napari_gpuscope.widgets.esrrf.dock.EsrrfDock` ("eSRRF", with its parameter sweep
  panel, :class:`~napari_gpuscope.widgets.esrrf.sweep.SweepPanel`),
  :class:`~napari_gpuscope.widgets.flatfield.dock.FlatfieldDock` ("Flat-field (BaSiC)", with
  its Apply panel, :class:`~napari_gpuscope.widgets.flatfield.apply.ApplyPanel`) and
  :class:`~napari_gpuscope.widgets.phase.dock.PhaseDock` ("Phase (tilt-corrected)").

Importing this package imports Qt but none of the method docks.
"""

from napari_gpuscope.widgets._base import MethodDock, PreviewResult
from napari_gpuscope.widgets._devices import DeviceRow, available_devices
from napari_gpuscope.widgets._runner import JobRunner

__all__ = ["DeviceRow", "JobRunner", "MethodDock", "PreviewResult", "available_devices"]
