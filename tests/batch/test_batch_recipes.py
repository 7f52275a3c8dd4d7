"""Recipes: YAML round trip, safe loading, errors that name the key, hash, schema, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from napari_gpuscope.batch.recipe_sections import Artifact, file_sha256
from napari_gpuscope.batch.recipes import Recipe, RecipeError, load_recipe
from napari_gpuscope.batch.schema import recipe_json_schema
from napari_gpuscope.cli import main
from napari_gpuscope.compute.tv import TVParams
from napari_gpuscope.methods import METHODS

DOCS_SCHEMA = Path(__file__).parents[2] / "docs" / "recipe.schema.json"


def test_round_trip_keeps_every_parameter_and_fact(tmp_path):
    params = TVParams(strength=1.25, noise_model="poisson", spacing=(0.4, 0.1, 0.1), tolerance=2e-4)
    recipe = Recipe.from_params(
        params,
        input={"axes": ["z", "y", "x"], "pixel_size": [0.4, 0.1, 0.1], "dtype": "uint16"},
        source="cells.tif",
    )
    loaded = load_recipe(recipe.save(tmp_path / "r.yaml"))
    assert loaded == recipe
    assert loaded.params_model() == params
    assert loaded.hash() == recipe.hash()
    assert loaded.provenance.source == "cells.tif"
    assert loaded.provenance.software["torch"]  # versions recorded
    assert "device" not in yaml.safe_load((tmp_path / "r.yaml").read_text())


def test_unsafe_yaml_tags_are_refused_without_running_them(tmp_path):
    marker = tmp_path / "pwned"
    text = (
        "schema_version: 1\nmethod: tv\n"
        f"params: !!python/object/apply:os.system ['touch {marker}']\n"
    )
    with pytest.raises(RecipeError, match="not a safe YAML recipe"):
        Recipe.from_yaml(text)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("schema_version: 1\nmethod: tv\ndevice: cuda:0\n", "device: unknown key"),
        ("schema_version: 1\nmethod: tv\ninput: {pixel_sise: [1]}\n", "input.pixel_sise"),
        ("schema_version: 1\nmethod: tv\nparams: {strenght: 1}\n", "params.strenght"),
        ("schema_version: 1\nmethod: tv\nparams: {strength: high}\n", "params.strength"),
        ("schema_version: 1\nmethod: tv\ninput: {ndim: '2'}\n", "input.ndim"),
        ("schema_version: 1\nmethod: tv\nparams: {max_iterations: 1.5}\n", "max_iterations"),
        ("schema_version: 2\nmethod: tv\n", "schema_version"),
        ("schema_version: 1\nmethod: nope\n", "unknown method 'nope'"),
        ("method: tv\n", "schema_version: required key missing"),
        ("- a list\n", "a recipe is a mapping"),
    ],
)
def test_invalid_recipes_are_rejected_naming_the_key(text, key):
    with pytest.raises(RecipeError) as error:
        Recipe.from_yaml(text, origin="r.yaml")
    assert key in str(error.value)
    assert str(error.value).startswith("r.yaml: ")


def test_hash_follows_parameters_and_artifacts_not_provenance(tmp_path):
    base = Recipe.from_defaults("tv")
    again = Recipe.from_params(TVParams(), source="elsewhere")
    assert again.hash() == base.hash()  # other provenance, same computation
    assert Recipe.from_defaults("tv", strength=1.1).hash() != base.hash()
    profile = tmp_path / "profile.npz"
    profile.write_bytes(b"profile v1")
    pinned = base.model_copy(
        update={
            "artifacts": [
                Artifact(name="flatfield", path=profile.name, sha256=file_sha256(profile))
            ]
        }
    )
    assert pinned.hash() != base.hash()
    assert pinned.check_artifacts(tmp_path) == []
    profile.write_bytes(b"profile v2")
    assert "changed since the recipe was saved" in pinned.check_artifacts(tmp_path)[0]
    profile.unlink()
    assert "not found" in pinned.check_artifacts(tmp_path)[0]


def test_published_schema_is_current_and_validates_recipes():
    current = recipe_json_schema()
    published = json.loads(DOCS_SCHEMA.read_text())
    assert published == current, (
        "docs/recipe.schema.json is stale: python -m napari_gpuscope.generate"
    )
    jsonschema.Draft202012Validator.check_schema(published)
    for method_id in METHODS:
        data = yaml.safe_load(Recipe.from_defaults(method_id).to_yaml())
        jsonschema.validate(data, published)
    bad = yaml.safe_load(Recipe.from_defaults("tv").to_yaml())
    bad["params"]["strenght"] = 1.0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, published)


def test_recipe_command_writes_defaults_with_changes(tmp_path, capsys):
    out = tmp_path / "tv.yaml"
    code = main(
        [
            "recipe",
            "tv",
            "--set",
            "strength=1.4",
            "--set",
            "spacing=[0.5, 0.1, 0.1]",
            "-o",
            str(out),
        ]
    )
    assert code == 0
    recipe = load_recipe(out)
    assert recipe.params_model() == TVParams(strength=1.4, spacing=(0.5, 0.1, 0.1))
    assert main(["recipe", "tv", "--set", "strength=-2", "-o", str(out)]) == 2
    assert "params.strength" in capsys.readouterr().err


OLD_RECIPES = Path(__file__).parent / "old_recipes"


@pytest.mark.parametrize(
    "name", sorted(json.loads((OLD_RECIPES / "hashes.json").read_text())), ids=str
)
def test_recipes_saved_by_earlier_versions_load_with_the_same_hash(name):
    """--resume across versions skips a position only while its recipe's hash is stable: the
    files and hashes were written by old_recipes/write_old_recipes.py before the parameter
    models moved to pydantic and recipes gained ``job``."""
    expected = json.loads((OLD_RECIPES / "hashes.json").read_text())[name]
    (path,) = OLD_RECIPES.glob(f"{name}.*")
    recipe = load_recipe(path)
    assert recipe.hash() == expected
    # Every value the recipe means, not only those it writes: a field left out may mean an
    # older default (eSRRF's drift_time_averaging: 50 before it became automatic).
    model = recipe.params_model()
    changes = {name: getattr(model, name) for name in model.names()}
    assert Recipe.from_defaults(recipe.method, **changes).hash() == expected
    if recipe.method == "esrrf":  # saved when drift blocks were 50 frames by default
        assert model.drift_time_averaging == 50


def test_a_recipe_names_its_job_and_is_validated_by_that_jobs_model(tmp_path):
    sweep = Recipe.from_defaults("esrrf", job="sweep", radii=(1.0, 2.0))
    assert (type(sweep).__name__, sweep.job, sweep.params["radii"]) == (
        "EsrrfSweepRecipe",
        "sweep",
        [1.0, 2.0],
    )
    loaded = load_recipe(sweep.save(tmp_path / "sweep.yaml"))
    assert loaded == sweep and loaded.hash() == sweep.hash()
    assert yaml.safe_load((tmp_path / "sweep.yaml").read_text())["job"] == "sweep"
    assert loaded.params_model().radii == (1.0, 2.0)
    assert sweep.hash() != Recipe.from_defaults("esrrf").hash()
    # The main job, absent or named, is the recipe of old: same YAML, same hash.
    run = Recipe.from_defaults("esrrf")
    assert run.job is None and "job" not in yaml.safe_load(run.to_yaml())
    named = Recipe.from_data({**run.model_dump(mode="json"), "job": "run"})
    assert named.hash() == run.hash() and named.job_spec().id == "run"
    # Flat-field's two jobs share a model; the job is what differs.
    apply = _with_needs("flatfield", "apply", output_dtype="uint16")
    assert (
        apply.job_spec().id == "apply"
        and apply.hash() != Recipe.from_defaults("flatfield", output_dtype="uint16").hash()
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"job": "nope"},
            "job: method 'esrrf' has no job 'nope'; its jobs: ['run', 'sweep', 'drift']",
        ),
        ({"job": 3}, "job: Input should be a valid string"),
        ({"params": {"radii": [1.0]}}, "params.radii: EsrrfParams has no parameter(s)"),
        ({"job": "sweep", "params": {"radii": []}}, "params.radii: SweepParams.radii must hold"),
    ],
)
def test_a_wrong_job_or_a_field_of_another_job_is_an_error(data, message):
    with pytest.raises(RecipeError) as error:
        Recipe.from_data({"schema_version": 1, "method": "esrrf", **data}, origin="r.yaml")
    assert str(error.value).startswith(f"r.yaml: {message}")


def _with_needs(method_id: str, job: str, **changes) -> Recipe:
    """The default recipe of a job, with a (placeholder) artifact for each input it needs."""
    from napari_gpuscope.batch.recipe_sections import Artifact

    spec = METHODS[method_id].job_spec(job)
    needs = [Artifact(name=name, path=f"{name}.tif", sha256="0" * 64) for name in spec.needs]
    return Recipe.from_params(spec.params_class()(**changes), job=job, artifacts=needs)


def test_the_schema_has_a_branch_per_job_and_recipes_pickle():
    import pickle

    schema = json.loads(DOCS_SCHEMA.read_text())
    branches = {ref["$ref"].rsplit("/", 1)[1] for ref in schema["oneOf"]}
    assert {"EsrrfRunRecipe", "EsrrfSweepRecipe", "FlatfieldApplyRecipe"} <= branches
    gain = schema["$defs"]["TVParams"]["properties"]["gain"]
    assert (gain["unit"], gain["title"], gain["anyOf"][0]["exclusiveMinimum"]) == (
        "ADU/photon",
        "Camera gain",
        0.0,
    )
    assert schema["$defs"]["TVParams"]["properties"]["method"]["advanced"] is True
    for method_id in METHODS:
        for job in METHODS[method_id].job_ids:
            recipe = _with_needs(method_id, job)
            jsonschema.validate(yaml.safe_load(recipe.to_yaml()), schema)
            assert pickle.loads(pickle.dumps(recipe)) == recipe
    sweep_params = Recipe.from_defaults("esrrf", job="sweep").model_dump(mode="json")["params"]
    run = yaml.safe_load(Recipe.from_defaults("esrrf").to_yaml())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**run, "params": sweep_params}, schema)


def test_recipe_command_reads_set_values_as_the_fields_types(tmp_path, capsys):
    out = tmp_path / "tv.yaml"
    changes = ["tolerance=1e-5", "gain=none", "nonnegative=true", "spacing=[1e-1, 1]"]
    assert main(["recipe", "tv", *(f"--set={c}" for c in changes), "-o", str(out)]) == 0
    params = load_recipe(out).params_model()
    assert (params.tolerance, params.gain, params.nonnegative, params.spacing) == (
        1e-5,
        None,
        True,
        (0.1, 1.0),
    )
    # A choice is text, never YAML's boolean "no"; the error says what is valid.
    assert main(["recipe", "tv", "--set", "noise_model=no", "-o", str(out)]) == 2
    assert "TVParams.noise_model must be one of 'gaussian', 'poisson', got 'no'" in (
        capsys.readouterr().err
    )
    assert main(["recipe", "tv", "--set", "strenght=1", "-o", str(out)]) == 2
    assert "valid names: ['channel_axis'" in capsys.readouterr().err


def test_recipe_command_writes_a_jobs_recipe(tmp_path, capsys):
    out = tmp_path / "sweep.yaml"
    assert main(["recipe", "esrrf", "--job", "sweep", "--set", "radii=[1, 2]", "-o", str(out)]) == 0
    assert "(esrrf sweep, recipe" in capsys.readouterr().out
    recipe = load_recipe(out)
    assert recipe.job == "sweep" and recipe.params_model().radii == (1.0, 2.0)
    assert main(["recipe", "esrrf", "--job", "nope", "-o", str(out)]) == 2
    assert "has no job 'nope'; its jobs: ['run', 'sweep', 'drift']" in capsys.readouterr().err


def test_a_job_that_needs_an_artifact_is_refused_without_it():
    """Flat-field's apply job needs the saved profile: refused when the recipe is made, not
    on every position at run time (issue 17, item 6)."""
    with pytest.raises(RecipeError, match=r"'apply' job of 'flatfield' needs a 'profile'"):
        Recipe.from_defaults("flatfield", job="apply")
    assert _with_needs("flatfield", "apply").artifacts[0].name == "profile"
