"""A fake SLURM, PBS and LSF for the tests: their submit, status and cancel commands on ``PATH``
run each submitted job script locally, in the background, as the real scheduler would on a node.

``install(folder)`` writes ``sbatch``/``squeue``/``scancel``, ``qsub``/``qstat``/``qdel`` and
``bsub``/``bjobs``/``bkill`` into ``folder/bin`` (each a small Python script calling this
module) and returns a :class:`FakeScheduler` that reads the jobs' state from ``folder/jobs``:
per job its script, its log, its process id, and the time it was submitted and started.

A job's script runs under ``bash`` in its own session (so cancelling it ends every process it
started), with ``CUDA_VISIBLE_DEVICES`` set to as many fake GPU numbers as it asked for
(``--gres=gpu:N``, ``ngpus=N``, ``-gpu "num=N"``), job ``k`` getting GPUs ``k*N`` onward, as a
scheduler hands each job its own devices.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

COMMANDS = {
    "sbatch": "submit",
    "qsub": "submit",
    "bsub": "submit",
    "squeue": "status",
    "qstat": "status",
    "bjobs": "status",
    "scancel": "cancel",
    "qdel": "cancel",
    "bkill": "cancel",
}

_GPU_ASKS = (r"--gres=gpu:(\d+)", r"ngpus=(\d+)", r'-gpu "num=(\d+)"')


def _new_job_id(jobs: Path) -> int:
    for number in range(1, 100_000):
        try:
            os.mkdir(jobs / str(number))  # atomic: two submissions never share a number
        except FileExistsError:
            continue
        return number
    raise RuntimeError("too many fake jobs")


def submit(tool: str, argv: list[str], jobs: Path) -> int:
    """Start the job script (the last argument, or stdin for ``bsub < script``)."""
    script = Path(argv[-1]).read_text() if argv else sys.stdin.read()
    number = _new_job_id(jobs)
    folder = jobs / str(number)
    (folder / "script.sh").write_text(script)
    (folder / "submitted").write_text(repr(time.time()))
    env = dict(os.environ)
    for pattern in _GPU_ASKS:
        match = re.search(pattern, script)
        if match:
            count = int(match.group(1))
            first = (number - 1) * count
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(count))
    env["FAKE_JOB_ID"] = str(number)
    with open(folder / "log.txt", "wb") as log:
        process = subprocess.Popen(
            ["bash", str(folder / "script.sh")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=folder,
        )
    (folder / "pid").write_text(str(process.pid))
    (folder / "started").write_text(repr(time.time()))
    print(
        {
            "sbatch": f"Submitted batch job {number}",
            "qsub": f"{number}.fakepbs",
            "bsub": f"Job <{number}> is submitted to queue <normal>.",
        }[tool]
    )
    return 0


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cancel(argv: list[str], jobs: Path, sig: int = signal.SIGTERM) -> int:
    """End every process of the named jobs (their whole session)."""
    for job in argv:
        pid_file = jobs / re.sub(r"\D.*", "", job) / "pid"
        if pid_file.is_file():
            pid = int(pid_file.read_text())
            if _alive(pid):
                os.killpg(pid, sig)
    return 0


def status(jobs: Path) -> int:
    """One line per running job: its id and ``R``."""
    for folder in sorted(jobs.iterdir(), key=lambda p: int(p.name)):
        pid_file = folder / "pid"
        if pid_file.is_file() and _alive(int(pid_file.read_text())):
            print(f"{folder.name} R")
    return 0


def main() -> int:
    tool = Path(sys.argv[1]).name
    jobs = Path(os.environ["FAKE_SCHEDULER_JOBS"])
    argv = [a for a in sys.argv[2:] if not a.startswith("-")]
    what = COMMANDS[tool]
    if what == "submit":
        return submit(tool, argv, jobs)
    if what == "cancel":
        return cancel(argv, jobs)
    return status(jobs)


@dataclass
class FakeScheduler:
    """The fake scheduler's jobs (see the module docstring)."""

    jobs: Path

    def job_ids(self) -> list[int]:
        return sorted(int(p.name) for p in self.jobs.iterdir())

    def pid(self, job: int) -> int | None:
        path = self.jobs / str(job) / "pid"
        return int(path.read_text()) if path.is_file() else None

    def running(self) -> list[int]:
        return [job for job in self.job_ids() if (p := self.pid(job)) and _alive(p)]

    def kill(self, job: int) -> None:
        """SIGKILL the job's every process: a node lost, a job killed by the scheduler."""
        cancel([str(job)], self.jobs, signal.SIGKILL)

    def script(self, job: int) -> str:
        return (self.jobs / str(job) / "script.sh").read_text()

    def log(self, job: int) -> str:
        path = self.jobs / str(job) / "log.txt"
        return path.read_text(errors="replace") if path.is_file() else ""

    def cancel_all(self) -> None:
        for job in self.running():
            self.kill(job)


def install(folder: Path, monkeypatch: object) -> FakeScheduler:
    """Put the fake commands first on ``PATH`` (through pytest's ``monkeypatch``)."""
    bin_dir, jobs = folder / "bin", folder / "jobs"
    bin_dir.mkdir(parents=True)
    jobs.mkdir()
    for tool in COMMANDS:
        path = bin_dir / tool
        path.write_text(
            f"#!{sys.executable}\n"
            "import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import fake_scheduler\n"
            "sys.argv.insert(1, sys.argv[0])\n"
            "raise SystemExit(fake_scheduler.main())\n"
        )
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SCHEDULER_JOBS", str(jobs))
    return FakeScheduler(jobs)


if __name__ == "__main__":
    raise SystemExit(main())
