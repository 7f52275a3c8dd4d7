"""What ``run --watch`` refuses that a plain run over all positions at once would not need to.

- A flat-field *fit* prepares one profile from every position of a run; a watch's rounds hold
  only the positions settled since the last, so each round would be fitted anew: refused
  (exit 2, through the real command) unless the recipe fixes the profile (a saved ``profile``
  artifact), in which case every round is corrected with that one profile. Oracle: the
  correction written out by hand, ``(tile - offset) / flatfield``.
- Position names must be unique over all INPUTs, as ``run`` requires: a clash at the start is
  refused with ``run``'s words; one that appears during the watch is a failed position of its
  round, and the watch still ends by ``--watch-idle``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile

pytest.importorskip("distributed")
pytest.importorskip("zarr")

from batch_helpers import write_positions

from napari_gpuscope.batch.inputs import InputError
from napari_gpuscope.batch.recipes import Recipe, load_recipe
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.batch.watch import check_watchable, watch_batch
from napari_gpuscope.cli import main

WATCH = ["--device", "cpu", "--workers", "1", "--watch", "--settle", "0", "--watch-idle", "0"]


def _tiles(folder: Path, count: int) -> np.ndarray:
    folder.mkdir(parents=True, exist_ok=True)
    tiles = np.random.default_rng(1).poisson(500, (count, 48, 64)).astype(np.uint16)
    for index, tile in enumerate(tiles):
        tifffile.imwrite(folder / f"tile{index}.tif", tile)
    return tiles


def test_a_flatfield_fit_is_refused_by_the_command_before_anything_starts(tmp_path, capsys):
    _tiles(tmp_path / "in", 3)
    recipe = tmp_path / "fit.yaml"
    assert main(["recipe", "flatfield", "-o", str(recipe)]) == 0
    out = tmp_path / "o.zarr"
    args = ["run", str(recipe), str(tmp_path / "in" / "*.tif"), "--out", str(out), *WATCH]
    assert main(args) == 2
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert "--watch cannot run this flatfield recipe" in err
    assert "run without --watch" in err and "--artifact profile=" in err  # what to do
    assert "watching" not in captured.out  # refused before the watch (and any worker) started
    assert not out.exists() and not BatchStore(out).markers.exists()


def test_watch_batch_itself_refuses_a_fit(tmp_path):
    with pytest.raises(ValueError, match="--watch cannot run this flatfield recipe"):
        watch_batch(
            Recipe.from_defaults("flatfield"),
            [str(tmp_path / "*.tif")],
            tmp_path / "o.zarr",
            client=None,
            idle_s=0,
        )  # refused before the client


def test_recipes_whose_prepared_value_is_fixed_are_watchable(tmp_path):
    from napari_gpuscope.compute import flatfield
    from napari_gpuscope.sample_data._shading import make_flatfield

    check_watchable(Recipe.from_defaults("tv"))  # no prepare at all
    tif = flatfield.ShadingProfile.from_arrays(make_flatfield((48, 64)), camera_offset=100).save(
        tmp_path / "scope"
    )
    for job in (None, "apply"):  # the fit job with a saved profile does not fit either
        command = ["recipe", "flatfield", "--artifact", f"profile={tif}", "-o"]
        command += [str(tmp_path / f"{job}.yaml")] + (["--job", job] if job else [])
        assert main(command) == 0
        check_watchable(load_recipe(tmp_path / f"{job}.yaml"))


def test_a_saved_profile_corrects_every_round_alike(tmp_path, inprocess_client):
    """Three rounds (each round's callback writes the next tile): every position is corrected
    with the one saved profile, whatever round it came in."""
    from napari_gpuscope.compute import flatfield
    from napari_gpuscope.sample_data._shading import make_flatfield

    made = tmp_path / "made"
    tiles = _tiles(made, 3)
    saved = flatfield.ShadingProfile.from_arrays(make_flatfield((48, 64)), camera_offset=100)
    tif = saved.save(tmp_path / "scope")
    recipe_path = tmp_path / "apply.yaml"
    command = ["recipe", "flatfield", "--job", "apply", "--artifact", f"profile={tif}"]
    assert main([*command, "-o", str(recipe_path)]) == 0
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    pending = sorted(made.glob("*.tif"))

    def deliver(_report=None) -> None:
        if pending:
            path = pending.pop(0)
            (incoming / path.name).write_bytes(path.read_bytes())

    deliver()
    report = watch_batch(
        load_recipe(recipe_path),
        [str(incoming / "*.tif")],
        tmp_path / "out.zarr",
        inprocess_client,
        recipe_dir=recipe_path.parent,
        settle_s=0,
        poll_s=0.01,
        idle_s=0,
        on_round=deliver,
    )
    assert report.failed == {} and len(report.rounds) == 3
    assert [r.done for r in report.rounds] == [["tile0"], ["tile1"], ["tile2"]]
    loaded = flatfield.ShadingProfile.load(tif)
    store = BatchStore(tmp_path / "out.zarr")
    for index, tile in enumerate(tiles):
        expected = (tile.astype(np.float64) - 100) / loaded.flatfield.astype(np.float64)
        written = store.read_position(f"tile{index}")
        np.testing.assert_allclose(written, expected, rtol=1e-5, atol=1e-3)


def test_a_name_clash_at_the_start_is_refused_in_runs_words(tmp_path, capsys):
    write_positions(tmp_path / "a", 1, shape=(32, 32))
    write_positions(tmp_path / "b", 1, shape=(32, 32))  # field00 in both
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    specs = [str(tmp_path / "a" / "*.tif"), str(tmp_path / "b" / "*.tif")]
    base = ["run", str(recipe), *specs, "--out", str(tmp_path / "o.zarr"), "--device", "cpu"]
    assert main([*base, "--workers", "1", "--dry-run"]) == 2  # run without --watch
    plain = capsys.readouterr().err
    assert "two inputs map to the position name 'field00'" in plain
    assert main([*base, *WATCH[4:]]) == 2
    assert capsys.readouterr().err == plain  # the same words
    with pytest.raises(InputError, match="two inputs map to the position name 'field00'"):
        watch_batch(Recipe.from_defaults("tv"), specs, tmp_path / "o.zarr", None, idle_s=0)


def test_a_name_clash_that_appears_later_fails_that_position_and_the_watch_ends(
    tmp_path, inprocess_client
):
    """A second INPUT gets a file of a name the first has: the first's position is computed,
    the newcomer is reported once as a failed position naming both files, and the watch ends
    by idle (before the fix it flipped between the two files forever)."""
    (first,) = write_positions(tmp_path / "a", 1, shape=(32, 32))
    (tmp_path / "b").mkdir()
    clash = tmp_path / "b" / first.name
    rounds = []

    def on_round(report) -> None:
        rounds.append(report)
        if not clash.exists():
            clash.write_bytes(first.read_bytes())

    recipe = Recipe.from_defaults("tv", strength=1.2)
    report = watch_batch(
        recipe,
        [str(tmp_path / "a" / "*.tif"), str(tmp_path / "b" / "*.tif")],
        tmp_path / "o.zarr",
        inprocess_client,
        settle_s=0,
        poll_s=0.01,
        idle_s=0.05,
        on_round=on_round,
    )
    assert report.stopped_by == "idle"
    assert report.done == ["field00"]
    assert list(report.failed) == ["field00"] and report.exit_code == 1
    reason = report.failed["field00"]
    assert "two inputs map to the position name 'field00'" in reason
    assert str(first) in reason and str(clash) in reason
    assert len(rounds) == 2 and rounds[1].done == []  # reported once, in a round of its own
    assert any("FAILED field00" in line for line in report.lines())
    assert BatchStore(tmp_path / "o.zarr").done_record("field00") is not None


def test_a_name_clash_inside_one_input_is_refused_at_the_start(tmp_path, capsys):
    """``pos.tif`` and ``pos.tiff`` in one folder map to one name: refused as ``run`` refuses
    it (before the fix the watch skipped that whole INPUT, silently, for the whole watch)."""
    folder = tmp_path / "a"
    (first,) = write_positions(folder, 1, shape=(32, 32))
    first.with_suffix(".tiff").write_bytes(first.read_bytes())
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    base = ["run", str(recipe), str(folder / "*.tif*"), "--out", str(tmp_path / "o.zarr")]
    assert main([*base, "--device", "cpu", "--workers", "1", "--dry-run"]) == 2
    plain = capsys.readouterr().err
    assert "two inputs map to the position name 'field00'" in plain
    assert main([*base, *WATCH]) == 2
    assert capsys.readouterr().err == plain


def test_a_name_clash_inside_one_input_that_appears_later_is_reported(
    tmp_path, inprocess_client
):
    """A newcomer whose name a file of the same INPUT has: the others of that INPUT are still
    computed (before the fix none were), the newcomer is a failed position."""
    folder = tmp_path / "a"
    (first,) = write_positions(folder, 1, shape=(32, 32))
    clash = first.with_suffix(".tiff")
    later = folder / "field01.tif"

    def on_round(report) -> None:
        if not clash.exists():
            clash.write_bytes(first.read_bytes())
            later.write_bytes(first.read_bytes())

    report = watch_batch(
        Recipe.from_defaults("tv", strength=1.2),
        [str(folder / "*.tif*")],
        tmp_path / "o.zarr",
        inprocess_client,
        settle_s=0,
        poll_s=0.01,
        idle_s=0.05,
        on_round=on_round,
    )
    assert sorted(report.done) == ["field00", "field01"]
    assert list(report.failed) == ["field00"]
    assert str(first) in report.failed["field00"] and str(clash) in report.failed["field00"]
