"""Artifacts are checked when the recipe is made and pinned whole (issue 17, item 6): the file
must load as what the job needs, every file it consists of (a profile's JSON sidecar too) is
pinned by its SHA-256, and run refuses before any work when one changed."""

from __future__ import annotations

import json

import numpy as np
from batch_helpers import write_positions

from napari_gpuscope.batch.recipes import load_recipe
from napari_gpuscope.cli import main


def _profile(tmp_path):
    from napari_gpuscope.compute.flatfield import ShadingProfile

    profile = ShadingProfile.from_arrays(np.ones((32, 32)), camera_offset=100)
    return profile.save(tmp_path / "scope")


def test_an_artifact_that_is_not_what_the_job_needs_is_refused(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a profile")
    fake = tmp_path / "fake.tif"
    fake.write_bytes(b"II*\x00 not really")
    argv = ["recipe", "flatfield", "--job", "apply", "-o", str(tmp_path / "r.yaml")]
    for path in (notes, fake):
        assert main([*argv, "--artifact", f"profile={path}"]) == 2
        err = capsys.readouterr().err
        assert f"--artifact 'profile={path}': not a shading profile saved from the dock" in err
    tif = _profile(tmp_path)
    assert main([*argv, "--artifact", f"flatfield={tif}"]) == 2
    assert "flat-field takes only a 'profile' artifact, not 'flatfield'" in capsys.readouterr().err
    assert (
        main(["recipe", "tv", "--artifact", f"profile={tif}", "-o", str(tmp_path / "x.yaml")]) == 2
    )
    assert "the 'denoise' job of tv takes none" in capsys.readouterr().err
    assert not (tmp_path / "r.yaml").exists()


def test_the_sidecar_is_pinned_and_a_changed_one_stops_run_before_any_work(tmp_path, capsys):
    tif = _profile(tmp_path)
    write_positions(tmp_path / "in", 1, shape=(32, 32))
    path = tmp_path / "apply.yaml"
    argv = ["recipe", "flatfield", "--job", "apply", "--artifact", f"profile={tif}"]
    assert main([*argv, "-o", str(path)]) == 0
    recipe = load_recipe(path)
    (artifact,) = recipe.artifacts
    assert artifact.path == "scope.tif"
    assert [f.path for f in artifact.files] == ["scope.json"]
    before = recipe.hash()

    sidecar = tif.with_suffix(".json")
    facts = json.loads(sidecar.read_text())
    facts["darkfield_source"] = "swapped"
    sidecar.write_text(json.dumps(facts))
    out = tmp_path / "out.zarr"
    code = main(
        ["run", str(path), str(tmp_path / "in" / "*.tif"), "--out", str(out), "--device", "cpu"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"artifact 'profile': '{sidecar}' changed since the recipe was saved" in err
    assert not out.exists()
    assert main(["validate", str(path), str(tmp_path / "in" / "*.tif")]) == 1
    assert "scope.json' changed since the recipe was saved" in capsys.readouterr().out

    # Made again with the new sidecar: another recipe hash (the sidecar is part of it).
    assert main([*argv, "-o", str(path)]) == 0
    assert load_recipe(path).hash() != before


def test_an_artifact_outside_the_recipes_folder_is_pinned_with_a_warning(tmp_path, capsys):
    recipes, profiles = tmp_path / "recipes", tmp_path / "profiles"
    recipes.mkdir()
    profiles.mkdir()
    tif = _profile(profiles)
    argv = ["recipe", "flatfield", "--job", "apply", "--artifact", f"profile={tif}"]
    assert main([*argv, "-o", str(recipes / "apply.yaml")]) == 0
    err = capsys.readouterr().err
    assert f"is outside the recipe's folder {recipes}; the recipe names it by a relative" in err
    (artifact,) = load_recipe(recipes / "apply.yaml").artifacts
    assert artifact.path == "../profiles/scope.tif"
    assert [f.path for f in artifact.files] == ["../profiles/scope.json"]

    argv = ["recipe", "flatfield", "--job", "apply", "--artifact", f"profile={tif}"]
    assert main([*argv, "-o", str(profiles / "apply2.yaml")]) == 0
    assert "outside" not in capsys.readouterr().err
