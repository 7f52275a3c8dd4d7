"""Refusals of the batch commands (issue 17, items 2-5): options out of range, a locked,
unwritable or corrupt store, a malformed plate, duplicate or unreadable YAML values. Each is
exit 2 with one line naming the file or option and what to do, never a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from batch_helpers import write_positions

from napari_gpuscope.batch.lock import StoreLock
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.store import BatchStore, StoreError
from napari_gpuscope.cli import main


def _cli(capsys, *args: str) -> tuple[int, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def job(tmp_path):
    write_positions(tmp_path / "in", 2, shape=(32, 32))
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    return str(recipe), str(tmp_path / "in" / "*.tif"), tmp_path


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--workers", "-1", "must be from 1 to 1000, got -1"),
        ("--workers", "0", "must be from 1 to 1000, got 0"),
        ("--workers", "100000", "must be from 1 to 1000, got 100000"),
        ("--workers", "two", "expected a whole number from 1 to 1000"),
        ("--memory", "-5GB", "expected a size of at least 1MiB"),
        ("--memory", "lots", "expected a size of at least 1MiB"),
        ("--memory", "0", "expected a size of at least 1MiB"),
        ("--walltime", "25:99:00", "expected HH:MM:SS"),
        ("--walltime", "00:00:00", "expected HH:MM:SS"),
    ],
)
def test_options_out_of_range_exit_2_with_the_range(job, capsys, option, value, expected):
    recipe, pattern, tmp_path = job
    out = tmp_path / "out.zarr"
    code, text = _cli(
        capsys, "run", recipe, pattern, "--out", str(out), "--device", "cpu", f"{option}={value}"
    )
    assert code == 2
    assert f"argument {option}: {expected}" in text
    assert "Traceback" not in text and not out.exists()


def test_more_local_workers_than_cores_is_refused_before_any_worker_starts(job, capsys):
    recipe, pattern, tmp_path = job
    cores = os.cpu_count() or 1
    code, text = _cli(
        capsys, "run", recipe, pattern, "--out", str(tmp_path / "o.zarr"), "--device", "cpu",
        "--workers", str(cores + 1),
    )  # fmt: skip
    assert code == 2
    assert f"this machine has {cores} cores; give 1 to {cores}" in text


def _live_process() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _write_lock(store: BatchStore, pid: int, host: str | None = None) -> None:
    store.markers.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "host": host or socket.gethostname(), "since": "2026-01-01T00:00:00"}
    (store.markers / "lock.json").write_text(json.dumps(record))


def test_a_store_locked_by_a_live_run_is_refused_naming_pid_host_and_since(job, capsys):
    recipe, pattern, tmp_path = job
    out = tmp_path / "out.zarr"
    holder = _live_process()
    try:
        _write_lock(BatchStore(out), holder.pid)
        code, text = _cli(capsys, "run", recipe, pattern, "--out", str(out), "--device", "cpu")
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert f"is locked by another run (pid {holder.pid} on {socket.gethostname()} since " in text
    assert "2026-01-01T00:00:00" in text and "--wait" in text
    assert not out.exists()  # nothing written, no cluster started


def test_a_lock_of_another_host_is_held_and_a_dead_pid_is_stale(tmp_path):
    store = BatchStore(tmp_path / "out.zarr")
    _write_lock(store, 1, host="elsewhere.example")
    with pytest.raises(StoreError, match=r"locked by another run \(pid 1 on elsewhere.example"):
        StoreLock(store).acquire()

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _write_lock(store, dead.pid)
    said: list[str] = []
    with StoreLock(store, on_stale=said.append):
        owner = json.loads((store.markers / "lock.json").read_text())
        assert owner["pid"] == os.getpid()
        with StoreLock(store):  # the same process nests (CLI, then run_batch)
            pass
        assert (store.markers / "lock.json").is_file()
    assert not (store.markers / "lock.json").exists()
    assert said == [
        f"replaced a stale lock of pid {dead.pid} on {socket.gethostname()} since "
        f"2026-01-01T00:00:00 ({store.markers / 'lock.json'})"
    ]


def test_wait_waits_for_the_holder_to_go(tmp_path):
    store = BatchStore(tmp_path / "out.zarr")
    started = time.monotonic()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    # Reaped as it ends (a zombie child still has its pid; another run's holder is no child).
    threading.Thread(target=holder.wait, daemon=True).start()
    _write_lock(store, holder.pid)
    with pytest.raises(StoreError, match="locked by another run"):
        StoreLock(store).acquire()
    said: list[str] = []
    with StoreLock(store, wait=True, poll=0.1, on_stale=said.append):
        # Acquired only once the holder had ended: it sleeps 1.5 s. (Not holder.poll(): while
        # the reaping thread is inside wait(), poll() answers None even after the exit.)
        assert time.monotonic() - started >= 1.5
    assert len(said) == 1 and f"pid {holder.pid}" in said[0]


def test_an_unwritable_output_is_one_line(job, capsys, monkeypatch):
    recipe, pattern, tmp_path = job
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, text = _cli(
        capsys, "run", recipe, pattern, "--out", str(blocker / "out.zarr"), "--device", "cpu"
    )
    assert code == 2 and "Traceback" not in text
    assert f"cannot write beside the output store at {blocker / 'out.zarr.batch'}" in text
    assert "give --out a folder you can write to" in text

    # A read-only folder (simulated: the tests may run as root, who writes anyway).
    import zarr

    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.runner import run_batch

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(zarr, "open_group", refuse)
    out = tmp_path / "ro" / "out.zarr"
    with pytest.raises(StoreError, match=r"cannot write the output store .*ro/out.zarr: Perm"):
        run_batch(Recipe.from_defaults("tv"), discover(pattern), out, client=None)
    assert not (BatchStore(out).markers / "lock.json").exists()  # the lock went with the run


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", '{"recipe_hash": "x"}'])
def test_a_corrupt_run_record_is_named_for_status_and_resume(job, capsys, text):
    recipe, pattern, tmp_path = job
    out = tmp_path / "out.zarr"
    record = BatchStore(out).markers / "run.json"
    record.parent.mkdir(parents=True)
    record.write_text(text)
    for args in (
        ("status", str(out)),
        ("run", recipe, pattern, "--out", str(out), "--device", "cpu", "--resume"),
    ):
        code, said = _cli(capsys, *args)
        assert code == 2, args
        assert "Traceback" not in said
        assert f"{record} is corrupt" in said
        assert "rerun with --overwrite" in said
        assert sum("napari-gpuscope:" in line for line in said.splitlines()) == 1
        assert "Dask dashboard" not in said  # refused before any worker started


def _plate(root: Path, wells: list, images: list | None = None, datasets: list | None = None):
    import zarr

    root.mkdir(parents=True, exist_ok=True)
    (root / "zarr.json").write_text(
        json.dumps(
            {
                "zarr_format": 3,
                "node_type": "group",
                "attributes": {"ome": {"version": "0.5", "plate": {"wells": wells}}},
            }
        )
    )
    if images is None:
        return
    well = root / "A" / "1"
    well.mkdir(parents=True)
    (well / "zarr.json").write_text(
        json.dumps(
            {
                "zarr_format": 3,
                "node_type": "group",
                "attributes": {"ome": {"version": "0.5", "well": {"images": images}}},
            }
        )
    )
    if datasets is None:
        return
    image = well / "0"
    group = zarr.open_group(str(image), mode="w", zarr_format=3)
    group.attrs["ome"] = {"version": "0.5", "multiscales": [{"datasets": datasets}]}


@pytest.mark.parametrize(
    ("wells", "images", "datasets", "expected"),
    [
        ([{"rowIndex": 0}], None, None, "well 0 of the plate has no 'path'"),
        ([{"path": "A/1"}], [{"acquisition": 0}], None, "field 0 of well 'A/1' has no 'path'"),
        ([{"path": "A/1"}], [{"path": "0"}], [], "not a readable OME-Zarr image"),
        ([{"path": "A/1"}], [{"path": "0"}], [{"scale": 1}], "not a readable OME-Zarr image"),
    ],
)
def test_a_malformed_plate_is_one_line_naming_the_file(
    tmp_path, capsys, wells, images, datasets, expected
):
    plate = tmp_path / "plate.zarr"
    _plate(plate, wells, images, datasets)
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    for command in ("validate", "run"):
        extra = ("--out", str(tmp_path / "o.zarr"), "--device", "cpu") if command == "run" else ()
        code, said = _cli(capsys, command, str(recipe), str(plate), *extra)
        assert code == 2, command
        assert expected in said and "zarr.json" in said and "Traceback" not in said


def test_duplicate_keys_and_huge_numbers_name_the_key_and_line(tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_text("schema_version: 1\nmethod: tv\nmethod: esrrf\n")
    code, said = _cli(capsys, "validate", str(path), "x")
    assert code == 2
    assert f"{path}: key 'method' appears twice in one mapping (again on line 3)" in said

    path.write_text("schema_version: 1\nmethod: tv\nparams:\n  strength: 1\n  strength: 2\n")
    code, said = _cli(capsys, "validate", str(path), "x")
    assert code == 2 and "key 'strength' appears twice" in said and "line 5" in said

    path.write_text(f"schema_version: 1\nmethod: tv\nparams:\n  strength: {'7' * 5000}\n")
    code, said = _cli(capsys, "validate", str(path), "x")
    assert code == 2
    assert f"{path}: strength: line 4: cannot read the value (Exceeds the limit" in said
    assert "set_int_max_str_digits" not in said

    code, said = _cli(
        capsys, "recipe", "tv", "--set", f"strength={'7' * 5000}", "-o", str(tmp_path / "x.yaml")
    )
    assert code == 2 and "--set strength: cannot read" in said and "Traceback" not in said
    code, said = _cli(capsys, "recipe", "tv", "--set", "strength=[1, 2", "-o", str(path))
    assert code == 2 and "--set strength: cannot read '[1, 2'" in said


def test_status_says_who_holds_the_lock(tmp_path, capsys):
    store = BatchStore(tmp_path / "out.zarr")
    holder = _live_process()
    try:
        _write_lock(store, holder.pid)
        code, text = _cli(capsys, "status", str(store.out))
    finally:
        holder.kill()
        holder.wait()
    assert code == 0
    assert f"a run holds the store's lock: pid {holder.pid} on {socket.gethostname()}" in text
    assert "stale" not in text
    code, text = _cli(capsys, "status", str(store.out))
    assert "(stale: its process is gone)" in text


def test_a_lock_with_a_pid_beyond_a_c_long_is_stale_not_a_crash(tmp_path, capsys):
    """Issue 26 item 11: ``os.kill`` raised OverflowError: a traceback and exit 1 ("positions
    failed"). No process has such a pid: the lock is stale, and status says so."""
    store = BatchStore(tmp_path / "out.zarr")
    _write_lock(store, 2**70)
    code, text = _cli(capsys, "status", str(store.out))
    assert code == 0 and "(stale: its process is gone)" in text and "Traceback" not in text
    said: list[str] = []
    with StoreLock(store, on_stale=said.append):
        assert json.loads((store.markers / "lock.json").read_text())["pid"] == os.getpid()
    assert said and f"pid {2**70}" in said[0]


def test_a_lock_that_is_a_folder_is_refused_in_words(tmp_path):
    """Issue 26 item 14: it was "removed", then the run failed with "Is a directory"."""
    store = BatchStore(tmp_path / "out.zarr")
    (store.markers / "lock.json").mkdir(parents=True)
    with pytest.raises(StoreError, match="is a folder, not a lock file; remove it"):
        StoreLock(store).acquire()
    assert (store.markers / "lock.json").is_dir()  # nothing of the user's removed


class ClusterStarted(Exception):
    """Raised by the cluster factory the tests put in place of the real one."""


@pytest.fixture
def no_cluster(monkeypatch):
    """``open_client`` fails: a refusal must come before the command asks for a cluster."""
    from napari_gpuscope.batch import cluster

    def refuse(choice):
        raise ClusterStarted(choice)

    monkeypatch.setattr(cluster, "open_client", refuse)


def _earlier_run(out: Path) -> None:
    BatchStore(out).prepare({"recipe_hash": "0" * 64, "positions": []})


def _changed_profile(tmp_path: Path) -> str:
    import numpy as np

    from napari_gpuscope.compute.flatfield import ShadingProfile

    yy, xx = np.mgrid[:32, :32]
    flat = 1.2 - 0.4 * ((yy - 16) ** 2 + (xx - 16) ** 2) / 512
    profile = ShadingProfile.from_arrays(flat / flat.mean())
    profile.save(tmp_path / "scope.tif")
    recipe = tmp_path / "apply.yaml"
    profile_arg = f"profile={tmp_path / 'scope.tif'}"
    code = main(
        ["recipe", "flatfield", "--job", "apply", "--artifact", profile_arg, "-o", str(recipe)]
    )
    assert code == 0
    ShadingProfile.from_arrays(flat[::-1] / flat.mean()).save(tmp_path / "scope.tif")
    return str(recipe)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("earlier run", "holds an earlier run: pass --resume"),
        ("locked", "is locked by another run (pid"),
        ("read-only", "cannot write the output store"),
        ("corrupt record", "run.json is corrupt"),
        ("changed artifact", "changed since the recipe was saved (SHA-256 differs)"),
    ],
)
def test_a_refused_run_starts_no_cluster_and_prints_no_dashboard(
    job, capsys, monkeypatch, no_cluster, case, expected
):
    recipe, pattern, tmp_path = job
    out = tmp_path / "out.zarr"
    extra: list[str] = []
    holder = None
    if case == "earlier run":
        _earlier_run(out)
    elif case == "locked":
        holder = _live_process()
        _write_lock(BatchStore(out), holder.pid)
    elif case == "read-only":
        import zarr

        def refuse(path, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(zarr, "open_group", refuse)  # as a read-only folder (root writes)
    elif case == "corrupt record":
        (BatchStore(out).markers).mkdir(parents=True)
        (BatchStore(out).markers / "run.json").write_text("{not json")
        extra = ["--resume"]
    elif case == "changed artifact":
        recipe = _changed_profile(tmp_path)
    capsys.readouterr()
    try:
        code, text = _cli(
            capsys, "run", recipe, pattern, "--out", str(out), "--device", "cpu", *extra
        )
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    assert code == 2, text
    assert expected in text and "Traceback" not in text
    assert "Dask dashboard" not in text
    assert not (BatchStore(out).markers / "lock.json").exists() or case == "locked"


def test_a_run_that_will_not_be_refused_reaches_the_cluster(job, capsys, no_cluster):
    """The failing factory is reached once nothing refuses (the test above proves nothing),
    and --overwrite replaces a corrupt record instead of refusing it."""
    recipe, pattern, tmp_path = job
    out = tmp_path / "out.zarr"
    (BatchStore(out).markers).mkdir(parents=True)
    (BatchStore(out).markers / "run.json").write_text("{not json")
    with pytest.raises(ClusterStarted):
        main(["run", recipe, pattern, "--out", str(out), "--device", "cpu", "--overwrite"])
    assert not (BatchStore(out).markers / "lock.json").exists()
