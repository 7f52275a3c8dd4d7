"""A method is added by one edit: its registry entry (plus new files).

The test-only method of ``tiny_method.py`` is registered at run time and must then appear,
with nothing else changed, wherever the house lists methods: the CLI, recipes, the recipe
schema, the headless demo, batch runs, the generated manifest and the docks' menu model (the
README's menu table). Its dock runs in ``tests/widgets/test_tiny_dock.py``.

A registration inside a test comes after the tables the tests build at collection (lists of
methods, parametrizations) and cannot reach them. So the tests' method *package*
(``tests/fake_method_pkg``: a compute package, samples, a dock and its registry entry) is
registered before collection, by ``tests/conftest.py`` when
``NAPARI_GPUSCOPE_TEST_METHOD_PACKAGE=1``, in a pytest run of its own
(``test_the_method_package_is_everywhere_with_its_entry_alone``): :class:`TestMethodPackage`
and the registry-driven tests of other modules (``REGISTRY_DRIVEN``) run there with it
registered; the rest of the suite sees the plugin's own methods.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import tifffile
import yaml

from fake_method_pkg import ENV as PACKAGE_ENV
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


# ---------------------------------------------------------------------------- a method package
TESTS = Path(__file__).resolve().parent
IN_PACKAGE_RUN = os.environ.get(PACKAGE_ENV) == "1"


@pytest.mark.skipif(
    not IN_PACKAGE_RUN,
    reason="runs in the method package's own pytest run "
    "(test_the_method_package_is_everywhere_with_its_entry_alone)",
)
class TestMethodPackage:
    """The tests' method package ("clip"), its entry registered before collection and nothing
    else changed, wherever the house lists methods."""

    @pytest.fixture(autouse=True)
    def _package(self):
        from fake_method_pkg import compute, samples
        from fake_method_pkg.entry import SPEC as CLIP

        self.spec, self.compute, self.samples = CLIP, compute, samples

    def test_its_entry_was_registered_before_collection(self):
        assert methods.METHODS["clip"] is self.spec
        assert list(methods.METHODS)[-1] == "clip"  # after the plugin's own
        assert self.spec.compute_package == "fake_method_pkg.compute"
        params = self.spec.params_class()
        assert params is self.compute.ClipParams and params.method_id == "clip"
        assert self.spec.job_function().params_class is params

    def test_its_sample_layers_carry_a_scale_and_an_intensity_unit(self):
        for sample in self.spec.samples:
            for data, kwargs, layer_type in sample.load():
                assert layer_type == "image" and len(kwargs["scale"]) == np.ndim(data)
                assert kwargs["metadata"]["intensity_unit"] == "ADU"

    def test_the_cli_writes_validates_and_runs_its_recipe(self, tmp_path, capsys, inprocess_client):
        from napari_gpuscope.batch.store import BatchStore

        with pytest.raises(SystemExit):
            main(["recipe", "--help"])
        assert "clip" in capsys.readouterr().out
        path = tmp_path / "clip.yaml"
        assert main(["recipe", "clip", "--set", "low=10", "--set", "high=50", "-o", str(path)]) == 0
        assert load_recipe(path).params_model() == self.compute.ClipParams(low=10.0, high=50.0)

        data = self.samples.gradient()[0][0]
        tifffile.imwrite(tmp_path / "field.tif", data)
        source, out = str(tmp_path / "field.tif"), str(tmp_path / "out.zarr")
        assert main(["validate", str(path), source]) == 0
        args = ["run", str(path), source, "--out", out, "--device", "cpu", "--no-progress"]
        assert main([*args, "--dry-run"]) == 0
        assert "clip: 1 positions" in capsys.readouterr().out
        # The scheduler of the in-process cluster: its worker threads see the registration.
        assert main([*args, "--cluster", inprocess_client.scheduler.address]) == 0
        written = BatchStore(tmp_path / "out.zarr").read_position("field")
        np.testing.assert_array_equal(written, np.clip(data.astype(np.float32), 10, 50))
        assert main(["status", out]) == 0

    def test_a_recipe_validates_and_round_trips(self):
        recipe = Recipe.from_defaults("clip", low=1.0, high=2.0)
        again = Recipe.from_yaml(recipe.to_yaml())
        assert again == recipe and again.hash() == recipe.hash()
        with pytest.raises(RecipeError, match="low"):
            Recipe.from_data(
                {"schema_version": 1, "method": "clip", "params": {"low": 5.0, "high": 1.0}}
            )
        with pytest.raises(RecipeError, match="factor"):
            Recipe.from_data({"schema_version": 1, "method": "clip", "params": {"factor": 2}})

    def test_the_recipe_schema_lists_it_and_its_parameters(self):
        schema = recipe_json_schema()
        assert "clip" in schema["properties"]["method"]["enum"]
        recipe = Recipe.from_defaults("clip", high=7.0).model_dump(mode="json")
        jsonschema.validate(recipe, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**recipe, "params": {"high": 1e7}}, schema)
        text = generate.generated_files()[generate.ROOT / "docs" / "recipe.schema.json"]
        assert '"ClipParams"' in text

    def test_the_generated_manifest_contributes_its_dock_sample_and_menu(self):
        from napari._app_model.constants._menus import is_menu_contributable
        from npe2 import PluginManifest

        text = generate.generated_files()[generate.ROOT / "napari.yaml"]
        data = yaml.safe_load(text)
        contributions = PluginManifest(**data).contributions  # npe2 validates every entry
        commands = {c.id: c.python_name for c in contributions.commands}
        assert commands[self.spec.command_id] == "fake_method_pkg.dock:ClipDock"
        (sample,) = self.spec.samples
        assert commands[sample.command_id] == "fake_method_pkg.samples:gradient"
        for name in (commands[self.spec.command_id], commands[sample.command_id]):
            assert methods.load(name)  # what napari will import
        widgets = {w.command: w.display_name for w in contributions.widgets}
        assert widgets[self.spec.command_id] == self.spec.title
        assert {s.key: s.command for s in contributions.sample_data}[sample.key] == (
            sample.command_id
        )
        menu = data["contributions"]["menus"][self.spec.menu]
        assert menu[-1] == {"command": self.spec.command_id} and is_menu_contributable(
            self.spec.menu
        )

    def test_the_menus_and_the_docs_list_it(self):
        entry = "Clip (test package) (napari-gpuscope)"
        assert self.spec.menu_paths == (
            ("Plugins", "napari-gpuscope", entry),
            ("Layers", "Filter", entry),
        )
        files = generate.generated_files()
        readme = files[generate.ROOT / "README.md"]
        assert (
            f"| Clip (test package) | **Plugins > napari-gpuscope > {entry}**, "
            f"**Layers > Filter > {entry}** | [docs/clip.md](docs/clip.md) |"
        ) in readme
        assert "| **Clip (test package)** | available | Clips an image" in readme
        guide = files[generate.ROOT / "docs" / "user-guide.md"]
        assert "- [Clipping (tests)](clip.md)\n" in guide

    def test_the_generator_finds_every_generated_file_stale_and_rewrites_them(
        self, tmp_path, capsys
    ):
        names = ("napari.yaml", "README.md", "docs/user-guide.md", "docs/recipe.schema.json")
        names += ("pyproject.toml",)
        for name in names:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text((generate.ROOT / name).read_text())
        assert generate.main(["--check", "--root", str(tmp_path)]) == 1
        stale = capsys.readouterr().out
        assert all(name in stale for name in names), stale
        assert generate.main(["--root", str(tmp_path)]) == 0
        assert generate.main(["--check", "--root", str(tmp_path)]) == 0

    def test_the_import_linter_contracts_as_generated_hold_it(self, tmp_path):
        import tomllib

        text = generate.generated_files()[generate.ROOT / "pyproject.toml"]
        linter = tomllib.loads(text)["tool"]["importlinter"]
        assert linter["root_packages"] == ["napari_gpuscope", "fake_method_pkg"]
        contracts = {c["type"]: c for c in linter["contracts"] if c["type"] != "forbidden"}
        assert contracts["independence"]["modules"][-1] == "fake_method_pkg.compute"
        compute_rules = [c for c in linter["contracts"] if c["type"] == "forbidden"][:2]
        for contract in compute_rules:
            assert contract["source_modules"] == [
                "napari_gpuscope.compute",
                "fake_method_pkg.compute",
            ]
        (tmp_path / "pyproject.toml").write_text(text)
        assert self._lint(tmp_path, TESTS) == []
        # A copy of the package whose job reaches into TV's package and the registry is caught.
        copy = tmp_path / "copy"
        shutil.copytree(TESTS / "fake_method_pkg", copy / "fake_method_pkg")
        job = copy / "fake_method_pkg" / "compute" / "_job.py"
        job.write_text(
            job.read_text()
            + "\nimport napari_gpuscope.compute.tv\nimport napari_gpuscope.methods\n"
        )
        assert self._lint(tmp_path, copy) == [
            "The compute layer never imports the docks, export or the registry",
            "Method packages are independent of each other (phase may use TV's proximal step)",
        ]

    @staticmethod
    def _lint(folder: Path, packages: Path) -> list[str]:
        """The names of the contracts of ``folder/pyproject.toml`` that lint-imports finds
        broken, with ``packages`` first on the path."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(packages), str(TESTS)])}
        lint = Path(sys.executable).with_name("lint-imports")
        done = subprocess.run(
            [str(lint), "--no-cache", str(folder / "pyproject.toml")],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert "Contracts:" in done.stdout, done.stdout + done.stderr
        found = (re.match(r"(.*?)\s*BROKEN\b", line) for line in done.stdout.splitlines())
        broken = [match.group(1) for match in found if match]
        assert (done.returncode == 0) == (not broken), done.stdout
        return broken

    def test_the_headless_demo_writes_its_figure(self, tmp_path, capsys):
        from napari_gpuscope.demos import available_demos

        assert available_demos()["clip"] is self.spec
        argv = ["demo", "--headless", "--methods", "clip", "--out", str(tmp_path)]
        assert main([*argv, "--device", "cpu"]) == 0
        figures = sorted(path.stem for path in tmp_path.glob("*.json"))
        assert figures == [sample.key for sample in self.spec.samples]
        sidecar = yaml.safe_load((tmp_path / "clip-gradient.json").read_text())
        (entry,) = sidecar["provenance"]
        assert entry["provenance"]["method"] == "clip"
        assert len(sidecar["figure"]["panels"]) == 2
        assert "pixels clipped" in capsys.readouterr().out


# What the method package's own run must pass beside TestMethodPackage: tests of other modules
# that list the registry when they are collected, here for the package's method ("clip").
REGISTRY_DRIVEN = (
    "tests/test_registry.py::test_every_registry_entry_resolves",
    "tests/compute/test_layer_names.py::test_every_maker_is_a_registered_job",
    "tests/compute/test_layer_names.py::"
    "test_every_result_layer_name_starts_with_what_it_shows[clip-clip]",
    "tests/test_quick_commands.py::test_a_method_package_exports_everything_lazily[clip]",
    "tests/widgets/test_dock_recipes.py::test_recipe_round_trip_dock_yaml_model_dock[clip]",
    "tests/widgets/test_tiny_dock.py::test_the_method_package_runs_from_its_dock",
    "tests/widgets/test_dock_fuzz.py::"
    "test_bad_values_through_set_param_are_refused_naming_the_field[clip]",
    "tests/widgets/test_dock_fuzz.py::test_bad_inputs_get_a_clear_answer_and_stay_untouched[clip]",
)


@pytest.mark.slow
def test_the_method_package_is_everywhere_with_its_entry_alone(tmp_path):
    """The tests' method package, registered before collection, passes every check of
    :class:`TestMethodPackage` and the registry-driven tests of other modules (its layer names
    against its ``output_kinds``, its lazy exports, its dock's recipe round trip, a run from
    its dock)."""
    if IN_PACKAGE_RUN:
        pytest.skip("this is the method package's run")
    root = TESTS.parent
    report = tmp_path / "report.xml"
    here = Path(__file__).relative_to(root).as_posix()
    env = {**os.environ, PACKAGE_ENV: "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    command += [f"--junitxml={report}", f"{here}::TestMethodPackage", *REGISTRY_DRIVEN]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert report.is_file(), done.stdout[-4000:] + done.stderr[-4000:]
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        outcomes[case.get("name")] = "failed" if failed else "skipped" if skipped else "passed"
    expected = [node.rpartition("::")[2] for node in REGISTRY_DRIVEN]
    expected += [name for name in vars(TestMethodPackage) if name.startswith("test_")]
    assert {name: outcomes.get(name) for name in expected} == dict.fromkeys(expected, "passed"), (
        done.stdout[-8000:]
    )
    assert done.returncode == 0, done.stdout[-8000:]
