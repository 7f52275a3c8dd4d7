"""The run command killed mid-run (driver and workers), then ``--resume``: only the missing
positions are computed and the store ends complete and correct; the compute and batch modules
never touch CUDA at import; GPU workers are pinned one per GPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from batch_helpers import direct, write_positions

from napari_gpuscope.batch.recipes import load_recipe
from napari_gpuscope.batch.status import store_status
from napari_gpuscope.batch.store import BatchStore

CLI = [sys.executable, "-m", "napari_gpuscope.cli"]


def _run_command(*args: str) -> list[str]:
    # One worker and no dashboard: each run starts in seconds on a loaded 2-core machine (the
    # two-worker runs are in test_batch_run.py).
    return [
        *CLI,
        "run",
        *args,
        "--device",
        "cpu",
        "--workers",
        "1",
        "--no-progress",
        "--dashboard",
        "",
    ]


def test_driver_killed_mid_run_then_resume_computes_only_the_missing(tmp_path, capsys):
    folder = tmp_path / "in"
    paths = write_positions(folder, 12)
    (folder / "broken.tif").write_bytes(b"not a TIFF")
    recipe_path = tmp_path / "tv.yaml"
    subprocess.run(
        [*CLI, "recipe", "tv", "--set", "tolerance=1e-5", "-o", str(recipe_path)], check=True
    )
    out = tmp_path / "out.zarr"
    done_dir = BatchStore(out).markers / "done"
    pattern = str(folder / "*.tif")

    # The whole run (driver, scheduler, nannies, workers) is killed at once, as by a lost node.
    first = subprocess.Popen(
        _run_command(str(recipe_path), pattern, "--out", str(out)),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        if len(list(done_dir.glob("*.json"))) >= 3:
            break
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    time.sleep(0.5)
    complete_before = sorted(p.stem for p in done_dir.glob("*.json"))
    assert 3 <= len(complete_before) < 12, "the run was not killed mid-way"
    assert store_status(out).pending  # the status command sees what is missing

    report_path = tmp_path / "report.json"
    second = subprocess.run(
        _run_command(
            str(recipe_path), pattern, "--out", str(out), "--resume", "--report", str(report_path)
        ),
        capture_output=True,
        text=True,
    )

    assert second.returncode == 1, second.stderr  # broken.tif failed: never silent
    report = json.loads(report_path.read_text())
    names = [p.stem for p in paths]
    assert report["skipped"] == complete_before
    assert sorted(report["done"]) == sorted(set(names) - set(complete_before))
    assert len(report["done"]) == 12 - len(complete_before)
    assert list(report["failed"]) == ["broken"] and "broken.tif" in report["failed"]["broken"]
    assert "FAILED broken" in second.stderr
    params = load_recipe(recipe_path).params_model()
    store = BatchStore(out)
    for path in paths:
        written, expected = store.read_position(path.stem), direct(path, params)
        assert written.tobytes() == expected.tobytes() and written.dtype == expected.dtype
    from napari_gpuscope.cli import main

    assert main(["status", str(out)]) == 1  # a failure is recorded
    assert "12 done, 1 failed, 0 pending" in capsys.readouterr().out


def test_compute_and_batch_imports_and_a_cpu_position_never_touch_cuda(tmp_path):
    write_positions(tmp_path, 1, shape=(64, 64))
    script = textwrap.dedent(
        f"""
        import torch

        def refuse(*args, **kwargs):
            raise AssertionError("CUDA was initialised")

        torch.cuda._lazy_init = refuse
        torch._C._cuda_init = refuse
        import importlib, pkgutil
        import napari_gpuscope.compute as compute
        for module in pkgutil.walk_packages(compute.__path__, "napari_gpuscope.compute."):
            importlib.import_module(module.name)
        from napari_gpuscope.batch import cluster, inputs, pools, recipes, runner, store
        from napari_gpuscope.batch import task_spec, tasks
        position = inputs.discover({str(tmp_path / "*.tif")!r})[0]
        recipe = recipes.Recipe.from_defaults("tv")
        spec = task_spec.TaskSpec(recipe.model_dump(mode="json"), recipe.hash(),
                              {str(tmp_path / "out.zarr")!r}, device="cpu")
        store.BatchStore(spec.out).prepare({{}})
        summary = tasks.run_position(spec, position, "key")
        assert summary["status"] == "done", summary
        assert not torch.cuda.is_initialized()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_gpu_workers_are_pinned_one_per_gpu_with_a_gpu_resource():
    import dask
    from distributed import Client

    from napari_gpuscope.batch.cluster import _spawn, pinned_gpu_cluster

    _spawn()
    assert dask.config.get("distributed.worker.multiprocessing-method") == "spawn"
    with pinned_gpu_cluster([0, 3], dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        # Dask's malloc trim threshold would make torch's allocations 2.7x slower.
        trim = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        workers = list(client.scheduler_info()["workers"].values())
    assert sorted(seen.values()) == ["0", "3"]
    assert list(trim.values()) == [None, None] or "MALLOC_TRIM_THRESHOLD_" in os.environ
    assert [w["resources"] for w in workers] == [{"GPU": 1}, {"GPU": 1}]
    assert [w["nthreads"] for w in workers] == [1, 1]


def test_a_rerun_of_a_finished_position_keeps_it_in_place(tmp_path):
    # Dask reruns a task whose worker died before its result reached the driver. Seen in CI:
    # the rerun discarded a position the report already called done, and the run ended while
    # it was absent. A rerun of the same computation must leave the finished group alone.
    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.batch.store import marker_key
    from napari_gpuscope.batch.task_spec import TaskSpec
    from napari_gpuscope.batch.tasks import run_position

    write_positions(tmp_path / "in", 1, shape=(48, 48))
    (position,) = discover(str(tmp_path / "in" / "*.tif"))
    recipe = Recipe.from_defaults("tv")
    spec = TaskSpec(recipe.model_dump(mode="json"), recipe.hash(), str(tmp_path / "out.zarr"))
    BatchStore(spec.out).prepare({"recipe_hash": recipe.hash()})
    key = marker_key(recipe.hash(), position.identity())
    first = run_position(spec, position, key)
    assert first["status"] == "done"
    array = tmp_path / "out.zarr" / position.name / "zarr.json"
    written = array.stat().st_mtime_ns, array.stat().st_ino
    again = run_position(spec, position, key)
    assert again["status"] == "done" and again["position"] == position.name
    assert (array.stat().st_mtime_ns, array.stat().st_ino) == written  # not rewritten
    # Another computation does rewrite it: the group is replaced whole. (Not compared by inode:
    # the file system may give the new zarr.json the number the deleted one had.)
    left_there = array.parent / "left-there.txt"
    left_there.write_text("from before")
    other = marker_key("another recipe", position.identity())
    assert run_position(spec, position, other)["status"] == "done"
    assert array.is_file() and not left_there.exists()


def test_two_concurrent_resumes_one_refused_one_waits_none_computes_twice(tmp_path):
    write_positions(tmp_path / "in", 6)  # long enough for the others to start meanwhile
    recipe_path = tmp_path / "tv.yaml"
    subprocess.run([*CLI, "recipe", "tv", "-o", str(recipe_path)], check=True)
    out = tmp_path / "out.zarr"
    lock = BatchStore(out).markers / "lock.json"
    command = _run_command(str(recipe_path), str(tmp_path / "in" / "*.tif"), "--out", str(out))
    first = subprocess.Popen(
        [*command, "--resume"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not lock.exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.01)
    assert lock.exists(), "the first run never took the lock"

    refused = subprocess.run([*command, "--resume"], capture_output=True, text=True)
    waited = subprocess.run([*command, "--resume", "--wait"], capture_output=True, text=True)
    first_out, first_err = first.communicate(timeout=120)

    assert first.returncode == 0, first_err
    assert "computed 6, skipped 0" in first_out
    assert refused.returncode == 2
    assert f"is locked by another run (pid {first.pid} on " in refused.stderr
    assert waited.returncode == 0, waited.stderr
    assert "computed 0, skipped 6 (already complete)" in waited.stdout
    assert not lock.exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".writing-")]
