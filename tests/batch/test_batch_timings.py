"""Batch tasks on the CPU: the report times each position's read, compute and write, and the
device pools are kept between positions (emptied only after a failure or when they hold much
memory unused), counted with a fake CUDA memory state."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from batch_helpers import write_positions

from napari_gpuscope.batch import pools, tasks
from napari_gpuscope.batch.inputs import Position, discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore

GIB = 1024**3


@pytest.fixture
def client():
    """An in-process Dask client (threads): the monkeypatches below reach its tasks."""
    from distributed import Client

    with Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as dask_client:
        yield dask_client


def _delayed(monkeypatch, owner, name: str, seconds: float) -> None:
    original = getattr(owner, name)

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, slow)


def test_the_report_times_each_positions_read_compute_and_write(tmp_path, client, monkeypatch):
    paths = write_positions(tmp_path / "in", 3, shape=(64, 64))
    # Known extra time in each stage: the report must put it where it was spent.
    _delayed(monkeypatch, Position, "open", 0.15)
    _delayed(monkeypatch, tasks, "_compute", 0.25)
    _delayed(monkeypatch, BatchStore, "write_position", 0.2)
    released: list[tuple[str, bool]] = []
    monkeypatch.setattr(
        tasks, "release_pools", lambda device, *, failed: released.append((device, failed))
    )
    (tmp_path / "in" / "corrupt.tif").write_bytes(b"II*\x00 truncated")

    report = run_batch(
        Recipe.from_defaults("tv", strength=1.2),
        discover(str(tmp_path / "in" / "*.tif")),
        tmp_path / "out.zarr",
        client,
    )

    assert report.done == [p.stem for p in paths] and set(report.failed) == {"corrupt"}
    stages = report.timings["position_stages"]
    assert sorted(stages) == report.done
    for name, stage in stages.items():
        assert 0.15 <= stage["read"] < 0.4, stage
        assert 0.25 <= stage["compute"] < 5, stage
        assert 0.2 <= stage["write"] < 2, stage
        assert sum(stage.values()) <= report.timings["position_seconds"][name] + 1e-3
    means = report.timings["mean_stage_seconds"]
    for stage in ("read", "compute", "write"):
        expected = np.mean([s[stage] for s in stages.values()])
        assert means[stage] == pytest.approx(expected, abs=1e-4)
    assert any(line.startswith("per position (mean): read ") for line in report.lines())
    # The pools are looked at once per position, as failed only for the corrupt one.
    assert sorted(released) == [("cpu", False)] * 3 + [("cpu", True)]


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch.cuda's memory counters as a dict; empty_cache calls counted."""
    state = {"reserved": 2 * GIB, "allocated": GIB, "emptied": 0}
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: state["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device=None: SimpleNamespace(total_memory=80 * GIB),
    )

    def empty_cache() -> None:
        state["emptied"] += 1
        state["reserved"] = state["allocated"]

    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    return state


def test_pools_are_kept_between_positions(fake_gpu):
    for _ in range(20):  # 1 GiB unused of 80: the next position reuses it
        assert not pools.release_pools("cuda:0", failed=False)
    assert fake_gpu["emptied"] == 0
    assert not pools.release_pools("cpu", failed=True)


def test_pools_are_emptied_after_a_failure_or_when_much_is_unused(fake_gpu):
    assert pools.release_pools("cuda:0", failed=True)
    assert fake_gpu["emptied"] == 1
    fake_gpu["reserved"] = fake_gpu["allocated"] + int(pools.POOL_SLACK * 80 * GIB) + 1
    assert pools.release_pools("cuda:0", failed=False)
    assert fake_gpu["emptied"] == 2
    assert not pools.release_pools("cuda:0", failed=False)  # emptied: nothing unused now


def test_cupys_unused_pool_counts_and_is_freed_too(fake_gpu, monkeypatch):
    freed = []

    class Pool:
        def total_bytes(self) -> int:
            return 30 * GIB

        def used_bytes(self) -> int:
            return 0

        def free_all_blocks(self) -> None:
            freed.append(type(self).__name__)

    fake = SimpleNamespace(get_default_memory_pool=Pool, get_default_pinned_memory_pool=Pool)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert pools.release_pools("cuda:0", failed=False)  # 1 + 30 GiB unused > 20 GiB
    assert fake_gpu["emptied"] == 1 and freed == ["Pool", "Pool"]


def test_a_broken_context_never_hides_the_positions_outcome(fake_gpu, monkeypatch):
    def broken(device=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "memory_reserved", broken)
    assert not pools.release_pools("cuda:0", failed=True)
