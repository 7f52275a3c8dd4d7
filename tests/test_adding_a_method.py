"""A method is added by one edit: its registry entry (plus new files).

The test-only method of ``tiny_method.py`` is registered at run time and must then appear,
with nothing else changed, wherever the house lists methods: the CLI, recipes, the recipe
schema, the headless demo, batch runs, the generated manifest and the docks' menu model (the
README's menu table). Its dock runs in ``tests/widgets/test_tiny_dock.py``.
"""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest
import tifffile
import yaml

from napari_gpuscope import generate, methods
from napari_gpuscope.batch.recipes import Recipe, RecipeError, load_recipe
from napari_gpuscope.batch.schema import recipe_json_schema
from napari_gpuscope.cli import main
from tiny_method import SPEC, TinyOffsetParams, TinyParams, ramp

ENTRY = "Tiny scale: x|y (napari-gpuscope)"


@pytest.fixture
def tiny():
    with methods.registered(SPEC) as spec:
        yield spec


def test_registering_is_the_one_edit_and_is_undone():
    assert "tiny" not in methods.METHODS
    with methods.registered(SPEC):
        assert methods.method("tiny") is SPEC
        assert list(methods.METHODS)[-1] == "tiny"  # menu order: after the plugin's own
        with pytest.raises(ValueError, match="registered already"):
            methods.register(SPEC)
    assert "tiny" not in methods.METHODS


def test_a_taken_sample_key_or_a_bad_id_or_menu_is_refused():
    from dataclasses import replace

    taken = replace(SPEC, id="tiny2", samples=methods.method("tv").samples[:1])
    with pytest.raises(ValueError, match="tv-2d"):
        methods.register(taken)
    with pytest.raises(ValueError, match="lower-case"):
        replace(SPEC, id="Tiny-Scale")
    with pytest.raises(ValueError, match="Layers"):
        replace(SPEC, menu="napari/file/io_utilities")
    assert "tiny2" not in methods.METHODS


def test_the_cli_offers_it_and_writes_its_recipe(tiny, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["recipe", "--help"])
    assert "tiny" in capsys.readouterr().out

    path = tmp_path / "tiny.yaml"
    assert main(["recipe", "tiny", "--set", "factor=3", "-o", str(path)]) == 0
    assert load_recipe(path).params_model() == TinyParams(factor=3.0)

    tifffile.imwrite(tmp_path / "ramp.tif", ramp()[0][0])
    args = ["run", str(path), str(tmp_path / "ramp.tif"), "--out", str(tmp_path / "o.zarr")]
    assert main([*args, "--device", "cpu", "--dry-run"]) == 0
    assert "tiny: 1 positions" in capsys.readouterr().out


def test_a_recipe_validates_and_round_trips(tiny):
    recipe = Recipe.from_defaults("tiny", factor=4.5)
    again = Recipe.from_yaml(recipe.to_yaml())
    assert again == recipe and again.hash() == recipe.hash()
    assert again.params_model() == TinyParams(factor=4.5)
    with pytest.raises(RecipeError, match=r"params\.factor"):
        Recipe.from_data({"schema_version": 1, "method": "tiny", "params": {"factor": 11}})


def test_the_recipe_schema_lists_it_and_its_parameters(tiny):
    schema = recipe_json_schema()
    assert "tiny" in schema["properties"]["method"]["enum"]
    recipe = Recipe.from_defaults("tiny", factor=4.5).model_dump(mode="json")
    jsonschema.validate(recipe, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**recipe, "params": {"factor": 11.0}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**recipe, "params": {"strength": 1.0}}, schema)


def test_the_headless_demo_runs_it(tiny):
    from napari_gpuscope.demos import available_demos, run_demo

    assert available_demos()["tiny"] is SPEC
    (run,) = run_demo(SPEC, "cpu")
    data, kwargs, _ = run.result_layer
    np.testing.assert_array_equal(data, ramp()[0][0].astype(np.float32) * 3)
    assert run.provenance["method"] == "tiny"
    assert kwargs["name"] == "ramp [tiny x3]"


def test_a_batch_run_applies_it(tiny, tmp_path, inprocess_client):
    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.runner import run_batch
    from napari_gpuscope.batch.store import BatchStore

    image = ramp()[0][0]
    for index in range(2):
        tifffile.imwrite(tmp_path / f"field{index}.tif", image + index)
    recipe = Recipe.from_defaults("tiny", factor=0.5)
    # In-process workers see the method registered in this process.
    report = run_batch(
        recipe, discover(str(tmp_path / "field*.tif")), tmp_path / "out.zarr", inprocess_client
    )
    assert report.failed == {} and len(report.done) == 2
    written = BatchStore(tmp_path / "out.zarr").read_position("field1")
    np.testing.assert_array_equal(written, (image + 1).astype(np.float32) * 0.5)


def test_the_generated_manifest_contributes_its_dock_samples_and_menu(tiny):
    from npe2 import PluginManifest

    files = generate.generated_files()
    text = files[generate.ROOT / "napari.yaml"]
    assert text != (generate.ROOT / "napari.yaml").read_text()  # in memory only
    data = yaml.safe_load(text)
    manifest = PluginManifest(**data)  # npe2's own validation of every contribution
    contributions = manifest.contributions
    commands = {c.id: c for c in contributions.commands}
    assert commands["napari-gpuscope.tiny_dock"].title == SPEC.title  # quoted in the YAML
    assert commands["napari-gpuscope.tiny_dock"].python_name == SPEC.dock
    assert commands["napari-gpuscope.sample_tiny_ramp"].python_name == "tiny_method:ramp"
    widgets = {w.command: w.display_name for w in contributions.widgets}
    assert widgets["napari-gpuscope.tiny_dock"] == SPEC.title
    samples = {s.key: s.command for s in contributions.sample_data}
    assert samples["tiny-ramp"] == "napari-gpuscope.sample_tiny_ramp"
    menus = data["contributions"]["menus"]
    assert menus["napari/layers/transform"] == [{"command": "napari-gpuscope.tiny_dock"}]
    assert {"command": "napari-gpuscope.tiny_dock"} not in menus["napari/layers/filter"]
    # The hand-written contributions stay as they are.
    assert "napari-gpuscope.export_screenshot" in commands
    assert (
        menus["napari/file/io_utilities"]
        == yaml.safe_load((generate.ROOT / "napari.yaml").read_text())["contributions"]["menus"][
            "napari/file/io_utilities"
        ]
    )


def test_the_docks_menu_model_and_the_docs_list_it(tiny):
    assert SPEC.menu_paths == (
        ("Plugins", "napari-gpuscope", ENTRY),
        ("Layers", "Transform", ENTRY),
    )
    files = generate.generated_files()
    readme = files[generate.ROOT / "README.md"]
    escaped = ENTRY.replace("|", "\\|")
    assert (
        f"| Tiny scale: x\\|y | **Plugins > napari-gpuscope > {escaped}**, "
        f"**Layers > Transform > {escaped}** | [docs/tiny.md](docs/tiny.md) |"
    ) in readme
    assert "| **Tiny scale: x\\|y** | available | Scales an image" in readme
    assert "submenu, **Layers > Filter** or **Layers > Transform** (both" in readme.replace(
        "\n", " "
    )
    guide = files[generate.ROOT / "docs" / "user-guide.md"]
    assert "- [Tiny scale: x|y](tiny.md)\n" in guide
    schema = files[generate.ROOT / "docs" / "recipe.schema.json"]
    assert (
        '"TinyParams"' in schema
        and '"TinyScaleRecipe"' in schema
        and '"TinyOffsetRecipe"' in schema
    )


def test_its_second_job_has_its_own_model_recipe_schema_and_batch_run(
    tiny, tmp_path, inprocess_client
):
    """A method's other jobs come with the same one edit: the job's entry in ``jobs``."""
    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.runner import run_batch
    from napari_gpuscope.batch.store import BatchStore

    path = tmp_path / "offset.yaml"
    assert main(["recipe", "tiny", "--job", "offset", "--set", "shift=5", "-o", str(path)]) == 0
    recipe = load_recipe(path)
    assert recipe.job == "offset" and recipe.params_model() == TinyOffsetParams(shift=5.0)
    schema = recipe_json_schema()
    jsonschema.validate(recipe.model_dump(mode="json"), schema)
    with pytest.raises(jsonschema.ValidationError):  # the other job's field
        jsonschema.validate({**recipe.model_dump(mode="json"), "params": {"factor": 2}}, schema)
    tifffile.imwrite(tmp_path / "field.tif", ramp()[0][0])
    fields = discover(str(tmp_path / "field.tif"))
    report = run_batch(recipe, fields, tmp_path / "o.zarr", inprocess_client)
    assert report.failed == {}
    written = BatchStore(tmp_path / "o.zarr").read_position("field")
    np.testing.assert_array_equal(written, ramp()[0][0].astype(np.float32) + 5)
