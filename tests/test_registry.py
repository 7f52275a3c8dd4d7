"""The method registry is the single list of methods: napari.yaml, the CLI and the demo agree
with it."""

from __future__ import annotations

from pathlib import Path

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
        assert commands[spec.command_id]["python_name"] == spec.dock.replace(":", ":")
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


def test_importing_the_registry_imports_neither_torch_nor_qt():
    import subprocess
    import sys

    code = (
        "import sys, napari_gpuscope.methods\n"
        "print(','.join(m for m in ('torch', 'qtpy', 'napari') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
