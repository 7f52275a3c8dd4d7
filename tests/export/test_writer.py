"""napari's Save Selected Layers writes the provenance TIFF through the plugin's writer.

The files are read back with :func:`read_tiff` and with tifffile (the independent ImageJ parser).
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from napari_gpuscope.export import read_tiff
from napari_gpuscope.export.writer import WRITER_COMMAND, write_image_tiff
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance

RNG = np.random.default_rng(5)


def _record() -> dict:
    return build_provenance(
        "tv", {"strength": 1.0}, device="cpu", input_name="cells", elapsed_seconds=0.2
    )


def test_manifest_declares_a_single_image_tiff_writer():
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-gpuscope")
    (writer,) = manifest.contributions.writers
    assert writer.command == WRITER_COMMAND
    assert [str(t) for t in writer.layer_types] == ["image"]
    assert sorted(writer.filename_extensions) == [".tif", ".tiff"]


@pytest.mark.parametrize("suffix", [".tif", ".tiff"])
def test_save_selected_layers_writes_the_provenance_tiff(make_napari_viewer, tmp_path, suffix):
    viewer = make_napari_viewer()
    volume = RNG.normal(100, 10, (6, 30, 40)).astype(np.float32)
    record = _record()
    viewer.add_image(RNG.random((8, 8)), name="other")
    layer = viewer.add_image(
        volume,
        name="TV denoised · cells [s=1]",
        scale=(0.4, 0.1, 0.1),
        units="um",
        axis_labels=("z", "y", "x"),
        metadata={PROVENANCE_KEY: record},
    )
    viewer.layers.selection = {layer}

    written = viewer.layers.save(
        str(tmp_path / f"cells{suffix}"), selected=True, plugin="napari-gpuscope"
    )

    assert written == [str(tmp_path / f"cells{suffix}")]
    back = read_tiff(written[0])
    np.testing.assert_array_equal(back.data, volume)
    assert back.axes == "ZYX"
    np.testing.assert_allclose(back.scale, (0.4, 0.1, 0.1), rtol=1e-6)
    assert back.units == ("um", "um", "um")
    assert back.provenance == record
    with tifffile.TiffFile(written[0]) as tif:
        assert tif.is_imagej and tif.imagej_metadata["spacing"] == pytest.approx(0.4)
    np.testing.assert_array_equal(layer.data, volume)  # the layer is untouched


def test_napari_save_layers_uses_the_writer_and_keeps_camera_counts_exact(
    make_napari_viewer, tmp_path
):
    import napari

    viewer = make_napari_viewer()
    counts = RNG.integers(90, 4000, (25, 33)).astype(np.uint16)
    layer = viewer.add_image(counts, name="raw", scale=(0.1, 0.1), units="um")

    written = napari.save_layers(str(tmp_path / "raw.tif"), [layer], plugin="napari-gpuscope")

    back = read_tiff(written[0])
    assert back.data.dtype == np.uint16  # integers within 0..65535 stay integers
    np.testing.assert_array_equal(back.data, counts)
    assert back.provenance is None  # an input layer has none, and none is invented


def test_writer_is_offered_for_an_image_layer_and_tif_names():
    from npe2 import PluginManager

    manager = PluginManager.instance()
    writers = list(manager.iter_compatible_writers(["image"]))
    ours = [w for w in writers if w.command == WRITER_COMMAND]
    assert ours and ".tif" in ours[0].filename_extensions
    # Two layers are not one image: the writer is not offered.
    assert WRITER_COMMAND not in {w.command for w in manager.iter_compatible_writers(["image"] * 2)}


def test_writer_function_handles_multiscale_and_refuses_rgb(tmp_path):
    level0 = RNG.random((32, 32)).astype(np.float32)
    written = write_image_tiff(
        str(tmp_path / "ms.tif"), [level0, level0[::2, ::2]], {"multiscale": True, "name": "ms"}
    )
    np.testing.assert_array_equal(read_tiff(written[0]).data, level0)
    with pytest.raises(ValueError, match="RGB"):
        write_image_tiff(
            str(tmp_path / "rgb.tif"), np.zeros((4, 4, 3), np.uint8), {"rgb": True, "name": "c"}
        )
    assert not (tmp_path / "rgb.tif").exists()


@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        (np.array([[0, 65535]], np.int32), np.uint16),
        (np.array([[-1, 3]], np.int16), np.float32),  # negative: float keeps it exactly
        (np.array([[0, 70000]], np.int64), np.float32),
        (np.array([[True, False]]), np.uint16),
        (np.array([[0.5, 1.25]], np.float64), np.float32),
    ],
)
def test_sample_type_keeps_values(tmp_path, data, dtype):
    written = write_image_tiff(str(tmp_path / "x.tif"), data, {"name": "x"})
    back = read_tiff(written[0])
    assert back.data.dtype == dtype
    np.testing.assert_array_equal(back.data.astype(np.float64), data.astype(np.float64))


def test_file_save_selected_layers_menu_writes_through_our_writer(
    make_napari_viewer, tmp_path, monkeypatch
):
    """The real menu entry: napari's save dialog lists our format; picking it uses our writer."""
    from napari._qt import qt_viewer
    from qtpy.QtWidgets import QFileDialog

    viewer = make_napari_viewer()
    data = RNG.random((20, 24)).astype(np.float32)
    record = _record()
    layer = viewer.add_image(data, name="denoised", metadata={PROVENANCE_KEY: record})
    viewer.layers.selection = {layer}
    offered = {}

    def fake_dialog(*args, filter="", **kwargs):
        offered["filters"] = filter.split(";;")
        ours = next(f for f in offered["filters"] if f.startswith("napari-gpuscope"))
        return str(tmp_path / "denoised.tif"), ours

    monkeypatch.setattr(QFileDialog, "getSaveFileName", fake_dialog)
    monkeypatch.setattr(qt_viewer, "get_save_history", lambda: [str(tmp_path)])
    monkeypatch.setattr(qt_viewer, "update_save_history", lambda path: None)

    file_menu = viewer.window._qt_window.menuBar().actions()[0].menu()
    save = next(a for a in file_menu.actions() if a.text().startswith("Save Selected Layers"))
    save.trigger()

    assert "napari-gpuscope ImageJ TIFF with provenance (*.tif *.tiff)" in offered["filters"]
    back = read_tiff(tmp_path / "denoised.tif")
    assert back.provenance == record
    np.testing.assert_array_equal(back.data, data)
