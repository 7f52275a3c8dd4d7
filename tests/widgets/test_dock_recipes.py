"""Every dock's "Recipe" row, "Save..." / "Load...": dock -> YAML -> model -> dock."""

from __future__ import annotations

import pytest
import yaml
from qtpy.QtWidgets import QFileDialog

from napari_gpuscope.batch.recipes import Recipe, load_recipe
from napari_gpuscope.methods import METHODS


def _changed_fields(dock) -> dict:
    """Move every shown float and int field off its default (within its bounds)."""
    changes = {}
    for info in dock.params_class.param_info():
        widget = dock.form.widgets.get(info.name)
        if widget is None or info.kind not in ("float", "int") or info.choices is not None:
            continue
        current = widget.value
        low, high = widget.min, widget.max
        target = current + (high - current) / 3 if high > current else (current + low) / 2
        target = round(target) if info.kind == "int" else round(target, 2)
        if low < target <= high and target != current:
            widget.value = target
            try:
                dock.params()  # a rule between fields may refuse it: then keep the old value
            except ValueError:
                widget.value = current
                continue
            changes[info.name] = widget.value
    return changes


@pytest.mark.parametrize("method_id", list(METHODS))
def test_recipe_round_trip_dock_yaml_model_dock(viewer, qtbot, cpu_device, tmp_path, method_id):
    spec = METHODS[method_id]
    data, kwargs, _ = spec.samples[0].load()[0]
    viewer.add_image(data, **{k: v for k, v in kwargs.items() if k != "metadata"})
    dock = spec.dock_class()(viewer)
    qtbot.addWidget(dock)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    changes = _changed_fields(dock)
    assert changes, "no field could be changed"
    tuned = dock.params()

    path = dock.recipe_row.save(tmp_path / "tuned.yaml")

    text = path.read_text()
    assert "!!" not in text and "device" not in yaml.safe_load(text)
    recipe = load_recipe(path)
    assert recipe.method == method_id and recipe.params_model() == tuned
    assert recipe.input.pixel_size == pytest.approx(list(kwargs["scale"]))
    assert recipe.input.dtype == str(data.dtype) and recipe.input.ndim == data.ndim
    assert kwargs["name"] in recipe.provenance.source

    dock.reset_to_defaults()
    assert dock.params() != tuned
    assert dock.recipe_row.load(path) == recipe
    assert dock.params() == tuned
    assert "loaded" in dock.panel.status.text()


def test_dialogs_and_refusals(viewer, qtbot, cpu_device, tmp_path, monkeypatch):
    spec = METHODS["tv"]
    dock = spec.dock_class()(viewer)
    qtbot.addWidget(dock)
    target = tmp_path / "picked"
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(target), ""))
    )
    dock.recipe_row.save_button.click()
    assert load_recipe(tmp_path / "picked.yaml").method == "tv"
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: ("", "")))
    assert dock.recipe_row.load() is None  # cancelled: nothing changes

    other = Recipe.from_defaults("tv").model_dump(mode="json")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**other, "params": {"strength": "lots"}}))
    before = dock.params()
    assert dock.recipe_row.load(bad) is None
    assert "params.strength" in dock.panel.status.text()
    assert dock.params() == before
