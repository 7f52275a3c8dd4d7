"""A resumed run adds its positions to the store's ``run.json`` instead of replacing it.

Each round of ``run --watch`` is a resumed run of the positions settled since the last; each
used to overwrite the record with its own, so ``status`` counted only the last round. Oracle:
the positions written, counted through the real ``status`` command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytest.importorskip("zarr")

from batch_helpers import write_positions

from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.batch.watch import watch_batch
from napari_gpuscope.cli import main


def _status(out: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    return capsys.readouterr().out


def _recorded(out: Path) -> list[str]:
    record = json.loads((BatchStore(out).markers / "run.json").read_text())
    return [entry["name"] for entry in record["positions"]]


def test_status_counts_every_round_of_a_watch(tmp_path, capsys, inprocess_client):
    made = write_positions(tmp_path / "made", 2, shape=(32, 32))
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    pending = list(made)

    def deliver(_report=None) -> None:
        if pending:
            path = pending.pop(0)
            (incoming / path.name).write_bytes(path.read_bytes())

    deliver()
    out = tmp_path / "o.zarr"
    report = watch_batch(
        Recipe.from_defaults("tv", strength=1.2),
        [str(incoming / "*.tif")],
        out,
        inprocess_client,
        settle_s=0,
        poll_s=0.01,
        idle_s=0,
        on_round=deliver,
    )
    assert [r.done for r in report.rounds] == [["field00"], ["field01"]]
    assert "2 done, 0 failed, 0 pending" in _status(out, capsys)
    assert _recorded(out) == ["field00", "field01"]  # in the order they came


def test_a_resume_of_some_positions_keeps_the_others(tmp_path, capsys):
    write_positions(tmp_path / "in", 3, shape=(32, 32))
    recipe = Recipe.from_defaults("tv", strength=1.2).save(tmp_path / "tv.yaml")
    out = tmp_path / "o.zarr"
    options = ["--out", str(out), "--device", "cpu", "--workers", "1", "--no-progress"]
    assert main(["run", str(recipe), str(tmp_path / "in" / "*.tif"), *options]) == 0
    one = str(tmp_path / "in" / "field01.tif")
    assert main(["run", str(recipe), one, *options, "--resume"]) == 0
    assert "3 done, 0 failed, 0 pending" in _status(out, capsys)
    assert _recorded(out) == ["field00", "field01", "field02"]
    # Another recipe resumed on one position: the others are not done with it (pending), and
    # still listed rather than dropped.
    other = Recipe.from_defaults("tv", strength=2.0).save(tmp_path / "tv2.yaml")
    assert main(["run", str(other), one, *options, "--resume"]) == 0
    status = _status(out, capsys)
    assert "1 done, 0 failed, 2 pending" in status
    assert "pending field00" in status and "pending field02" in status
    assert _recorded(out) == ["field00", "field01", "field02"]
