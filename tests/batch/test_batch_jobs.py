"""Batch runs every job of every method, not only the main one (issue 15): flat-field's apply
with a saved profile, eSRRF's parameter sweep and phase's tilt estimate, each position equal to
the job called directly on it (the oracle), through recipes made by the ``recipe`` command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe, RecipeError, load_recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.cli import main
from napari_gpuscope.compute.jobs import run_job


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


def _extra(out: Path, position: str) -> dict[str, np.ndarray]:
    """The position's extra layers by their multiscales name."""
    found = {}
    for child in sorted(p for p in (out / position / "extra").iterdir() if p.is_dir()):
        group = zarr.open_group(str(child), mode="r")
        found[group.attrs["ome"]["multiscales"][0]["name"]] = np.asarray(group["0"][...])
    return found


def test_flatfield_apply_corrects_with_the_saved_profile_and_refuses_to_run_without_one(
    tmp_path, client
):
    from napari_gpuscope.compute import flatfield
    from napari_gpuscope.sample_data._shading import shaded_tiles

    truth = shaded_tiles(12, (64, 80), seed=5)
    folder = tmp_path / "tiles"
    folder.mkdir()
    for index, tile in enumerate(truth.images):
        tifffile.imwrite(folder / f"tile{index:02d}.tif", tile)
    profile = flatfield.fit_basic(truth.images, device="cpu")
    tif = profile.save(tmp_path / "scope")
    recipe_path = tmp_path / "apply.yaml"
    argv = ["recipe", "flatfield", "--job", "apply", "--set", "output_dtype=same"]
    assert main([*argv, "--artifact", f"profile={tif}", "-o", str(recipe_path)]) == 0
    recipe = load_recipe(recipe_path)
    assert recipe.job == "apply" and recipe.params["output_dtype"] == "same"

    report = run_batch(
        recipe,
        discover(str(folder / "*.tif")),
        tmp_path / "out.zarr",
        client,
        recipe_dir=tmp_path,
    )

    assert report.failed == {} and len(report.done) == 12
    params = recipe.params_model()
    for index in (0, 11):
        written = BatchStore(tmp_path / "out.zarr").read_position(f"tile{index:02d}")
        direct = flatfield.apply_profile(truth.images[index], profile, params, device="cpu")
        assert written.dtype == truth.images.dtype == direct.image.dtype
        assert written.tobytes() == direct.image.tobytes()
    # Without the profile the recipe itself is refused, before any run.
    with pytest.raises(RecipeError, match=r"'apply' job of 'flatfield' needs a 'profile'"):
        Recipe.from_defaults("flatfield", job="apply")
    assert main(["recipe", "flatfield", "--job", "apply", "-o", str(tmp_path / "x.yaml")]) == 2
    assert not (tmp_path / "x.yaml").exists()


def test_esrrf_sweeps_each_position_and_writes_its_grids(tmp_path, client):
    from napari_gpuscope.compute import esrrf
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    folder = tmp_path / "stacks"
    folder.mkdir()
    stacks = [blinking_filaments_stack(16, (40, 40), seed=s)[0] for s in (1, 2)]
    for index, stack in enumerate(stacks):
        tifffile.imwrite(folder / f"fov{index}.tif", stack)
    params = esrrf.SweepParams(radii=(1.0, 2.0), sensitivities=(1.0, 2.0), magnification=2)
    recipe = Recipe.from_params(params)
    assert recipe.job == "sweep"

    report = run_batch(recipe, discover(str(folder / "*.tif")), tmp_path / "out.zarr", client)

    assert report.failed == {} and report.done == ["fov0", "fov1"]
    for index, stack in enumerate(stacks):
        direct = run_job(esrrf.iter_sweep(stack, params, device="cpu"))
        written = BatchStore(tmp_path / "out.zarr").read_position(f"fov{index}")
        np.testing.assert_array_equal(written, direct.qnr.astype(np.float32))  # NaN where NaN
        extra = _extra(tmp_path / "out.zarr", f"fov{index}")
        np.testing.assert_array_equal(
            extra[f"RSP sweep · fov{index}"], direct.rsp.astype(np.float32)
        )


def test_phase_estimates_the_tilt_map_of_each_position(tmp_path, client):
    from napari_gpuscope.compute import phase
    from napari_gpuscope.sample_data.phase import OPTICS, tilted_brightfield_stack

    stack = np.asarray(tilted_brightfield_stack()[0][0][:, :64, :128])
    tifffile.imwrite(tmp_path / "well.tif", stack)
    params = phase.PhaseParams(
        **OPTICS, tilt_mode="tiles", tiles_y=1, tiles_x=2, optimizer="newton", iterations=2
    )
    recipe = Recipe.from_params(params, job="estimate_tilt")

    report = run_batch(recipe, discover(str(tmp_path / "well.tif")), tmp_path / "out.zarr", client)

    assert report.failed == {} and report.done == ["well"]
    direct = phase.estimate_tilt(stack, params=params, device="cpu")
    written = BatchStore(tmp_path / "out.zarr").read_position("well")
    np.testing.assert_array_equal(written, direct.tilt_map.zenith.reshape(1, 2).astype(np.float32))
    extra = _extra(tmp_path / "out.zarr", "well")
    np.testing.assert_array_equal(
        extra["tilt azimuth · well"], direct.tilt_map.azimuth.reshape(1, 2).astype(np.float32)
    )
