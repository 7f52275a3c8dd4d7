"""A worker kept busy (batch/pipeline.py): a position is written while the next one computes,
at most one being written and one computed ahead of it, results byte for byte the method's;
a write error fails its position; several (fake) GPUs each get their own worker, every
position runs once, and the report gives each worker's busy time."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from batch_helpers import direct, write_positions

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore

RECIPE = {"strength": 1.2, "tolerance": 2e-4}


@pytest.fixture
def one_worker():
    """One worker, one thread, in this process (so the tests can watch its tasks), advertising
    one GPU as a GPU worker does."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            dashboard_address=None,
            resources={"GPU": 1},
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _watch(monkeypatch, write_pause: float, fail: str | None = None) -> list[tuple]:
    """Record when each position computes and is written (the write held ``write_pause`` s, so
    that the next position's compute falls inside it)."""
    from napari_gpuscope.batch import store, tasks

    events: list[tuple] = []
    lock = threading.Lock()
    compute, write = tasks._compute, store.BatchStore.write_position

    def record(*event) -> None:
        with lock:
            events.append((*event, time.perf_counter()))

    def timed_compute(resolved, position, *args, **kwargs):
        record("compute", position.name, "start")
        try:
            return compute(resolved, position, *args, **kwargs)
        finally:
            record("compute", position.name, "end")

    def timed_write(self, name, *args, **kwargs):
        record("write", name, "start")
        try:
            time.sleep(write_pause)
            if name == fail:
                raise OSError(28, "No space left on device")
            return write(self, name, *args, **kwargs)
        finally:
            record("write", name, "end")

    monkeypatch.setattr(tasks, "_compute", timed_compute)
    monkeypatch.setattr(store.BatchStore, "write_position", timed_write)
    return events


def _spans(events, kind):
    starts = {name: t for k, name, edge, t in events if k == kind and edge == "start"}
    ends = {name: t for k, name, edge, t in events if k == kind and edge == "end"}
    return {name: (starts[name], ends[name]) for name in starts}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_next_position_computes_while_one_is_written_one_write_at_a_time(
    tmp_path, one_worker, monkeypatch, device
):
    paths = write_positions(tmp_path / "in", 5, shape=(48, 48))
    events = _watch(monkeypatch, write_pause=0.4)
    if device == "cuda":
        # GPU tasks require the worker's GPU resource, which Dask holds until a task ends,
        # also while it writes: the next position must start all the same. (Computed on the
        # CPU: only the scheduling is a GPU run's.)
        from napari_gpuscope.batch import tasks

        monkeypatch.setattr(tasks, "_device", lambda task: "cpu")
    from napari_gpuscope.batch import pipeline

    read_through, read_ahead = pipeline._read_through, []
    monkeypatch.setattr(
        pipeline, "_read_through", lambda files: (read_ahead.extend(files), read_through(files))
    )
    recipe = Recipe.from_defaults("tv", **RECIPE)

    report = run_batch(
        recipe,
        discover(str(tmp_path / "in" / "*.tif")),
        tmp_path / "o.zarr",
        one_worker,
        device=device,
    )

    assert report.done == [p.stem for p in paths] and not report.failed
    computes, writes = _spans(events, "compute"), _spans(events, "write")
    # Overlap: some position computed while another was being written.
    assert any(
        c0 < w1 and w0 < c1
        for name, (c0, c1) in computes.items()
        for other, (w0, w1) in writes.items()
        if other != name
    )
    # Bounded: never two writes at once, and never more than two positions in hand (one
    # being written, one computed or computing), however slow the writes.
    ordered = sorted(writes.values())
    assert all(a1 <= b0 for (_, a1), (b0, _) in itertools.pairwise(ordered))
    for name, (start, _) in computes.items():
        in_hand = [n for n, (c0, _) in computes.items() if c0 <= start and writes[n][1] > start]
        assert len(in_hand) <= 2, (name, in_hand)
    # One worker: each position but the first was read ahead while the one before computed.
    assert sorted(map(str, read_ahead)) == [str(p) for p in paths[1:]]
    # The results are the method's own, byte for byte.
    store, params = BatchStore(tmp_path / "o.zarr"), recipe.params_model()
    for path in paths:
        assert store.read_position(path.stem).tobytes() == direct(path, params).tobytes()
    worker = next(iter(report.workers.values()))
    assert worker["positions"] == 5 and 0 < worker["busy_seconds"] <= report.timings["wall_seconds"]


def test_a_write_error_fails_that_position_and_marks_nothing_done(
    tmp_path, one_worker, monkeypatch
):
    paths = write_positions(tmp_path / "in", 3, shape=(32, 32))
    _watch(monkeypatch, write_pause=0.0, fail=paths[1].stem)
    recipe = Recipe.from_defaults("tv", **RECIPE)

    report = run_batch(
        recipe, discover(str(tmp_path / "in" / "*.tif")), tmp_path / "o.zarr", one_worker
    )

    assert report.exit_code == 1
    assert report.done == [paths[0].stem, paths[2].stem]
    reason = report.failed[paths[1].stem]
    assert reason.startswith("writing ") and "No space left on device" in reason
    store = BatchStore(tmp_path / "o.zarr")
    assert store.done_record(paths[1].stem) is None
    assert "No space left" in store.failed_record(paths[1].stem)["reason"]
    assert not (store.out / paths[1].stem).exists()


@pytest.mark.slow  # two spawned worker processes
def test_each_fake_gpu_gets_one_worker_every_position_runs_once_and_busy_time_is_reported(
    tmp_path,
):
    from distributed import Client

    from napari_gpuscope.batch.cluster import _spawn, pinned_gpu_cluster

    paths = write_positions(tmp_path / "in", 6, shape=(32, 32))
    recipe = Recipe.from_defaults("tv", **RECIPE)
    _spawn()
    with (
        pinned_gpu_cluster(["5", "7"], dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        # The positions compute on the CPU; each task records the GPU its worker was given.
        report = run_batch(
            recipe, discover(str(tmp_path / "in" / "*.tif")), tmp_path / "o.zarr", client
        )

    names = [p.stem for p in paths]
    assert report.done == names and not report.failed
    store = BatchStore(tmp_path / "o.zarr")
    seen = {name: store.done_record(name)["worker"]["gpu"] for name in names}
    assert set(seen.values()) <= {"5", "7"}
    assert {w["gpu"] for w in report.workers.values()} == {"5", "7"}
    assert sum(w["positions"] for w in report.workers.values()) == len(names)  # once each
    for worker in report.workers.values():
        assert 0 < worker["busy_seconds"] <= report.timings["wall_seconds"]
    by_gpu = {w["gpu"]: w["positions"] for w in report.workers.values()}
    assert by_gpu == {gpu: list(seen.values()).count(gpu) for gpu in ("5", "7")}
    assert any(line.startswith("busy per worker: ") for line in report.lines())


def test_one_read_ahead_at_a_time_per_worker(tmp_path):
    import os

    from napari_gpuscope.batch.inputs import Position
    from napari_gpuscope.batch.pipeline import read_ahead

    slow = tmp_path / "slow.tif"
    os.mkfifo(slow)  # its read blocks until a writer comes: a read that takes as long as we like
    first = read_ahead(Position("slow", "tiff", str(slow)))
    assert first is not None and first.is_alive()
    assert read_ahead(Position("slow", "tiff", str(slow))) is None  # bounded: still reading
    with open(slow, "wb") as writer:
        writer.write(b"x" * 3_000_000)
    first.join(10)
    assert not first.is_alive()
    (tmp_path / "b.tif").write_bytes(b"y" * 10)
    second = read_ahead(Position("b", "tiff", str(tmp_path / "b.tif")))
    assert second is not None
    second.join(10)
