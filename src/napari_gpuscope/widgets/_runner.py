"""Run one job at a time in a worker thread and relay its updates to the GUI thread.

:class:`JobRunner` wraps napari's ``GeneratorWorker`` (superqt underneath):

- the job is only ever iterated in the worker thread; compute jobs enter their device there
  themselves (``device_context`` inside the generator: CUDA's current device is per thread);
- every start bumps a generation counter; updates of an older generation (a cancelled or
  superseded job whose last yield was already queued) are dropped;
- cancel is ``worker.quit()`` -- the job stops at its next yield and its generator is closed in
  the worker thread, so its ``finally`` blocks free device memory there;
- a new job never overlaps a cancelled one: it is started when the old worker has finished
  (closed its job), so it plans its memory with the old job's device memory already free;
  the old job stops at its next yield, a few solver iterations away;
- errors never reach the Qt event loop (``_ignore_errors=True``); they are relayed through
  :attr:`JobRunner.failed` for the dock to show in plain words;
- a ``napari.utils.progress`` bar (the activity dock) is created, updated and closed on the GUI
  thread; it keeps the job's title, adds the job's latest message, and is indeterminate while
  the job cannot say how far it is.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from napari.qt.threading import GeneratorWorker, create_worker
from qtpy.QtCore import QObject, QTimer, Signal

from napari_gpuscope.compute.job_control import PreviewThrottle
from napari_gpuscope.compute.jobs import STOP, Job, Progress

if TYPE_CHECKING:
    from napari.utils import progress

__all__ = ["JobRunner"]

_PROGRESS_STEPS = 1000


class _ClosingGeneratorWorker(GeneratorWorker):
    """A GeneratorWorker that closes its generator in the worker thread when it stops.

    superqt's loop just stops iterating on ``quit()``; the generator would otherwise be closed
    later by the garbage collector, in whatever thread drops the last reference.
    """

    def work(self) -> object:
        try:
            return super().work()
        finally:
            self._gen.close()


class _JobError(Exception):
    """Carries a job's exception out of the worker.

    superqt takes a ``RuntimeError`` raised by the generator for "the worker was deleted" and
    then emits neither ``errored`` nor ``finished`` -- but torch reports CUDA failures as
    RuntimeError, so every job exception is wrapped.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class _Control:
    """What the GUI asks of a running job, read by the worker thread.

    ``wanted(name)`` says whether an output is displayed (only those are materialised, and at
    most every ``throttle.interval`` seconds); ``stop`` asks the job to return its best result
    so far.
    """

    def __init__(self, wanted: Callable[[str], bool] | None) -> None:
        self.wanted = wanted or (lambda name: False)
        self.throttle = PreviewThrottle()
        self.stop = threading.Event()


def _for_display(update: Progress, control: _Control) -> Progress:
    """The update with the outputs the GUI displays, as host arrays.

    Lazy outputs are copied only when the throttle allows (a device-to-host copy per update
    would dominate a run); outputs the job already made on the host always pass.
    """
    wanted = {name: out for name, out in update.outputs.items() if control.wanted(name)}
    lazy = any(out.is_lazy for out in wanted.values())
    due = control.throttle.due() if lazy else False
    keep = {name: out.materialize() for name, out in wanted.items() if due or not out.is_lazy}
    return dataclasses.replace(update, outputs=keep)


def _drive(job: Job[object], control: _Control) -> Generator[Progress, None, tuple[object, float]]:
    """Run ``job`` in this (worker) thread; return (result, seconds).

    Lazy outputs are materialised here, in the worker thread, while the job is paused at its
    yield, and only for displayed outputs when the throttle allows; the GUI thread receives
    host arrays only.
    """
    start = time.perf_counter()
    command: object = None
    try:
        while True:
            try:
                update = job.send(command)
            except StopIteration as done:
                return done.value, time.perf_counter() - start
            if isinstance(update, Progress) and update.outputs:
                update = _for_display(update, control)
            yield update
            update = None  # a lazy output pins device memory the job's next step may need
            command = STOP if control.stop.is_set() else None
    except Exception as exc:
        raise _JobError(exc) from exc
    finally:
        job.close()


@dataclass
class _Run:
    """One started job: its worker once launched, its generation and how to describe it."""

    job: Job[object]
    generation: int
    description: str
    control: _Control
    worker: GeneratorWorker | None = None


class JobRunner(QObject):
    """Runs at most one job at a time; newer jobs supersede older ones.

    Signals (emitted on the GUI thread, only for the current generation)
    -------------------------------------------------------------------
    progressed(Progress)
        One update of the running job.
    succeeded(object, float)
        The job's result and its run time in seconds (measured in the worker).
    failed(object)
        The exception the job raised.
    stopped()
        The job ended in any way (after succeeded/failed, or after cancel).
    """

    progressed = Signal(object)
    succeeded = Signal(object, float)
    failed = Signal(object)
    stopped = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.generation = 0
        self._run: _Run | None = None
        self._closing: set[GeneratorWorker] = set()
        self._pbar: progress | None = None
        self._started_at: float | None = None
        self._latest: Progress | None = None
        self.tag: str | None = None
        self._pbar_timer = QTimer(self)
        self._pbar_timer.setInterval(200)
        self._pbar_timer.timeout.connect(self._sync_progress)

    # -- public API ----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether a current (not cancelled) job is running or waiting to start."""
        return self._run is not None

    @property
    def waiting(self) -> bool:
        """Whether the current job waits for a cancelled job to finish closing."""
        return self._run is not None and self._run.worker is None

    @property
    def started_at(self) -> float | None:
        """``time.perf_counter()`` at the start of the current job (None when idle)."""
        return self._started_at

    def start(
        self,
        job: Job[object],
        *,
        description: str,
        tag: str | None = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> int:
        """Start ``job``, superseding (cancelling) any running job.

        The job is launched at once, or -- when a cancelled job is still closing -- as soon
        as that job's worker has finished, so two jobs never hold device memory together.

        Parameters
        ----------
        job : generator
            A job generator (see :mod:`napari_gpuscope.compute.jobs`). It is only iterated in
            the worker thread, where it enters its own device.
        description : str
            Title of the job (the napari activity entry keeps it).
        tag : object, optional
            Free-form marker of what is running (the docks store ``"run"``/``"preview"``).
        wanted : callable, optional
            ``wanted(output_name)``: whether an output is displayed, so worth a host copy
            (evaluated in the worker thread; default: none).

        Returns
        -------
        int
            The generation number of the new job.
        """
        self.cancel()
        self.generation += 1
        self.tag = tag
        run = _Run(job, self.generation, description, _Control(wanted))
        self._run = run
        self._started_at = time.perf_counter()
        self._open_progress(description)
        if not self._closing:
            self._launch(run)
        return run.generation

    def request_stop(self) -> bool:
        """Ask the running job to return its best result so far (it finishes normally).

        Returns
        -------
        bool
            True if a job was running.
        """
        if self._run is None:
            return False
        self._run.control.stop.set()
        return True

    def cancel(self) -> bool:
        """Ask the running job to stop at its next yield and forget it.

        Returns
        -------
        bool
            True if a job was running.
        """
        run = self._run
        if run is None:
            return False
        self.generation += 1  # late updates of the cancelled job are now stale
        if run.worker is not None:
            self._closing.add(run.worker)
            run.worker.quit()
        else:
            run.job.close()  # never started: nothing of it ran
        self._run = None
        self._started_at = None
        self.tag = None
        self._close_progress()
        self.stopped.emit()
        return True

    # -- launching -----------------------------------------------------------------------
    def _launch(self, run: _Run) -> None:
        worker = create_worker(
            _drive,
            run.job,
            run.control,
            _worker_class=_ClosingGeneratorWorker,
            _ignore_errors=True,
        )
        g = run.generation
        worker.yielded.connect(lambda update: self._on_yielded(g, update))
        worker.returned.connect(lambda value: self._on_returned(g, value))
        worker.errored.connect(lambda exc: self._on_errored(g, exc))
        worker.finished.connect(lambda: self._on_finished(g, worker))
        run.worker = worker
        worker.start()

    # -- worker callbacks (GUI thread) ---------------------------------------------------
    def _is_current(self, generation: int) -> bool:
        return self._run is not None and generation == self.generation

    def _on_yielded(self, generation: int, update: object) -> None:
        if not self._is_current(generation) or not isinstance(update, Progress):
            return
        # The napari activity bar calls processEvents() whenever it changes, which would
        # deliver later updates re-entrantly (out of order); so it is synced from a timer.
        self._latest = update
        self.progressed.emit(update)

    def _on_returned(self, generation: int, value: tuple[object, float]) -> None:
        if not self._is_current(generation):
            return
        result, seconds = value
        self._finish()
        self.succeeded.emit(result, seconds)
        self.stopped.emit()

    def _on_errored(self, generation: int, exc: BaseException) -> None:
        if not self._is_current(generation):
            return
        self._finish()
        self.failed.emit(exc.original if isinstance(exc, _JobError) else exc)
        self.stopped.emit()

    def _on_finished(self, generation: int, worker: GeneratorWorker) -> None:
        self._closing.discard(worker)
        if self._is_current(generation) and self._run.worker is worker:
            # Ended without returned/errored (e.g. aborted from napari's task manager).
            self._finish()
            self.stopped.emit()
        run = self._run
        if run is not None and run.worker is None and not self._closing:
            self._launch(run)  # the superseded job has closed: its memory is free

    def _finish(self) -> None:
        self._run = None
        self._started_at = None
        self.tag = None
        self._close_progress()

    # -- napari activity progress (GUI thread only) -------------------------------------
    def _open_progress(self, description: str) -> None:
        """Arm the activity entry; it appears at the first sync (jobs shorter than the sync
        interval, e.g. most previews, do not flash one)."""
        self._close_progress()
        self._latest = None
        self._description = description
        self._pbar_timer.start()

    def _sync_progress(self) -> None:
        if self._run is None:
            return
        if self._pbar is None:
            from napari.utils import progress

            # Creating napari's bar processes Qt events: the job may end meanwhile.
            pbar = progress(total=_PROGRESS_STEPS, desc=self._description)
            if self._run is None or self._pbar is not None:
                pbar.close()
                return
            self._pbar = pbar
        pbar, update = self._pbar, self._latest
        if update is None:
            return
        self._latest = None
        title = self._description
        pbar.set_description(f"{title}: {update.message}" if update.message else title)
        if self._pbar is not pbar:
            return  # closed while napari processed events
        if update.fraction is None:
            if pbar.total != 0:
                pbar.total = 0  # napari shows a busy bar for total 0
            return
        if pbar.total != _PROGRESS_STEPS:
            pbar.total = _PROGRESS_STEPS
        target = round(update.fraction * _PROGRESS_STEPS)
        if self._pbar is pbar and target > pbar.n:
            pbar.update(target - pbar.n)

    def _close_progress(self) -> None:
        self._pbar_timer.stop()
        pbar, self._pbar = self._pbar, None
        if pbar is not None:
            pbar.close()
