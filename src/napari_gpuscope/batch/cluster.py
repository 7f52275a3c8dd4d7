"""Where a batch runs: local CPU or GPU workers, SLURM, PBS or LSF, or an existing Dask
scheduler.

- ``--device cpu``: a :class:`distributed.LocalCluster` of worker *processes*, one thread each
  (tests and reference runs).
- ``--device cuda:0,cuda:1`` (local): one worker process per GPU, one thread each, pinned with
  ``CUDA_VISIBLE_DEVICES`` in the worker's environment before Python starts (so nothing in it
  can touch another GPU), each advertising the resource ``GPU=1`` (a task requires
  :data:`TASK_GPU_SHARE` of it).
  With the ``cuda`` extra installed, dask-cuda's ``LocalCUDACluster`` does this; without it a
  :class:`distributed.SpecCluster` of nannies does the same.
- ``--cluster slurm|pbs|lsf`` (the ``hpc`` extra): dask-jobqueue's clusters, one worker
  process per GPU of a job, worker lifetimes staggered below the wall time (a worker retires
  and is replaced before the scheduler kills it), and ``adapt()`` (:mod:`.jobqueue`).
- ``--cluster tcp://host:8786``: an existing scheduler; for GPU runs each of its workers must
  advertise ``GPU=1`` and run one thread (``dask worker ADDRESS --nthreads 1 --resources GPU=1``,
  one per GPU, each with its ``CUDA_VISIBLE_DEVICES``). Dask gives a worker one thread per core
  unless told otherwise, and with two threads two positions would compute at once on its GPU
  (:data:`TASK_GPU_SHARE`): a GPU run refuses such workers at the start
  (:func:`check_gpu_workers`).

Worker processes are spawned, never forked: a forked child would inherit a parent's CUDA
state.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Client
    from distributed.deploy import Cluster

__all__ = [
    "CLOSE_TIMEOUT",
    "TASK_GPU_SHARE",
    "ClusterChoice",
    "GpuWorkerError",
    "check_gpu_workers",
    "close_cluster",
    "gpu_indices",
    "open_client",
    "physical_gpus",
    "pinned_gpu_cluster",
    "slurm_cluster",
    "slurm_lifetime",
]

GPU_RESOURCE = "GPU"

TASK_GPU_SHARE = 0.5
"""The ``GPU`` resource a position's task requires of a worker that advertises ``GPU=1``.

Dask releases a task's resources only when it ends, also after it left the thread pool to
write (:mod:`.pipeline`): with a whole GPU per task, the worker's next position could not start
while one is written. Half lets a worker hold two, one being written and one computing; its
one thread still computes one position at a time. That holds only for a worker of one thread:
with two, both halves compute at once on one GPU (twice the device memory), which is why
:func:`check_gpu_workers` refuses such workers.
"""


class GpuWorkerError(RuntimeError):
    """A worker advertising a GPU would compute several positions on it at once."""


def check_gpu_workers(client: Client) -> None:
    """Refuse GPU workers with more than one thread (a GPU run on an existing scheduler).

    A worker advertising ``GPU`` gives each position :data:`TASK_GPU_SHARE` of it, so that one
    position is written while the next computes on its single thread. A worker started as
    ``dask worker ADDRESS --resources GPU=1`` without ``--nthreads 1`` has one thread per core,
    and two positions then compute on its GPU at once, needing twice the device memory (an
    out-of-memory failure on large positions). Refused rather than warned about: the fix is
    one option when starting the workers, and a warning scrolls away while positions fail.
    Only the workers connected now are checked.

    Raises
    ------
    GpuWorkerError
        Names the workers, their threads and resources, and the command to start them with.

    Examples
    --------
    >>> from distributed import Client
    >>> with Client(processes=False, n_workers=1, threads_per_worker=1, resources={"GPU": 1},
    ...             dashboard_address=None) as client:
    ...     check_gpu_workers(client)
    """
    workers = client.scheduler_info(n_workers=-1)["workers"]
    crowded = {
        address: (info.get("nthreads", 1), info.get("resources") or {})
        for address, info in workers.items()
        if (info.get("resources") or {}).get(GPU_RESOURCE, 0) > 0 and info.get("nthreads", 1) > 1
    }
    if not crowded:
        return
    named = "; ".join(
        f"{address} has {threads} threads and {GPU_RESOURCE}={resources[GPU_RESOURCE]:g}"
        for address, (threads, resources) in sorted(crowded.items())[:3]
    )
    more = f" (and {len(crowded) - 3} more)" if len(crowded) > 3 else ""
    raise GpuWorkerError(
        f"GPU workers must run one thread each: {named}{more}, so positions would compute "
        "at once on one GPU (twice its memory). Restart them as 'dask worker "
        f"{client.scheduler.address} --nthreads 1 --resources {GPU_RESOURCE}=1', one per GPU, "
        "each with its CUDA_VISIBLE_DEVICES"
    )


@dataclass(frozen=True)
class ClusterChoice:
    """The run command's cluster options.

    Attributes
    ----------
    cluster : str
        ``"local"``, a scheduler (``"slurm"``, ``"pbs"``, ``"lsf"``) or a Dask scheduler's
        address.
    device : str
        ``"cpu"`` or a comma-separated list of ``cuda:N``.
    workers : int or None
        CPU workers (default 2) or, on a scheduler, the most jobs ``adapt()`` may start.
    dashboard : str
        Dashboard address of a local cluster (``":0"``: any free port; ``""``: none).
    walltime : str
        A job's wall time ``HH:MM:SS``.
    queue, account : str or None
        A job's queue (SLURM: partition) and account (LSF: project).
    memory : str
        Host memory per job.
    gpus_per_job : int
        GPUs per job, one worker process each (GPU runs on a scheduler).
    """

    cluster: str = "local"
    device: str = "cpu"
    workers: int | None = None
    dashboard: str = ":0"
    walltime: str = "01:00:00"
    queue: str | None = None
    account: str | None = None
    memory: str = "32GB"
    gpus_per_job: int = 1

    @property
    def uses_gpu(self) -> bool:
        """Whether tasks need a ``GPU`` resource."""
        return self.device != "cpu"

    @property
    def task_device(self) -> str:
        """The device string each task resolves on its worker."""
        return "cpu" if self.device == "cpu" else "cuda"


def gpu_indices(device: str) -> list[int]:
    """``"cuda:0,cuda:1"`` -> ``[0, 1]``; ``"cuda"`` -> every visible GPU.

    Examples
    --------
    >>> gpu_indices("cuda:0,cuda:2")
    [0, 2]
    """
    if device == "cuda":
        import torch  # only the driver asks how many GPUs there are

        count = torch.cuda.device_count()
        if count == 0:
            raise ValueError("--device cuda: no CUDA GPU is visible; use --device cpu by name")
        return list(range(count))
    indices = []
    for part in device.split(","):
        name = part.strip()
        if not name.startswith("cuda:") or not name[5:].isdigit():
            raise ValueError(f"--device: {name!r} is not cuda:N (or cpu)")
        indices.append(int(name[5:]))
    if len(set(indices)) != len(indices):
        raise ValueError(f"--device: {device!r} names a GPU twice")
    return indices


def slurm_lifetime(walltime: str) -> tuple[str, str]:
    """Worker ``--lifetime`` and ``--lifetime-stagger`` below a wall time
    (:func:`~napari_gpuscope.batch.jobqueue.job_lifetime`, for every scheduler).

    Examples
    --------
    >>> slurm_lifetime("01:00:00")
    ('54m', '3m')
    """
    from napari_gpuscope.batch.jobqueue import job_lifetime

    return job_lifetime(walltime)


def _spawn() -> None:
    """Spawned workers, and glibc's malloc left alone in them.

    Dask's nannies export ``MALLOC_TRIM_THRESHOLD_=65536`` to their workers; setting it freezes
    glibc's mmap threshold at 128 KiB, so every torch tensor of a position (a 256^2 float32
    plane is 256 KiB) is mmapped, zero-filled and unmapped again: TV ran 2.7x slower in a
    worker than in a plain process. ``None`` unsets it (a user's own export still wins).
    """
    import dask

    dask.config.set(
        {
            "distributed.worker.multiprocessing-method": "spawn",
            "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
        }
    )


def _local_cpu(choice: ClusterChoice) -> Cluster:
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=choice.workers or 2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=choice.dashboard or None,
    )


def physical_gpus(indices: list[int]) -> list[str]:
    """What to put in each worker's ``CUDA_VISIBLE_DEVICES`` for ``cuda:N`` as the driver sees
    it: with the driver itself restricted (``CUDA_VISIBLE_DEVICES=2,3``), ``cuda:0`` is GPU 2.

    Examples
    --------
    >>> import os
    >>> os.environ["CUDA_VISIBLE_DEVICES"] = "2,3"
    >>> physical_gpus([1])
    ['3']
    >>> del os.environ["CUDA_VISIBLE_DEVICES"]
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return [str(index) for index in indices]
    names = [name.strip() for name in visible.split(",") if name.strip()]
    for index in indices:
        if index >= len(names):
            raise ValueError(
                f"--device cuda:{index}: only {len(names)} GPU(s) are visible "
                f"(CUDA_VISIBLE_DEVICES={visible})"
            )
    return [names[index] for index in indices]


def _local_gpu(choice: ClusterChoice) -> Cluster:
    indices = physical_gpus(gpu_indices(choice.device))
    dashboard = choice.dashboard or None
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        LocalCUDACluster = None
    if LocalCUDACluster is not None:
        return LocalCUDACluster(
            # Each worker gets a rotation of this list (its own GPU first: cuda:0 in it).
            CUDA_VISIBLE_DEVICES=",".join(indices),
            threads_per_worker=1,
            resources={GPU_RESOURCE: 1},
            dashboard_address=dashboard,
        )
    return pinned_gpu_cluster(indices, dashboard_address=dashboard)


def pinned_gpu_cluster(
    indices: list[int] | list[str], *, dashboard_address: str | None = ":0"
) -> Cluster:
    """One nanny-managed worker process per GPU, pinned with ``CUDA_VISIBLE_DEVICES``.

    The variable is in each worker's environment from its start, so its CUDA runtime only ever
    sees its GPU (as ``cuda:0``). A worker that dies is restarted by its nanny on the same GPU.
    """
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"gpu-{index}": {
            "cls": Nanny,
            "options": {
                "nthreads": 1,
                "resources": {GPU_RESOURCE: 1},
                "env": {"CUDA_VISIBLE_DEVICES": str(index)},
            },
        }
        for index in indices
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": dashboard_address}}
    return SpecCluster(workers=workers, scheduler=scheduler, name="napari-gpuscope GPUs")


def slurm_cluster(choice: ClusterChoice) -> Cluster:
    """dask-jobqueue's SLURMCluster for ``choice`` (no job is submitted until work exists);
    :func:`~napari_gpuscope.batch.jobqueue.jobqueue_cluster` with ``cluster="slurm"``."""
    from dataclasses import replace

    from napari_gpuscope.batch.jobqueue import jobqueue_cluster

    return jobqueue_cluster(replace(choice, cluster="slurm"))


@contextlib.contextmanager
def open_client(choice: ClusterChoice) -> Iterator[Client]:
    """A :class:`distributed.Client` on the chosen cluster, closed (with the cluster) after.

    On an existing scheduler, a GPU run first checks its workers (:func:`check_gpu_workers`).

    Examples
    --------
    >>> with open_client(ClusterChoice(device="cpu", workers=1, dashboard="")) as client:
    ...     client.submit(sum, [1, 2]).result()
    3
    """
    from distributed import Client

    _spawn()
    from napari_gpuscope.batch.jobqueue import SCHEDULERS, jobqueue_cluster

    if choice.cluster != "local" and choice.cluster not in SCHEDULERS:
        with Client(choice.cluster) as client:
            if choice.uses_gpu:
                check_gpu_workers(client)
            yield client
        return
    if choice.cluster in SCHEDULERS:
        cluster = jobqueue_cluster(choice)
        # Jobs, each of gpus_per_job workers: adapt() counts workers.
        per_job = choice.gpus_per_job if choice.uses_gpu else 1
        cluster.adapt(minimum=0, maximum=(choice.workers or 8) * per_job)
    elif choice.uses_gpu:
        cluster = _local_gpu(choice)
    else:
        cluster = _local_cpu(choice)
    try:
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close(timeout=CLOSE_TIMEOUT)
    finally:
        close_cluster(cluster)


CLOSE_TIMEOUT = 60.0
"""Seconds the client, the workers and the cluster are each given to close."""


def close_cluster(cluster: Cluster, timeout: float = CLOSE_TIMEOUT) -> None:
    """Close a cluster after its client, its worker processes given ``timeout`` to exit.

    A cluster's own ``close()`` closes each nanny with distributed's default of 5 s, of which
    the worker process gets 4 to exit before the nanny kills it ("Worker process still alive
    after 4.0 seconds, killing"). A worker that has imported torch and freed a position's
    arrays can take that long to exit on a busy machine, and the kill is then reported after
    every successful run. Closing the nannies first with ``timeout`` lets them exit; a worker
    that is really stuck is still killed, after ``0.8 * timeout`` s.
    """
    import asyncio

    from distributed import Nanny

    nannies = [w for w in getattr(cluster, "workers", {}).values() if isinstance(w, Nanny)]

    async def close_nannies() -> None:
        await asyncio.gather(
            *(nanny.close(timeout=timeout) for nanny in nannies), return_exceptions=True
        )

    if nannies:
        with contextlib.suppress(Exception):  # the cluster's own close below still runs
            cluster.sync(close_nannies, callback_timeout=2 * timeout)
    cluster.close(timeout=2 * timeout)
