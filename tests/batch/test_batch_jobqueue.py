"""``run --cluster slurm|pbs|lsf`` end to end without a cluster: a fake scheduler on ``PATH``
(:mod:`fake_scheduler`) runs the job scripts dask-jobqueue generates, locally, in the
background. The workers start from the real script and connect; the output equals the method
called directly; a job killed mid-position leaves that position to be computed again, and
nothing is marked done that was not written."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time

import pytest
from batch_helpers import direct, write_positions

from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.cli import main

pytest.importorskip("dask_jobqueue")
fake_scheduler = pytest.importorskip("fake_scheduler")

HEADERS = {"slurm": "#SBATCH", "pbs": "#PBS", "lsf": "#BSUB"}


@pytest.fixture
def scheduler(tmp_path, monkeypatch):
    sched = fake_scheduler.install(tmp_path / "fake", monkeypatch)
    try:
        yield sched
    finally:
        sched.cancel_all()  # a job a failed test left running


def _run_argv(tmp_path, cluster: str, paths, *extra: str) -> list[str]:
    recipe = Recipe.from_defaults("tv", strength=1.2, tolerance=2e-4)
    recipe_path = tmp_path / "tv.yaml"
    recipe.save(recipe_path)
    return [
        "run",
        str(recipe_path),
        *(str(p) for p in paths),  # as a shell passes an unquoted glob
        "--out",
        str(tmp_path / "out.zarr"),
        "--device",
        "cpu",
        "--cluster",
        cluster,
        "--workers",
        "2",
        "--memory",
        "2GB",
        "--walltime",
        "00:10:00",
        "--queue",
        "fastq",
        "--no-progress",
        "--report",
        str(tmp_path / "report.json"),
        *extra,
    ]


def _assert_outputs_equal_direct_calls(tmp_path, paths) -> None:
    store = BatchStore(tmp_path / "out.zarr")
    params = Recipe.from_defaults("tv", strength=1.2, tolerance=2e-4).params_model()
    for path in paths:
        actual, expected = store.read_position(path.stem), direct(path, params)
        assert actual.dtype == expected.dtype and actual.tobytes() == expected.tobytes()


@pytest.mark.slow  # a fake job starts a Dask worker process (~5 s)
@pytest.mark.parametrize("cluster", ["slurm", "pbs", "lsf"])
def test_a_scheduler_runs_the_batch_from_its_job_script_as_a_local_run_would(
    tmp_path, scheduler, cluster, capsys
):
    paths = write_positions(tmp_path / "in", 3, shape=(48, 48))
    argv = _run_argv(tmp_path, cluster, paths)

    assert main(argv) == 0, capsys.readouterr().err

    report = json.loads((tmp_path / "report.json").read_text())
    assert report["done"] == [p.stem for p in paths] and report["failed"] == {}
    _assert_outputs_equal_direct_calls(tmp_path, paths)
    jobs = scheduler.job_ids()
    assert 1 <= len(jobs) <= 2  # adapt(): at most --workers jobs
    script = scheduler.script(jobs[0])
    assert f"{HEADERS[cluster]} " in script and "fastq" in script
    assert "distributed.cli.dask_worker" in script and "--lifetime" in script
    # The workers that computed were the jobs' (their pids are the fake jobs' processes).
    workers = {
        json.loads(
            (BatchStore(tmp_path / "out.zarr").markers / "done" / f"{p.stem}.json").read_text()
        )["worker"]["pid"]
        for p in paths
    }
    assert os.getpid() not in workers
    # A resumed run computes nothing and submits no job.
    assert main([*argv, "--resume"]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["skipped"] == [p.stem for p in paths]
    assert scheduler.job_ids() == jobs


def test_dry_run_prints_each_schedulers_job_script_with_the_options(tmp_path, capsys):
    paths = write_positions(tmp_path / "in", 1, shape=(32, 32))
    for cluster, expected in {
        "slurm": ["#SBATCH -p gpuq", "#SBATCH -A lab", "#SBATCH -t 02:00:00", "--gres=gpu:2"],
        "pbs": ["#PBS -q gpuq", "#PBS -A lab", "walltime=02:00:00", "ngpus=2"],
        "lsf": ["#BSUB -q gpuq", '#BSUB -P "lab"', "#BSUB -W 02:00", '-gpu "num=2"'],
    }.items():
        argv = _run_argv(tmp_path, cluster, paths, "--dry-run")
        argv[argv.index("cpu")] = "cuda"
        argv[argv.index("fastq")] = "gpuq"
        argv[argv.index("00:10:00")] = "02:00:00"
        argv += ["--account", "lab", "--gpus-per-job", "2"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        for line in expected:
            assert line in out, (cluster, line, out)
        # Two GPUs per job: two worker processes, each pinned to one of them.
        assert "--nworkers 2" in out and "--preload napari_gpuscope.batch.gpu_pin" in out
        assert "--resources GPU=1" in out
    assert not (tmp_path / "out.zarr").exists()  # a dry run writes nothing


@pytest.mark.slow  # a fake job starts a Dask worker process (~5 s)
def test_a_job_with_two_gpus_runs_two_workers_each_pinned_to_one(tmp_path, scheduler):
    from dask.distributed import Client

    from napari_gpuscope.batch.cluster import ClusterChoice
    from napari_gpuscope.batch.jobqueue import jobqueue_cluster

    choice = ClusterChoice(cluster="slurm", device="cuda", gpus_per_job=2, memory="2GB")
    with jobqueue_cluster(choice) as cluster, Client(cluster) as client:
        cluster.scale(jobs=2)
        client.wait_for_workers(4, timeout=120)
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        resources = [w["resources"] for w in client.scheduler_info()["workers"].values()]
    # The fake scheduler gave job 1 GPUs 0,1 and job 2 GPUs 2,3: one worker on each.
    assert sorted(seen.values()) == ["0", "1", "2", "3"]
    assert resources == [{"GPU": 1}] * 4


HANG = textwrap.dedent(
    """
    import os, time

    def dask_setup(worker):
        from napari_gpuscope.batch import tasks

        original = tasks._compute

        def compute(resolved, position, *args, **kwargs):
            if position.name == {name!r}:
                try:  # the first attempt only: it records itself and hangs mid-position
                    fd = os.open({flag!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.write(fd, f"{{os.getpid()}} {{os.environ['FAKE_JOB_ID']}}".encode())
                    os.close(fd)
                    time.sleep(600)
            return original(resolved, position, *args, **kwargs)

        tasks._compute = compute
    """
)


@pytest.mark.slow  # a fake job starts a Dask worker process (~5 s)
def test_a_job_killed_mid_position_has_that_position_computed_again(
    tmp_path, scheduler, monkeypatch, capsys
):
    paths = write_positions(tmp_path / "in", 3, shape=(48, 48))
    hung = paths[1].stem
    flag = tmp_path / "hung"
    preload = tmp_path / "hang_preload.py"
    preload.write_text(HANG.format(name=hung, flag=str(flag)))
    # Inherited by the fake jobs' workers (dask reads its config from the environment).
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__PRELOAD", json.dumps([str(preload)]))
    store = BatchStore(tmp_path / "out.zarr")
    seen: dict[str, object] = {}

    def kill_the_hung_job() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (flag.is_file() and flag.read_text()):
            time.sleep(0.1)
        if not flag.is_file():
            return
        pid, job = flag.read_text().split()
        seen["pid"], seen["job"] = int(pid), int(job)
        seen["done_before_kill"] = store.done_record(hung)
        scheduler.kill(int(job))

    killer = threading.Thread(target=kill_the_hung_job, daemon=True)
    killer.start()
    assert main(_run_argv(tmp_path, "slurm", paths)) == 0, capsys.readouterr().err
    killer.join(5)

    assert seen, "the position never started on a job"
    assert seen["done_before_kill"] is None  # mid-position: not marked done
    assert seen["job"] not in scheduler.running()
    record = store.done_record(hung)
    assert record is not None and record["worker"]["pid"] != seen["pid"]  # computed again
    assert all(store.is_complete(p.stem, store.done_record(p.stem)["key"]) for p in paths)
    assert not [p for p in store.out.iterdir() if p.name.startswith(".writing-")]
    _assert_outputs_equal_direct_calls(tmp_path, paths)
