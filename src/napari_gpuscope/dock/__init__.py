"""The Qt-free side of the docks: what a dock is and does, without its widgets.

- :class:`~napari_gpuscope.dock.model.DockModel` -- one dock's method (from the registry), input,
  evented parameters, one runner, job state machine and settings; it builds the method's jobs as
  the CLI and batch do;
- :mod:`~napari_gpuscope.dock.jobs` -- the job records (kinds, handlers, what a runner offers);
- :mod:`~napari_gpuscope.dock.context` -- what a dock's parts may ask of their dock;
- :mod:`~napari_gpuscope.dock.outputs` -- streaming a job's outputs into napari layers and
  finishing them as the result's layers;
- :mod:`~napari_gpuscope.dock.layers` -- checks of input layers;
- :mod:`~napari_gpuscope.dock.settings` -- settings that persist between sessions;
- :mod:`~napari_gpuscope.dock.messages` -- errors, progress and sentences in plain words;
- :mod:`~napari_gpuscope.dock.connections` and :mod:`~napari_gpuscope.dock.viewer_status` --
  napari event connections undone on close, and napari's status bar after a job.

Nothing here imports Qt (an import-linter contract says so); napari's models are used, its Qt
views never. :mod:`napari_gpuscope.widgets` builds the views over these.
"""
