"""What validate and --resume trust (issue 17, items 7 and 8): validate reads every position as
a run does (a truncated TIFF, a NaN file) and says when a recipe records no input facts;
completion markers hold a checksum of what was written, so --resume recomputes a position
whose files no longer match; a run clears the .writing-* folders an interrupted one left."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from batch_helpers import direct, write_positions

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipe_sections import InputFacts
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.cli import main


def test_validate_finds_what_run_finds_truncated_and_nan_files(tmp_path, capsys):
    folder = tmp_path / "in"
    paths = write_positions(folder, 2, shape=(64, 64))
    whole = paths[0].read_bytes()
    (folder / "cut.tif").write_bytes(whole[: len(whole) - 2000])  # the header reads fine
    nan = tifffile.imread(paths[0]).astype(np.float32)
    nan[3, 4] = np.nan
    tifffile.imwrite(folder / "nan.tif", nan)
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")

    code = main(["validate", str(recipe), str(folder / "*.tif")])

    out = capsys.readouterr().out
    assert code == 1
    assert f"cut: cannot read the pixels of {folder / 'cut.tif'}" in out
    assert f"nan: {folder / 'nan.tif'} holds 1 NaN or infinite pixel(s)" in out
    assert "field00" not in out and "field01" not in out
    assert "4 positions, 2 problem(s)" in out


def test_validate_uses_the_flatfield_screen_of_a_run(tmp_path, capsys):
    folder = tmp_path / "in"
    paths = write_positions(folder, 3, shape=(48, 48))
    tifffile.imwrite(folder / "small.tif", tifffile.imread(paths[0])[:40])
    recipe = Recipe.from_defaults("flatfield").save(tmp_path / "ff.yaml")
    assert main(["validate", str(recipe), str(folder / "*.tif")]) == 1
    out = capsys.readouterr().out
    assert f"small: {folder / 'small.tif'}: shape (40, 48), most positions have (48, 48)" in out


def test_validate_says_when_a_recipe_has_no_input_facts(tmp_path, capsys):
    write_positions(tmp_path / "in", 1, shape=(32, 32))
    bare = tmp_path / "bare.yaml"
    assert main(["recipe", "tv", "-o", str(bare)]) == 0
    assert main(["validate", str(bare), str(tmp_path / "in" / "*.tif")]) == 0
    out = capsys.readouterr().out
    assert f"note: {bare} records no input facts" in out and "0 problem(s)" in out

    facts = InputFacts(axes=["y", "x"], pixel_size=[0.1, 0.1])
    tuned = Recipe.from_params(Recipe.from_defaults("tv").params_model(), input=facts)
    path = tuned.save(tmp_path / "tuned.yaml")
    assert main(["validate", str(path), str(tmp_path / "in" / "*.tif")]) == 0
    assert "no input facts" not in capsys.readouterr().out


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


def test_resume_recomputes_a_position_whose_written_files_changed(tmp_path, client):
    paths = write_positions(tmp_path / "in", 3, shape=(48, 48))
    recipe = Recipe.from_defaults("tv", tolerance=1e-5)
    positions = discover(str(tmp_path / "in" / "*.tif"))
    out = tmp_path / "out.zarr"
    store = BatchStore(out)
    first = run_batch(recipe, positions, out, client)
    assert first.failed == {} and len(first.done) == 3
    marker = store.done_record("field00")
    assert marker["checksum"] == store.checksum("field00")

    chunk = next(
        p for p in (out / "field00" / "0").rglob("*") if p.is_file() and p.name != "zarr.json"
    )
    chunk.write_bytes(chunk.read_bytes()[:-7])  # truncated, marker intact
    leftover = out / ".writing-field01-0123456789ab"
    leftover.mkdir()
    (leftover / "zarr.json").write_text("{}")

    again = run_batch(recipe, positions, out, client, resume=True)

    assert again.done == ["field00"] and sorted(again.skipped) == ["field01", "field02"]
    assert not leftover.exists()
    expected = direct(paths[0], recipe.params_model())
    assert store.read_position("field00").tobytes() == np.asarray(expected).tobytes()
    assert store.done_record("field00")["checksum"] == store.checksum("field00")


def test_a_group_is_never_deleted_for_a_staging_folder_that_vanished(tmp_path):
    store = BatchStore(tmp_path / "out.zarr")
    final = store.out / "p0"
    final.mkdir(parents=True)
    (final / "zarr.json").write_text("{}")
    with pytest.raises(OSError, match="is gone; not moved"):
        store._move_into_place(store.out / ".writing-gone", final)
    assert (final / "zarr.json").read_text() == "{}"
    assert [p.name for p in store.out.iterdir()] == ["p0"]


def test_staging_folders_of_a_live_writer_are_kept(tmp_path):
    import os
    import platform
    import subprocess
    import sys

    store = BatchStore(tmp_path / "out.zarr")
    store.out.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = platform.node()
    names = {
        "live": f".writing-{os.getpid()}@{host}@0123456789ab-p0",
        "dead": f".writing-{dead.pid}@{host}@0123456789ab-p1",
        "old-style": ".writing-p2-0123456789ab",
        "elsewhere": ".writing-1@another-host@0123456789ab-p3",
    }
    for name in names.values():
        (store.out / name).mkdir()
    removed = store.clean_staging()
    assert removed == sorted([names["dead"], names["old-style"]])
    os.utime(store.out / names["elsewhere"], (0, 0))  # written long ago on another host
    assert store.clean_staging() == [names["elsewhere"]]
    assert (store.out / names["live"]).is_dir()


def test_validate_runs_each_jobs_own_input_checks(tmp_path, capsys):
    """Issue 26 item 7: validate passed what run then failed, because it checked metadata and
    pixels only: a drift job on a 3-frame stack or a single image, and a flat-field apply job
    with a 64 x 64 profile on 48 x 48 positions. validate now makes each position's job as a
    run does (closed unstarted), so the job's own refusal is reported, in the run's words."""
    from napari_gpuscope.compute import esrrf
    from napari_gpuscope.compute.flatfield import ShadingProfile

    folder = tmp_path / "in"
    folder.mkdir()
    rng = np.random.default_rng(0)
    tifffile.imwrite(folder / "three.tif", rng.poisson(50, (3, 32, 32)).astype(np.uint16))
    tifffile.imwrite(folder / "single.tif", rng.poisson(50, (32, 32)).astype(np.uint16))
    # Blocks of 50 frames (the automatic length takes what a stack has: 3 frames pass).
    recipe = Recipe.from_defaults("esrrf", job="drift", time_averaging=50)
    recipe = recipe.save(tmp_path / "drift.yaml")
    assert main(["validate", str(recipe), str(folder / "*.tif")]) == 1
    out = capsys.readouterr().out
    for name, stack in (("three", np.zeros((3, 32, 32))), ("single", np.zeros((32, 32)))):
        with pytest.raises(ValueError) as direct_refusal:  # the oracle: the job's own words
            esrrf.iter_estimate_drift(stack, time_averaging=50, device="cpu")
        words = str(direct_refusal.value).split(";")[0].replace("stack", "").strip()
        assert f"{name}: {folder / f'{name}.tif'}:" in out and words in out
    assert "2 positions, 2 problem(s)" in out

    positions = tmp_path / "tiles"
    write_positions(positions, 2, shape=(48, 48))
    profile = ShadingProfile.from_arrays(np.ones((64, 64))).save(tmp_path / "profile")
    recipe = tmp_path / "apply.yaml"
    made = main(
        ["recipe", "flatfield", "--job", "apply", "--artifact", f"profile={profile}", "-o",
         str(recipe)]
    )  # fmt: skip
    assert made == 0
    capsys.readouterr()
    assert main(["validate", str(recipe), str(positions / "*.tif")]) == 1
    out = capsys.readouterr().out
    assert "the profile is (64, 64) but the images are (48, 48)" in out
    assert "2 positions, 2 problem(s)" in out
