"""``napari-gpuscope run --watch``: positions processed as an acquisition writes them (issue 28).

Oracles: the plain batch run over the same files (byte-equal outputs), and files written
deliberately half-way (never read before they settle). Clocks are stepped, never waited on;
the end-to-end watch stops when every position is done (a gate, not a time).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
import tifffile

pytest.importorskip("distributed")
pytest.importorskip("zarr")

from batch_helpers import write_positions

from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.batch.watch import PositionWatcher, watch_batch


@pytest.fixture
def client():
    from distributed import Client

    with Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as client:
        yield client


class SteppedClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_file_being_written_is_not_taken_until_it_settles(tmp_path: Path) -> None:
    clock = SteppedClock()
    watcher = PositionWatcher([str(tmp_path / "*.tif")], settle_s=3.0, clock=clock)
    path = tmp_path / "pos0.tif"
    frames = np.arange(5 * 16 * 16, dtype=np.uint16).reshape(5, 16, 16)
    with tifffile.TiffWriter(path) as writer:
        for index, frame in enumerate(frames):
            writer.write(frame, contiguous=True)
            writer._fh.flush()  # what a camera's writer leaves on disk between frames
            clock.now += 2.0  # frames 2 s apart: never 3 s unchanged while it is written
            assert watcher.poll() == [], f"taken after frame {index}"
    assert watcher.poll() == []  # closing rewrote the header: a change seen now
    assert watcher.waiting == 1
    clock.now += 2.9
    assert watcher.poll() == []
    clock.now += 0.2
    (taken,) = watcher.poll()
    assert taken.name == "pos0"
    np.testing.assert_array_equal(taken.read(), frames)  # all of it, not a prefix
    assert watcher.poll() == []  # handed out once


def test_a_rewritten_position_is_handed_out_again(tmp_path: Path) -> None:
    clock = SteppedClock()
    watcher = PositionWatcher([str(tmp_path / "*.tif")], settle_s=1.0, clock=clock)
    tifffile.imwrite(tmp_path / "a.tif", np.zeros((8, 8), np.uint16))
    watcher.poll()
    clock.now = 1.0
    assert [p.name for p in watcher.poll()] == ["a"]
    tifffile.imwrite(tmp_path / "a.tif", np.ones((9, 9), np.uint16))
    os.utime(tmp_path / "a.tif", ns=(10**18, 10**18))  # a new identity even on a coarse clock
    assert watcher.poll() == [] and watcher.waiting == 1
    clock.now = 2.0
    assert [p.name for p in watcher.poll()] == ["a"]


def test_an_input_that_matches_nothing_yet_is_empty_not_an_error(tmp_path: Path) -> None:
    watcher = PositionWatcher([str(tmp_path / "later" / "*.tif")], settle_s=0)
    assert watcher.poll() == [] and watcher.waiting == 0


def test_settle_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="settle_s"):
        PositionWatcher([str(tmp_path / "*.tif")], settle_s=-1)


def test_watch_equals_the_batch_run_over_the_same_files(tmp_path: Path, client) -> None:
    """A writer thread delivers positions one by one (each renamed into place when complete,
    as acquisition software does); the watch processes them as they come and stops when all
    are done. Its store equals a plain batch run's over the finished files, byte for byte."""
    source = write_positions(tmp_path / "made", 4, shape=(64, 64))
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    recipe = Recipe.from_defaults("tv", strength=1.2)
    delivered = threading.Event()

    def acquire() -> None:
        for path in source:
            part = incoming / (path.name + ".part")
            part.write_bytes(path.read_bytes())
            part.rename(incoming / path.name)
        delivered.set()

    rounds = []
    writer = threading.Thread(target=acquire)
    writer.start()
    try:
        report = watch_batch(
            recipe,
            [str(incoming / "*.tif")],
            tmp_path / "watched.zarr",
            client,
            settle_s=0.0,
            poll_s=0.01,
            stop=lambda: delivered.is_set() and len(set(_done(rounds))) == len(source),
            on_round=rounds.append,
        )
    finally:
        writer.join()
    assert report.stopped_by == "stop" and report.failed == {}
    assert sorted(set(report.done)) == sorted(p.stem for p in source)

    from napari_gpuscope.batch.inputs import discover

    plain = run_batch(recipe, discover(str(incoming / "*.tif")), tmp_path / "plain.zarr", client)
    assert plain.failed == {}
    watched, reference = BatchStore(tmp_path / "watched.zarr"), BatchStore(tmp_path / "plain.zarr")
    for path in source:
        np.testing.assert_array_equal(
            watched.read_position(path.stem), reference.read_position(path.stem)
        )


def test_a_watch_started_again_skips_what_is_done(tmp_path: Path, client) -> None:
    write_positions(tmp_path / "in", 2, shape=(48, 48))
    recipe = Recipe.from_defaults("tv", strength=1.2)
    specs = [str(tmp_path / "in" / "*.tif")]
    kwargs = {"settle_s": 0.0, "poll_s": 0.01, "idle_s": 0.0}
    first = watch_batch(recipe, specs, tmp_path / "out.zarr", client, **kwargs)
    assert len(first.done) == 2 and first.stopped_by == "idle"
    again = watch_batch(recipe, specs, tmp_path / "out.zarr", client, **kwargs)
    assert again.done == [] and sorted(again.rounds[0].skipped) == ["field00", "field01"]


def _done(rounds) -> list[str]:
    return [name for report in rounds for name in report.done]


def test_run_watch_from_the_command_line(tmp_path: Path, capsys) -> None:
    """``napari-gpuscope run --watch``: the positions there are computed, a report of rounds
    is written, the watch ends after --watch-idle with exit 0; a second watch skips them."""
    import json

    from napari_gpuscope.cli import main

    write_positions(tmp_path / "in", 2, shape=(48, 48))
    recipe = Recipe.from_defaults("tv", strength=1.2).save(tmp_path / "tv.yaml")
    args = ["run", str(recipe), str(tmp_path / "in" / "*.tif"), "--out", str(tmp_path / "o.zarr")]
    args += ["--device", "cpu", "--workers", "1", "--watch", "--settle", "0", "--watch-idle", "0"]
    args += ["--no-progress", "--report", str(tmp_path / "watch.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "watching" in out and "2 positions computed" in out and "ended: idle" in out
    report = json.loads((tmp_path / "watch.json").read_text())
    assert report["stopped_by"] == "idle"
    assert sorted(n for r in report["rounds"] for n in r["done"]) == ["field00", "field01"]
    assert main(args) == 0
    assert "0 positions computed" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--overwrite", "--dry-run"])
def test_run_watch_refuses_what_a_watch_cannot_do(tmp_path: Path, capsys, option) -> None:
    from napari_gpuscope.cli import main

    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    args = ["run", str(recipe), str(tmp_path / "*.tif"), "--out", str(tmp_path / "o.zarr")]
    assert main([*args, "--device", "cpu", "--watch", option]) == 2
    assert f"{option} cannot be combined with --watch" in capsys.readouterr().err


def test_watch_times_must_be_seconds(tmp_path: Path, capsys) -> None:
    from napari_gpuscope.cli import main

    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    args = ["run", str(recipe), "x.tif", "--out", "o.zarr", "--watch", "--settle", "-1"]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert "--settle: expected a number of seconds" in capsys.readouterr().err
