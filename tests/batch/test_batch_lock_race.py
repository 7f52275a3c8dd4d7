"""The store lock under contention (issue 26 item 2): many runs start at once on a store whose
lock is stale, with and without 1 ms of latency on every read of the lock file (as on the
network file systems clusters use). Exactly one holds the store at any moment.

Before, taking over was read owner -> decide stale -> delete -> create: a contender that
judged the stale file late deleted the fresh lock of the one that had taken it over, and 2-6 of
6 contenders held the lock at once in 5 of 6 rounds with 1 ms of latency.

Each contender is a separate process. While holding the lock it creates ``inside`` with
``O_EXCL`` (an overlap makes that fail and is reported), stays a little, and removes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from napari_gpuscope.batch.store import BatchStore

CONTENDER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from napari_gpuscope.batch import lock as lock_module
    from napari_gpuscope.batch.store import BatchStore, StoreError

    out, start, latency = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    if latency:  # every read of the lock file, as a network file system adds
        for name in ("read_bytes", "read_text"):
            def slow(self, *args, _read=getattr(Path, name), **kwargs):
                if self.name == "lock.json":
                    time.sleep(latency)
                    content = _read(self, *args, **kwargs)
                    time.sleep(latency)
                    return content
                return _read(self, *args, **kwargs)
            setattr(Path, name, slow)
    store = BatchStore(Path(out))
    inside = store.markers / "inside"
    while time.time() < start:
        time.sleep(0.001)
    try:
        with lock_module.StoreLock(store, on_stale=lambda text: None):
            try:
                descriptor = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                print("OVERLAP")
                sys.exit(0)
            os.close(descriptor)
            time.sleep(0.3)
            os.unlink(inside)
            print("HELD")
    except StoreError:
        print("REFUSED")
    """
)


def _stale_lock(store: BatchStore) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.markers.mkdir(parents=True, exist_ok=True)
    record = {"pid": dead.pid, "host": os.uname().nodename, "since": "2026-01-01T00:00:00"}
    (store.markers / "lock.json").write_text(json.dumps(record))


@pytest.mark.parametrize("latency", [0.0, 0.001], ids=["local disk", "1 ms per read"])
def test_one_contender_holds_a_taken_over_lock_at_a_time(tmp_path, latency):
    contenders, rounds = 6, 3
    for round_ in range(rounds):
        store = BatchStore(tmp_path / f"round{round_}" / "out.zarr")
        _stale_lock(store)
        start = time.time() + 3.0  # every contender imported and waiting, even on a slow CI
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", CONTENDER, str(store.out), repr(start), repr(latency)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(contenders)
        ]
        answers = []
        for process in processes:
            stdout, stderr = process.communicate(timeout=120)
            assert process.returncode == 0, stderr[-2000:]
            answers.append(stdout.strip())
        assert "OVERLAP" not in answers, answers
        assert answers.count("HELD") >= 1, answers  # the stale lock was taken over
        assert set(answers) <= {"HELD", "REFUSED"}, answers
        assert not (store.markers / "lock.json").exists()  # the last holder let go
        assert not list(store.markers.glob("lock.json.takeover-*"))  # no claim left behind
