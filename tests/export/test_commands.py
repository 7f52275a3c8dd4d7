"""File-menu commands: menu registration, dialogs bypassed/monkeypatched, cancel writes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from qtpy.QtWidgets import QDialog, QFileDialog

from napari_gpuscope.export import commands, read_tiff
from napari_gpuscope.export._dialogs import (
    FigureOptionsDialog,
    TiffOptionsDialog,
    napari_stylesheet,
)
from napari_gpuscope.export.commands import (
    SAVE_TIFF_COMMAND,
    SCREENSHOT_COMMAND,
    default_export_layer,
    export_screenshot_dialog,
    save_tiff_dialog,
)
from napari_gpuscope.export.figure import FigureOptions
from napari_gpuscope.export.tiff_samples import TiffOptions
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance

IO_MENU = "napari/file/io_utilities"


def _record() -> dict:
    return build_provenance(
        "tv", {"weight": 0.2}, device="cpu", input_name="raw", elapsed_seconds=0.1
    )


@pytest.fixture
def file_dialog(monkeypatch):
    """Replace the native save dialog; ``answer["path"] = None`` simulates Cancel."""
    answer: dict = {"path": None, "calls": []}

    def fake(parent, caption, directory, file_filter):
        answer["calls"].append((caption, directory, file_filter))
        return ("" if answer["path"] is None else str(answer["path"]), file_filter)

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(fake))
    return answer


@pytest.fixture
def notifications(monkeypatch, tmp_path_factory):
    """Capture notifications; also keep napari's save history out of the user's settings."""
    monkeypatch.setattr(commands, "_save_folder", lambda: tmp_path_factory.getbasetemp())
    monkeypatch.setattr(commands, "_remember_folder", lambda path: None)
    shown: list[tuple[str, str]] = []
    for level in ("error", "warning", "info"):
        monkeypatch.setattr(
            commands, f"show_{level}", lambda msg, level=level: shown.append((level, msg))
        )
    return shown


@pytest.fixture
def viewer(make_napari_viewer):
    # Hidden viewer: these tests check files and metadata, not pixels (see test_screenshot.py).
    viewer = make_napari_viewer()
    raw = np.random.default_rng(3).random((32, 40)).astype(np.float32) * 100
    viewer.add_image(raw, name="raw", scale=(0.2, 0.2), units="um")
    viewer.add_image(
        raw / 2, name="denoised", scale=(0.2, 0.2), units="um", metadata={PROVENANCE_KEY: _record()}
    )
    return viewer


def test_manifest_puts_both_commands_in_the_file_io_menu():
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-gpuscope")
    assert manifest.name == "napari-gpuscope"
    menu_commands = [item.command for item in manifest.contributions.menus[IO_MENU]]
    assert menu_commands == [SCREENSHOT_COMMAND, SAVE_TIFF_COMMAND]
    python_names = {c.id: c.python_name for c in manifest.contributions.commands}
    assert python_names[SCREENSHOT_COMMAND].endswith("commands:export_screenshot_dialog")
    assert python_names[SAVE_TIFF_COMMAND].endswith("commands:save_tiff_dialog")


def test_app_model_file_menu_has_our_entries(viewer, notifications):
    from napari._app_model import get_app_model

    app = get_app_model()
    ids = {item.command.id for item in app.menus.get_menu(IO_MENU) if hasattr(item, "command")}
    assert {SCREENSHOT_COMMAND, SAVE_TIFF_COMMAND} <= ids


def test_menu_command_runs_with_injected_viewer(
    viewer, tmp_path, file_dialog, notifications, monkeypatch
):
    from napari._app_model import get_app_model

    file_dialog["path"] = tmp_path / "picked"  # no suffix: .tif is added
    viewer.layers.selection = {viewer.layers["raw"], viewer.layers["denoised"]}
    monkeypatch.setattr(TiffOptionsDialog, "exec", lambda dialog: QDialog.DialogCode.Accepted)
    get_app_model().commands.execute_command(SAVE_TIFF_COMMAND).result()
    back = read_tiff(tmp_path / "picked.tif")
    # Of the two selected layers, the result layer is saved.
    np.testing.assert_array_equal(back.data, viewer.layers["denoised"].data)
    assert back.provenance == viewer.layers["denoised"].metadata[PROVENANCE_KEY]
    assert notifications == [("info", "Saved picked.tif")]


def test_screenshot_dialog_writes_png_and_sidecar(viewer, tmp_path, file_dialog, notifications):
    file_dialog["path"] = tmp_path / "shot.png"
    files = export_screenshot_dialog(viewer, zoom=1, colorbar=True)
    assert files is not None and files.png.is_file() and files.sidecar.is_file()
    sidecar = json.loads(files.sidecar.read_text())
    assert sidecar["colorbar"] is True and sidecar["figure"]["zoom"] == 1
    assert [entry["layer"] for entry in sidecar["provenance"]] == ["denoised"]
    assert len(file_dialog["calls"]) == 1
    assert notifications[0][0] == "info"


def test_screenshot_options_dialog_values_are_used(
    viewer, tmp_path, file_dialog, notifications, monkeypatch
):
    file_dialog["path"] = tmp_path / "opt.png"
    seen = {}

    def fake_exec(dialog):
        seen["defaults"] = dialog.options()
        dialog.zoom_spin.setValue(2)
        dialog.width_spin.setValue(120.0)  # print width: the DPI follows
        dialog.scale_bar_check.setChecked(False)
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(FigureOptionsDialog, "exec", fake_exec)
    files = export_screenshot_dialog(viewer)
    assert seen["defaults"] == FigureOptions(  # zoom None: automatic
        zoom=None, dpi=300.0, width_mm=None, colorbar=False, scale_bar=True, titles=False
    )
    sidecar = json.loads(files.sidecar.read_text())
    assert sidecar["figure"]["zoom"] == 2 and sidecar["scale_bar"] is False
    assert sidecar["figure"]["size_mm"][0] == pytest.approx(120.0)


@pytest.mark.parametrize("cancel_at", ["file", "options"])
def test_cancelling_screenshot_writes_nothing(
    viewer, tmp_path, file_dialog, notifications, monkeypatch, cancel_at
):
    file_dialog["path"] = None if cancel_at == "file" else tmp_path / "never.png"
    monkeypatch.setattr(FigureOptionsDialog, "exec", lambda dialog: QDialog.DialogCode.Rejected)
    assert export_screenshot_dialog(viewer) is None
    assert list(tmp_path.iterdir()) == []
    assert notifications == []


@pytest.mark.parametrize("cancel_at", ["file", "options"])
def test_cancelling_tiff_writes_nothing(
    viewer, tmp_path, file_dialog, notifications, monkeypatch, cancel_at
):
    file_dialog["path"] = None if cancel_at == "file" else tmp_path / "never.tif"
    monkeypatch.setattr(TiffOptionsDialog, "exec", lambda dialog: QDialog.DialogCode.Rejected)
    assert save_tiff_dialog(viewer) is None
    assert list(tmp_path.iterdir()) == []


def test_tiff_dialog_options_choose_uint16_minmax(
    viewer, tmp_path, file_dialog, notifications, monkeypatch
):
    file_dialog["path"] = tmp_path / "q.tif"

    def fake_exec(dialog):
        assert dialog.options() == TiffOptions(dtype="float32", uint16_scaling="clip")
        assert not dialog.scaling_combo.isEnabled()  # float32 default: scaling irrelevant
        dialog.dtype_combo.setCurrentText("uint16")
        assert dialog.scaling_combo.isEnabled()
        dialog.scaling_combo.setCurrentText("minmax")
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(TiffOptionsDialog, "exec", fake_exec)
    written = save_tiff_dialog(viewer, viewer.layers["raw"])
    back = read_tiff(written)
    assert back.data.dtype == np.uint16 and back.scaling is not None
    raw = viewer.layers["raw"].data
    assert np.abs(back.calibrated_data() - raw).max() <= back.scaling.slope


def test_tiff_dialog_with_explicit_arguments_needs_no_dialog(viewer, tmp_path, notifications):
    written = save_tiff_dialog(viewer, path=tmp_path / "direct.tif", dtype="uint16")
    back = read_tiff(written)
    expected = np.clip(np.round(viewer.layers["denoised"].data), 0, 65535).astype(np.uint16)
    np.testing.assert_array_equal(back.data, expected)


def test_errors_become_notifications(viewer, tmp_path, notifications):
    assert save_tiff_dialog(viewer, path=tmp_path / "x.tif", dtype="int8") is None
    assert notifications[-1][0] == "error" and "dtype" in notifications[-1][1]
    assert export_screenshot_dialog(viewer, path=tmp_path / "x.jpg", zoom=1) is None
    assert notifications[-1][0] == "error" and "PNG" in notifications[-1][1]
    assert list(tmp_path.iterdir()) == []


def test_no_image_layer_warns(make_napari_viewer, tmp_path, notifications):
    viewer = make_napari_viewer()
    viewer.add_points([[1, 1]])
    assert save_tiff_dialog(viewer, path=tmp_path / "p.tif", dtype="float32") is None
    assert notifications == [("warning", "Select an image layer to save as TIFF.")]


def test_default_export_layer_prefers_results_then_active_image(viewer):
    raw, denoised = viewer.layers["raw"], viewer.layers["denoised"]
    viewer.layers.selection = {raw, denoised}
    assert default_export_layer(viewer) is denoised  # selected result layer
    viewer.layers.selection.active = raw
    assert default_export_layer(viewer) is raw  # no result selected: active image
    viewer.layers.selection.clear()
    assert default_export_layer(viewer) is None


def test_figure_dialog_links_dpi_and_print_width_and_shows_the_size(viewer, qtbot):
    dialog = FigureOptionsDialog(FigureOptions(zoom=1), viewer=viewer)
    qtbot.addWidget(dialog)
    # The two 32 x 40 layers, grid off: one panel, zoom 1, 300 dpi.
    text = dialog.size_label.text()
    assert "300 dpi" in text
    assert "1 panel of 40 \u00d7 32 data pixels, each shown as 1 \u00d7 1" in text
    width_at_300 = dialog.width_spin.value()
    dialog.zoom_spin.setValue(3)
    assert "each shown as 3 \u00d7 3 pixels" in dialog.size_label.text()
    assert dialog.width_spin.value() > width_at_300  # same dpi, three times the panel pixels
    assert 10.0 < dialog.width_spin.value() < 20.0  # about 140 pixels at 300 dpi
    dialog.width_spin.setValue(8.0)
    options = dialog.options()
    assert options.width_mm == 8.0 and options.dpi is None
    assert dialog.dpi_spin.value() > 300  # a narrower print of the same pixels: more dpi
    dialog.dpi_spin.setValue(150)
    assert dialog.options().dpi == 150 and dialog.options().width_mm is None


def test_figure_dialog_disables_ok_and_says_why_when_nothing_is_visible(viewer, qtbot):
    for layer in viewer.layers:
        layer.visible = False
    dialog = FigureOptionsDialog(FigureOptions(), viewer=viewer)
    qtbot.addWidget(dialog)
    assert "no layer is visible" in dialog.size_label.text()
    assert not dialog.buttons.button(dialog.buttons.StandardButton.Ok).isEnabled()


@pytest.mark.parametrize("dialog_class", [FigureOptionsDialog, TiffOptionsDialog])
def test_export_dialogs_follow_the_viewer_theme(viewer, qtbot, dialog_class):
    from napari.qt import get_stylesheet
    from napari.settings import get_settings

    defaults = FigureOptions() if dialog_class is FigureOptionsDialog else TiffOptions()
    font = {"font_size": f"{get_settings().appearance.font_size}pt"}
    for theme in ("dark", "light"):
        viewer.theme = theme
        dialog = dialog_class(defaults, viewer=viewer)
        qtbot.addWidget(dialog)
        # The same stylesheet napari gives its own main window for this theme.
        assert dialog.styleSheet() == get_stylesheet(theme, extra_variables=font)
        assert dialog.styleSheet() == napari_stylesheet(viewer)
    dark = get_stylesheet("dark", extra_variables=font)
    assert dialog.styleSheet() != dark  # the light theme really is different


def test_dialog_stylesheet_is_the_main_window_stylesheet(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    dialog = FigureOptionsDialog(FigureOptions(), viewer=viewer)
    qtbot.addWidget(dialog)
    assert dialog.styleSheet() == viewer.window._qt_window.styleSheet()
