"""Every fused op of every method: the registry, the warm-up job and the provenance report.

Ops are found without a list to maintain: :func:`registered_ops` imports the compute modules
that define ops at module level (read from the sources) and collects their
:class:`~._dispatch.FusedOp` values, plus ops built with ``register=True``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import torch

from ..jobs import Job, Progress
from ._dispatch import _LIVE, _REGISTERED, FusedOp
from ._source import op_modules

__all__ = ["ops_under", "path_report", "registered_ops", "warm_up"]


def registered_ops() -> tuple[FusedOp, ...]:
    """Every fused operation of every method, by name, whichever modules were imported so far.

    Imports the compute modules that define ops at module level
    (:func:`~napari_gpuscope.compute.kernels.op_modules`, found by reading the sources;
    importing them touches neither CUDA nor CuPy) and returns their ops, plus any op built with
    ``register=True``. Ops built elsewhere (tests' throw-away ops) are not included, so a
    deliberately broken one never reaches a warm-up or the GPU kit's checks.

    Examples
    --------
    >>> names = [op.name for op in registered_ops()]
    >>> "axpby" in names and "fgp_step" in names
    True
    """
    ops = {id(op): op for op in _REGISTERED}
    for name in op_modules():
        module = importlib.import_module(name)
        ops.update((id(v), v) for v in vars(module).values() if isinstance(v, FusedOp))
    return tuple(sorted(ops.values(), key=lambda op: op.name))


def warm_up(
    device: str | torch.device, packages: Sequence[str] | None = None
) -> Job[dict[str, bool]]:
    """Compile and self-test the registered kernels on ``device``, as a job.

    A dock runs it when a device is selected, so the first preview does not pay the NVRTC
    compile (0.3-1.5 s per ``.cu`` file, one compile covering its variants; an H100 took 7.3 s
    for all five files with an empty CuPy cache, 2.5 s with it). The job's result maps each op
    name to whether its fused kernel will run.

    Parameters
    ----------
    device : str or torch.device
        Where to prepare the kernels.
    packages : sequence of str, optional
        Only the ops defined under these module prefixes (a dock passes its method's compute
        package and the platform's ``napari_gpuscope.compute.kernels``); default: every op.

    Examples
    --------
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> isinstance(run_job(warm_up("cpu")), dict)
    True
    """
    ops = ops_under(packages)
    ready: dict[str, bool] = {}
    for index, op in enumerate(ops):
        yield Progress(index / max(1, len(ops)), f"preparing GPU kernel {op.name}")
        ready[op.name] = op.prepare(torch.device(device))
    return ready


def ops_under(packages: Sequence[str] | None = None) -> tuple[FusedOp, ...]:
    """The registered ops whose launcher's module starts with one of ``packages`` (all: None).

    Examples
    --------
    >>> [op.name for op in ops_under(["napari_gpuscope.compute.kernels"])]
    ['axpby']
    """
    ops = registered_ops()
    if packages is None:
        return ops
    prefixes = tuple(packages)
    return tuple(op for op in ops if op.module.startswith(prefixes))




def path_report(device: str | torch.device | None = None) -> dict[str, dict[str, str]]:
    """Which implementation each fused op used, and why, for provenance.

    Parameters
    ----------
    device : str or torch.device, optional
        Only this device (e.g. the device a job ran on); default: every device an op was used
        on.

    Returns
    -------
    dict
        ``{op name: {device: "fused kernel (verified against the twin)" | "torch twin
        (<reason>)" | ...}}`` for the ops used so far (per :attr:`FusedOp.last_paths`).

    Examples
    --------
    >>> isinstance(path_report("cpu"), dict)
    True
    """
    wanted = None if device is None else str(torch.device(device))
    report: dict[str, dict[str, str]] = {}
    for op in sorted(_LIVE, key=lambda op: op.name):
        paths = {
            where: path.describe()
            for where, path in sorted(op.last_paths.items())
            if wanted is None or where == wanted
        }
        if paths:
            report[op.name] = paths
    return report
