"""The TV denoise dock (:class:`~napari_gpuscope.widgets.tv.dock.TVDenoiseDock`)."""
