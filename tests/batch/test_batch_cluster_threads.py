"""A GPU run on an existing scheduler refuses GPU workers with more than one thread.

Each position asks half of a worker's ``GPU=1`` (one written while the next computes); a
worker started without ``--nthreads 1`` has several threads and would compute two positions at
once on its GPU. No GPU is needed: the check reads the workers' declared threads and resources
from the scheduler (in-process workers here).
"""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")
pytest.importorskip("zarr")

from batch_helpers import write_positions

from napari_gpuscope.batch.cluster import ClusterChoice, GpuWorkerError, open_client
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.cli import main


def _scheduler(threads: int, resources: dict[str, float] | None):
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=1,
        threads_per_worker=threads,
        resources=resources,
        processes=False,
        dashboard_address=None,
    )


def test_the_command_refuses_a_two_thread_gpu_worker(tmp_path, capsys):
    write_positions(tmp_path / "in", 1, shape=(32, 32))
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    with _scheduler(2, {"GPU": 1}) as cluster:
        address = cluster.scheduler_address
        (worker,) = (w.address for w in cluster.workers.values())
        args = ["run", str(recipe), str(tmp_path / "in" / "*.tif"), "--out"]
        args += [str(tmp_path / "o.zarr"), "--cluster", address, "--device", "cuda"]
        assert main([*args, "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "GPU workers must run one thread each" in err
    assert f"{worker} has 2 threads and GPU=1" in err
    assert f"dask worker {address} --nthreads 1 --resources GPU=1" in err


@pytest.mark.parametrize(
    ("threads", "resources", "device"),
    [
        (1, {"GPU": 1}, "cuda"),  # as the docs say to start them
        (2, None, "cuda"),  # no GPU declared: nothing of its GPU to share (not this check's)
        (2, {"GPU": 1}, "cpu"),  # a CPU run asks no GPU of the worker
    ],
)
def test_workers_that_compute_one_position_per_gpu_are_accepted(threads, resources, device):
    with (
        _scheduler(threads, resources) as cluster,
        open_client(ClusterChoice(cluster=cluster.scheduler_address, device=device)) as client,
    ):
        assert client.submit(sum, [1, 2]).result() == 3


def test_the_check_names_the_error_type_for_python_callers():
    with (
        _scheduler(3, {"GPU": 2}) as cluster,
        pytest.raises(GpuWorkerError, match="has 3 threads and GPU=2"),
        open_client(ClusterChoice(cluster=cluster.scheduler_address, device="cuda")),
    ):
        pass
