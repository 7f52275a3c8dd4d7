"""Batch runs on a cluster's scheduler: SLURM, PBS or LSF through dask-jobqueue (the ``hpc``
extra).

One idea: turn the run command's cluster options (:class:`~.cluster.ClusterChoice`) into a
dask-jobqueue cluster whose job script asks the scheduler for the queue, account, wall time,
GPUs and host memory given, and starts one Dask worker per GPU of the job.

- One worker process per GPU, one thread each, advertising ``GPU=1``. A job with several GPUs
  (``--gpus-per-job``) starts that many worker processes; each takes its own entry of the
  ``CUDA_VISIBLE_DEVICES`` the scheduler gave the job (:mod:`.gpu_pin`, a worker preload that
  runs before anything touches CUDA).
- Workers retire and are replaced before the wall time kills them (:func:`job_lifetime`), and
  the cluster ``adapt()``s between none and ``--workers`` jobs.

Whatever the scheduler does to a job, the store's completion markers decide what is done: a
position is marked done only after its group is written and checksummed, so a job killed
mid-position leaves it to be computed again (by Dask on another worker, or by ``--resume``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dask_jobqueue.core import JobQueueCluster


class ClusterChoice(Protocol):
    """The run command's cluster options this module reads
    (:class:`~napari_gpuscope.batch.cluster.ClusterChoice`, which imports this module: a
    protocol here keeps the two apart)."""

    cluster: str
    walltime: str
    queue: str | None
    account: str | None
    memory: str
    gpus_per_job: int

    @property
    def uses_gpu(self) -> bool: ...


__all__ = ["SCHEDULERS", "job_lifetime", "job_script", "jobqueue_cluster"]

SCHEDULERS = ("slurm", "pbs", "lsf")
"""The ``--cluster`` names that submit jobs to a scheduler."""

GPU_RESOURCE = "GPU"  # as :data:`.cluster.GPU_RESOURCE` (not imported: no import circle)


def job_lifetime(walltime: str) -> tuple[str, str]:
    """Worker ``--lifetime`` and ``--lifetime-stagger`` below a job's wall time.

    A worker retires 10 % (at least 2 minutes) before the wall time, staggered by up to 5 %
    so that the workers of jobs started together do not all retire at once.

    Examples
    --------
    >>> job_lifetime("01:00:00")
    ('54m', '3m')
    """
    hours, minutes, seconds = (int(p) for p in walltime.split(":"))
    total = hours * 3600 + minutes * 60 + seconds
    margin = max(120, total // 10)
    lifetime = max(60, total - margin)
    stagger = max(30, total // 20)
    return f"{lifetime // 60}m", f"{stagger // 60}m" if stagger >= 60 else f"{stagger}s"


def _gpu_directives(scheduler: str, gpus: int, cores: int, memory: str) -> dict[str, object]:
    """The scheduler-specific keyword arguments that ask for ``gpus`` GPUs per job."""
    if scheduler == "slurm":
        return {"job_extra_directives": [f"--gres=gpu:{gpus}"] if gpus else []}
    if scheduler == "pbs":
        from dask.utils import parse_bytes
        from dask_jobqueue.pbs import pbs_format_bytes_ceil

        # One chunk with the job's cores, memory and GPUs (PBS Pro's select syntax).
        spec = f"select=1:ncpus={cores}:mem={pbs_format_bytes_ceil(parse_bytes(memory))}"
        return {"resource_spec": spec + (f":ngpus={gpus}" if gpus else "")}
    # LSF: -gpu "num=N"; memory in MB without asking lsf.conf for its unit.
    return {
        "job_extra_directives": [f'-gpu "num={gpus}"'] if gpus else [],
        "lsf_units": "mb",
    }


def _cluster_class(scheduler: str) -> type[JobQueueCluster]:
    try:
        import dask_jobqueue
    except ImportError:
        raise RuntimeError(
            f"--cluster {scheduler} needs dask-jobqueue: pip install 'napari-gpuscope[hpc]'"
        ) from None
    return {
        "slurm": dask_jobqueue.SLURMCluster,
        "pbs": dask_jobqueue.PBSCluster,
        "lsf": dask_jobqueue.LSFCluster,
    }[scheduler]


def jobqueue_cluster(choice: ClusterChoice) -> JobQueueCluster:
    """dask-jobqueue's cluster for ``choice`` (no job is submitted until work exists).

    Each job runs ``choice.gpus_per_job`` worker processes (one on the CPU), one thread each;
    GPU workers advertise ``GPU=1`` and are pinned to one of the job's GPUs.

    Parameters
    ----------
    choice : ClusterChoice
        ``cluster`` is one of :data:`SCHEDULERS`.

    Raises
    ------
    ValueError
        ``choice.cluster`` is not a scheduler dask-jobqueue is asked for here.
    RuntimeError
        dask-jobqueue is not installed.

    Examples
    --------
    >>> from napari_gpuscope.batch.cluster import ClusterChoice
    >>> choice = ClusterChoice(cluster="pbs", device="cuda", gpus_per_job=2, queue="gpu")
    >>> with jobqueue_cluster(choice) as cluster:
    ...     "ngpus=2" in cluster.job_script()
    True
    """
    if choice.cluster not in SCHEDULERS:
        raise ValueError(f"--cluster {choice.cluster!r}: expected one of {', '.join(SCHEDULERS)}")
    cls = _cluster_class(choice.cluster)
    workers = choice.gpus_per_job if choice.uses_gpu else 1
    lifetime, stagger = job_lifetime(choice.walltime)
    extra_args = [
        *(["--resources", f"{GPU_RESOURCE}=1"] if choice.uses_gpu else []),
        # Several GPUs in a job: each worker process takes its own (before CUDA starts).
        *(["--preload", "napari_gpuscope.batch.gpu_pin"] if workers > 1 else []),
        "--lifetime",
        lifetime,
        "--lifetime-stagger",
        stagger,
        "--lifetime-restart",
    ]
    # LSF calls the account a project (bsub -P).
    account = {"project" if choice.cluster == "lsf" else "account": choice.account}
    return cls(
        cores=workers,
        processes=workers,
        memory=choice.memory,
        walltime=_walltime(choice.cluster, choice.walltime),
        queue=choice.queue,
        worker_extra_args=extra_args,
        **account,
        **_gpu_directives(
            choice.cluster, choice.gpus_per_job if choice.uses_gpu else 0, workers, choice.memory
        ),
    )


def _walltime(scheduler: str, walltime: str) -> str:
    """LSF's ``-W`` takes ``[HH:]MM``; SLURM and PBS take ``HH:MM:SS``."""
    if scheduler != "lsf":
        return walltime
    hours, minutes, seconds = (int(p) for p in walltime.split(":"))
    minutes += hours * 60 + (1 if seconds else 0)  # never shorter than asked
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def job_script(choice: ClusterChoice) -> str:
    """The job script ``choice`` would submit (``run --dry-run`` prints it).

    Examples
    --------
    >>> from napari_gpuscope.batch.cluster import ClusterChoice
    >>> script = job_script(ClusterChoice(cluster="slurm", device="cuda", queue="gpu"))
    >>> "#SBATCH --gres=gpu:1" in script and "#SBATCH -p gpu" in script
    True
    """
    with jobqueue_cluster(choice) as cluster:
        return cluster.job_script()
