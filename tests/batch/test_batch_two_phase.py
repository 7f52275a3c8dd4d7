"""The MethodSpec.batch hook of two-phase methods: prepare once (on a subsample), apply per
position with a per-worker cache keyed by the recipe hash. Run on an in-process cluster, which
sees the toy method registered here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
from batch_helpers import FlatHooks, FlatParams, write_positions

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore


def test_prepare_runs_once_on_the_subsample_and_every_position_uses_it(
    tmp_path, flat_method, inprocess_client
):
    paths = write_positions(tmp_path / "in", 5, shape=(64, 64))
    recipe = Recipe.from_params(FlatParams(sample=2))
    client = inprocess_client
    report = run_batch(
        recipe, discover(str(tmp_path / "in" / "*.tif")), tmp_path / "out.zarr", client
    )

    assert report.failed == {} and len(report.done) == 5
    assert FlatHooks.reads == 2  # the fit read only its subsample, once
    assert FlatHooks.built == {recipe.hash(): 5}
    profile = np.mean([tifffile.imread(p).astype(np.float64) for p in paths[:2]], axis=0)
    expected = tifffile.imread(paths[4]).astype(np.float32) / profile.astype(np.float32)
    written = BatchStore(tmp_path / "out.zarr").read_position(paths[4].stem)
    assert written.tobytes() == expected.astype(np.float32).tobytes()


def test_an_artifact_replaces_the_fit_and_is_checked(tmp_path, flat_method, inprocess_client):
    from napari_gpuscope.batch.recipe_sections import Artifact, file_sha256

    paths = write_positions(tmp_path / "in", 2, shape=(32, 32))
    profile = np.full((32, 32), 2.0, np.float32)
    np.savez(tmp_path / "profile.npz", profile=profile)
    artifact = Artifact(
        name="profile", path="profile.npz", sha256=file_sha256(tmp_path / "profile.npz")
    )
    recipe = Recipe.from_params(FlatParams(), artifacts=[artifact])
    positions = discover(str(tmp_path / "in" / "*.tif"))
    client = inprocess_client
    report = run_batch(recipe, positions, tmp_path / "out.zarr", client, recipe_dir=tmp_path)
    assert report.failed == {} and FlatHooks.reads == 0
    written = BatchStore(tmp_path / "out.zarr").read_position(paths[1].stem)
    assert np.array_equal(written, tifffile.imread(paths[1]).astype(np.float32) / 2)

    np.savez(tmp_path / "profile.npz", profile=profile * 2)  # changed after saving
    with pytest.raises(ValueError, match=r"artifact 'profile'.*changed"):
        run_batch(recipe, positions, tmp_path / "o2.zarr", client, recipe_dir=tmp_path)


def test_basic_fits_once_on_every_tile_and_corrects_each_position_as_the_dock_would(
    tmp_path, inprocess_client
):
    # The real flat-field method: one profile for the experiment, fitted on all positions'
    # tiles, then each position corrected with it; the oracle is the direct calls (fit_basic
    # on the whole stack, then correct), byte for byte.

    from napari_gpuscope.compute import flatfield
    from napari_gpuscope.sample_data._shading import shaded_tiles

    truth = shaded_tiles(16, (64, 96), seed=4)
    folder = tmp_path / "tiles"
    folder.mkdir()
    for index, tile in enumerate(truth.images):
        tifffile.imwrite(folder / f"tile{index:02d}.tif", tile)
    params = flatfield.BasicParams()
    recipe = Recipe.from_params(params)
    client = inprocess_client
    report = run_batch(recipe, discover(str(folder / "*.tif")), tmp_path / "out.zarr", client)

    assert report.failed == {} and len(report.done) == 16
    profile = flatfield.fit_basic(truth.images, params, device="cpu")
    assert profile.all_converged  # its accuracy against the truth: tests/compute/test_flatfield
    store = BatchStore(tmp_path / "out.zarr")
    for index in (0, 7, 15):
        expected = flatfield.correct(truth.images[index], profile, device="cpu")
        written = store.read_position(f"tile{index:02d}")
        assert written.dtype == np.float32
        assert written.tobytes() == np.asarray(expected, np.float32).tobytes()


def test_a_saved_basic_profile_named_by_the_recipe_command_replaces_the_fit(
    tmp_path, inprocess_client
):
    from napari_gpuscope.batch.recipes import load_recipe
    from napari_gpuscope.cli import main
    from napari_gpuscope.compute import flatfield
    from napari_gpuscope.sample_data._shading import make_flatfield

    folder = tmp_path / "tiles"
    folder.mkdir()
    rng = np.random.default_rng(0)
    tiles = rng.poisson(500, (3, 48, 64)).astype(np.uint16)
    for index, tile in enumerate(tiles):
        tifffile.imwrite(folder / f"tile{index}.tif", tile)
    saved = flatfield.ShadingProfile.from_arrays(make_flatfield((48, 64)), camera_offset=100)
    (tmp_path / "profiles").mkdir()
    tif = saved.save(tmp_path / "profiles" / "scope")
    recipe_path = tmp_path / "recipes" / "flat.yaml"
    recipe_path.parent.mkdir()
    code = main(["recipe", "flatfield", "--artifact", f"profile={tif}", "-o", str(recipe_path)])
    assert code == 0
    recipe = load_recipe(recipe_path)
    assert [a.name for a in recipe.artifacts] == ["profile"]
    assert not Path(recipe.artifacts[0].path).is_absolute()  # relative to the recipe
    client = inprocess_client
    report = run_batch(
        recipe,
        discover(str(folder / "*.tif")),
        tmp_path / "out.zarr",
        client,
        recipe_dir=recipe_path.parent,
    )
    assert report.failed == {} and len(report.done) == 3
    loaded = flatfield.ShadingProfile.load(tif)
    written = BatchStore(tmp_path / "out.zarr").read_position("tile1")
    expected = (tiles[1].astype(np.float64) - 100) / loaded.flatfield.astype(np.float64)
    np.testing.assert_allclose(written, expected, rtol=1e-5, atol=1e-3)


def test_phase_positions_reuse_the_workers_optics_and_equal_direct_calls():
    # A worker builds the optics once per recipe: the second position builds nothing, and each
    # position equals a fresh direct reconstruction (fresh optics).
    from napari_gpuscope.compute import phase
    from napari_gpuscope.compute.jobs import run_job
    from napari_gpuscope.compute.phase import _batch
    from napari_gpuscope.sample_data import phase as phase_samples

    params = phase.PhaseParams(
        **phase_samples.OPTICS, tilt_mode="manual", tilt_zenith=0.2, tilt_azimuth=1.0
    )
    stacks = []
    for seed_shift in (0.0, 0.1):
        phantom, absorption = phase_samples.cell_phantom((64, 64))
        stacks.append(phase_samples._simulate(phantom + seed_shift, absorption, 0.2, 1.0))
    key = "recipe-hash-for-this-test"
    first = run_job(_batch.job(stacks[0], params, prepared=None, device="cpu", cache_key=key))
    cache = phase.shared_cache("cpu")  # the process's, keyed by the optics
    builds = dict(cache.builds)
    assert builds["source"] >= 1
    second = run_job(_batch.job(stacks[1], params, prepared=None, device="cpu", cache_key=key))
    assert cache.builds == builds  # nothing rebuilt for the second position
    for stack, result in zip(stacks, (first, second), strict=True):
        direct = phase.reconstruct(stack, params, device="cpu")
        np.testing.assert_array_equal(result.phase, direct.phase)
