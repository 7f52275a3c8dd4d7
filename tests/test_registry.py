"""The method registry is the single list of methods: napari.yaml (generated from it, see
tests/test_generate.py), napari's menus, the README, the CLI and the demo agree with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from napari_gpuscope import methods
from napari_gpuscope.compute.params import Params

MANIFEST = Path(__file__).resolve().parents[1] / "napari.yaml"


def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def test_manifest_widgets_and_samples_are_exactly_the_registry():
    contributions = manifest()["contributions"]
    commands = {c["id"]: c for c in contributions["commands"]}
    widgets = {w["command"]: w for w in contributions["widgets"]}
    samples = {s["key"]: s for s in contributions["sample_data"]}
    expected_widgets = {spec.command_id for spec in methods.METHODS.values()}
    expected_samples = {s.key for spec in methods.METHODS.values() for s in spec.samples}
    assert set(widgets) == expected_widgets
    assert set(samples) == expected_samples
    for spec in methods.METHODS.values():
        assert widgets[spec.command_id]["display_name"] == spec.title
        assert commands[spec.command_id]["python_name"] == spec.dock
        for sample in spec.samples:
            entry = samples[sample.key]
            assert entry["display_name"] == sample.title
            assert entry["command"] == sample.command_id
            assert commands[sample.command_id]["python_name"] == sample.function


def test_every_registry_entry_resolves():
    for spec in methods.METHODS.values():
        params = spec.params_class()
        assert issubclass(params, Params) and params.method_id == spec.id
        job = spec.job_function()
        assert getattr(job, "params_class", None) is params
        for sample in spec.samples:
            layers = sample.load()
            assert layers and all(len(layer) == 3 for layer in layers)
            assert isinstance(spec.params_for_sample(layers[0][1]), params)
            for data, kwargs, _ in layers:  # docs/architecture.md: samples carry a scale
                assert len(kwargs.get("scale", ())) == np.ndim(data), (sample.key, kwargs)


def test_importing_the_registry_imports_neither_torch_nor_qt():
    import subprocess
    import sys

    code = (
        "import sys, napari_gpuscope.methods\n"
        "print(','.join(m for m in ('torch', 'qtpy', 'napari') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_one_plugin_name_in_menus_and_dock_titles():
    # napari titles menu entries and docks opened from menus "<widget> (<display_name>)", and
    # docks opened by add_plugin_dock_widget / `napari -w` "<widget> (<name>)".
    data = manifest()
    assert data["display_name"] == data["name"] == methods.PLUGIN


def test_every_dock_is_in_a_layers_menu_napari_offers_to_plugins():
    from napari._app_model.constants._menus import is_menu_contributable

    menus = manifest()["contributions"]["menus"]
    for spec in methods.METHODS.values():
        placed = [
            menu
            for menu, items in menus.items()
            if any(item.get("command") == spec.command_id for item in items)
        ]
        assert placed == [spec.menu], f"{spec.command_id} is not (only) in {spec.menu}"
        assert is_menu_contributable(spec.menu)


def test_the_menu_model_titles_layers_submenus_as_napari_does():
    from dataclasses import replace

    from napari._app_model.constants._menus import MenuId, is_menu_contributable
    from napari._qt._qapp_model.qactions._layers_actions import LAYERS_SUBMENUS

    spec = methods.method("tv")
    titles = {
        str(item.submenu): item.title
        for parent, item in LAYERS_SUBMENUS
        if parent == MenuId.MENUBAR_LAYERS and is_menu_contributable(str(item.submenu))
    }
    assert "napari/layers/filter" in titles
    for menu, title in titles.items():
        assert replace(spec, menu=menu).menu_paths[1] == ("Layers", title, spec.menu_title)


def _menu_actions(viewer, *path: str):
    """The QActions of a menu of the main window, found by their visible titles."""
    menu = viewer.window._qt_window.menuBar()
    actions = menu.actions()
    for title in path:
        action = next(a for a in actions if a.text().replace("&", "") == title)
        actions = action.menu().actions()
    return {a.text(): a for a in actions if a.text()}


def test_layers_filter_entry_opens_the_same_dock_as_the_plugins_menu(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    plugin_items = _menu_actions(viewer, "Plugins")
    # napari lists a plugin's only widget in Plugins itself, several in a submenu.
    if methods.PLUGIN in plugin_items:
        plugin_items = _menu_actions(viewer, "Plugins", methods.PLUGIN)
    for spec in methods.METHODS.values():
        title = spec.menu_title
        assert spec.menu_paths[0] == ("Plugins", methods.PLUGIN, title)
        assert title in plugin_items
        layers_items = _menu_actions(viewer, *spec.menu_paths[1][:-1])
        layers_items[title].trigger()
        qtbot.waitUntil(lambda title=title: title in viewer.window.dock_widgets)
        dock = viewer.window.dock_widgets[title]
        assert isinstance(dock, spec.dock_class())
        # The scripting route names the dock the same, so it finds this one instead of a twin.
        _, again = viewer.window.add_plugin_dock_widget(methods.PLUGIN, spec.title)
        assert again is dock
        assert list(viewer.window.dock_widgets).count(title) == 1


def test_file_menu_entries_carry_the_plugin_name(make_napari_viewer):
    viewer = make_napari_viewer()
    items = _menu_actions(viewer, "File", "IO Utilities")
    assert "Export figure with provenance... (napari-gpuscope)" in items
    assert "Save result as TIFF... (napari-gpuscope)" in items
    samples = _menu_actions(viewer, "File", "Open Sample", methods.PLUGIN)
    expected = {s.title for spec in methods.METHODS.values() for s in spec.samples}
    assert expected <= set(samples)


def test_readme_names_the_menu_entries_napari_builds():
    # The menu model (MethodSpec.menu_paths) is what the test above clicks through.
    readme = (MANIFEST.parent / "README.md").read_text()
    for spec in methods.METHODS.values():
        for path in spec.menu_paths:
            # napari lists several docks of one plugin in a submenu named after the plugin
            assert f"**{' > '.join(path)}**" in readme
    assert "Plugins > GPU Scope" not in readme
