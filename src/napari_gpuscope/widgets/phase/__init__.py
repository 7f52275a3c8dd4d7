"""The tilt-corrected phase dock (:class:`~napari_gpuscope.widgets.phase.dock.PhaseDock`)."""
