"""The records of a dock's jobs: their kinds, what the dock remembers of the running one,
how a side job's owner hears of it, and what a runner must offer. Qt-free.

Every job of a dock -- the full run, the live preview, the kernel warm-up and the method's
other jobs (eSRRF's sweep, flat-field's apply and autotune) -- goes through the dock's one
runner, held by its :class:`~napari_gpuscope.dock.model.DockModel`, so one job at a time holds
the device:

- a *preview* or a *warm-up* gives way: a newer preview supersedes a running one, any other job
  cancels it first, and a job asked for while the kernels are being prepared is queued (a run or
  a preview) or refused;
- a *run* or a *side job* (any other kind) is never disturbed: a second request is refused with
  a sentence that says what is running; previews wait for it.

Examples
--------
>>> DockJob(RUN, name="blobs").is_side_job, DockJob("sweep").is_side_job
(False, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.jobs import Job, Progress
    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.compute.preview import PlaneView
    from napari_gpuscope.dock.outputs import OutputLayers

__all__ = [
    "PREVIEW",
    "RUN",
    "WARMUP",
    "DockJob",
    "JobHandlers",
    "JobRefused",
    "Runner",
    "unprepared_kernels",
]

RUN, PREVIEW, WARMUP = "run", "preview", "warmup"
"""The kinds of job the dock itself makes; any other kind is a side job (``"sweep"``...)."""
_YIELDING = (PREVIEW, WARMUP)


class JobRefused(ValueError):
    """A job was not started: another one holds the device (the message says which)."""


def unprepared_kernels(device: str, packages: tuple[str, ...] | None = None) -> list[str]:
    """The registered fused ops (under ``packages``, see
    :func:`~napari_gpuscope.compute.kernels.ops_under`) whose path on ``device`` is not decided
    yet.

    The kernels module keeps, per op and device, the outcome of its compile and self-test
    (:func:`~napari_gpuscope.compute.kernels.path_report`), so a method imported later, with
    kernels of its own, is prepared too.
    """
    from napari_gpuscope.compute import kernels

    decided = kernels.path_report(device)
    return [op.name for op in kernels.ops_under(packages) if op.name not in decided]


class Runner(Protocol):
    """What the controller needs of a runner (:class:`~napari_gpuscope.widgets.JobRunner`)."""

    @property
    def running(self) -> bool: ...

    @property
    def tag(self) -> str | None: ...

    def start(
        self,
        job: Job[object],
        *,
        description: str,
        tag: str | None = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> int | None: ...

    def cancel(self) -> bool: ...

    def request_stop(self) -> bool: ...


def _nothing(*_: object) -> None:
    return None


@dataclass
class JobHandlers:
    """How a side job's owner (a panel of the dock) hears of its job, on the GUI thread.

    ``ended()`` follows ``succeeded``/``failed`` and a cancel: the job is gone.
    """

    succeeded: Callable[[object, float], None] = _nothing
    failed: Callable[[BaseException], None] = _nothing
    progressed: Callable[[Progress], None] = _nothing
    ended: Callable[[], None] = _nothing


@dataclass
class DockJob:
    """What the dock remembers about the running job.

    Attributes
    ----------
    kind : str
        :data:`RUN`, :data:`PREVIEW`, :data:`WARMUP` or a side job's kind (e.g. ``"sweep"``).
    layer : napari.layers.Layer or None
        The input (None only for a warm-up).
    params : Params or None
        The parameters it runs with.
    device : str
        Where it runs.
    name : str
        The input's name at the start (messages).
    title : str
        What the job is called in messages (a side job's own title, e.g. ``"the sweep"``).
    outputs : OutputLayers or None
        The layers a run or preview streams into.
    view : PlaneView or None
        A preview's displayed plane.
    handlers : JobHandlers or None
        A side job's owner; None for the dock's own jobs.
    """

    kind: str
    layer: napari.layers.Layer | None = None
    params: Params | None = None
    device: str = ""
    name: str = ""
    title: str = ""
    outputs: OutputLayers | None = None
    view: PlaneView | None = None
    handlers: JobHandlers | None = field(default=None, repr=False)

    @property
    def is_side_job(self) -> bool:
        """Whether the job is one of the method's other jobs (not run, preview, warm-up)."""
        return self.kind not in (RUN, *_YIELDING)
