"""Every widget and sample opens through the plugin manifest."""

from __future__ import annotations

from napari_gpuscope.widgets.tv.dock import TVDenoiseDock


def test_tv_dock_and_samples_open_through_the_manifest(make_napari_viewer_proxy):
    viewer = make_napari_viewer_proxy()
    _, dock = viewer.window.add_plugin_dock_widget("napari-gpuscope", "TV denoise")
    assert isinstance(dock, TVDenoiseDock)
    viewer.open_sample("napari-gpuscope", "tv-2d")
    viewer.open_sample("napari-gpuscope", "tv-3d")
    assert len(viewer.layers) >= 2
    assert [ly.ndim for ly in viewer.layers][:2] == [2, 3]
    # napari wires layer-list changes to reset_choices: both samples are offered
    names = [layer.name for layer in dock.input.combo.choices]
    assert {layer.name for layer in viewer.layers} <= set(names)
