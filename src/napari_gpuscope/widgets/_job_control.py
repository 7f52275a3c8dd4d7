"""A dock's job controls: Run, Stop & keep, Cancel, and the method's other jobs, all on the
dock's one runner (the Qt-free :class:`~napari_gpuscope.dock.model.DockModel` says what may
start), with the buttons, clock and status line following."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from qtpy.QtCore import QObject

from napari_gpuscope.dock.jobs import RUN, DockJob, JobHandlers, JobRefused

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.jobs import Job
    from napari_gpuscope.compute.params import Params
    from napari_gpuscope.dock.context import MethodView
    from napari_gpuscope.dock.model import DockModel
    from napari_gpuscope.widgets._dock_parts import DockPanel
    from napari_gpuscope.widgets._job_view import JobView
    from napari_gpuscope.widgets._preview_schedule import PreviewScheduler
    from napari_gpuscope.widgets._runner import JobRunner
    from napari_gpuscope.widgets._status_view import StatusView

__all__ = ["JobControl"]


class JobControl(QObject):
    """What :meth:`~napari_gpuscope.widgets._base.MethodDock.run`, ``stop``, ``cancel`` and
    ``start_job`` do.

    Parameters
    ----------
    parent : QObject
        The dock (owner).
    model : DockModel
        The dock's model: what runs, what may start.
    runner : JobRunner
        The dock's one runner (the panel's clock follows it).
    panel : DockPanel
        The Stop button and the clock.
    status : StatusView
        The status line and the buttons.
    jobs : JobView
        Starts the run and previews, and reacts to every job.
    preview : PreviewScheduler
        The live preview's debounce (a run or another job stops it).
    dock : MethodView
        The method's side of the dock (its device).
    """

    def __init__(
        self,
        parent: QObject,
        model: DockModel,
        *,
        runner: JobRunner,
        panel: DockPanel,
        status: StatusView,
        jobs: JobView,
        preview: PreviewScheduler,
        dock: MethodView,
    ) -> None:
        super().__init__(parent)
        self.model, self.runner, self.panel = model, runner, panel
        self.status, self.jobs, self.preview, self.dock = status, jobs, preview, dock

    def stop_preview(self) -> None:
        """Forget a pending live preview and cancel a running one."""
        self.preview.stop()
        self.jobs.stop_preview()

    def run(self) -> bool:
        """Start a full run; False (the reason in the status line) when refused."""
        reason = self.model.refusal(RUN)
        if self.dock.device is None:
            # Said once, in the dock (the device row explains): no notification on top.
            reason = self.status.input_problem()
        if reason is not None:
            self.status.set_status(reason)
            return False
        self.preview.stop()
        return self.jobs.start(RUN)

    def stop(self) -> bool:
        """Stop & keep (or cancel what cannot stop early); returns whether a job was running."""
        kind = self.model.kind
        if kind is None:
            return False
        if (kind == RUN and not self.model.spec.supports_stop) or not self.model.holds_device():
            self.cancel()
            return True
        if self.model.request_stop():
            self.status.set_status(
                "Stopping after the current step; the result so far will be kept."
            )
            self.panel.stop_button.setEnabled(False)
        return True

    def cancel(self) -> None:
        """Cancel the running job; its partial outputs are rolled back."""
        self.preview.stop()
        job = self.model.cancel()
        if job is not None:
            if job.outputs is not None:
                job.outputs.rollback()
            self.status.set_status("Cancelled; nothing was changed.")
            self.panel.stop_clock()
            if job.handlers is not None:
                job.handlers.ended()
        self.status.update_buttons()

    def start_job(
        self,
        kind: str,
        job: Job[object],
        *,
        title: str,
        description: str,
        handlers: JobHandlers,
        layer: napari.layers.Layer | None = None,
        params: Params | None = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> None:
        """Run another job of the method on the runner; raises JobRefused (the status line
        says why) while another job holds the device, or without a device."""
        device = self.dock.device
        reason = "no usable CUDA GPU (see the device row)" if device is None else None
        reason = reason or self.model.refusal(kind)
        if reason is not None:
            job.close()
            self.status.set_status(reason)
            raise JobRefused(reason)
        self.stop_preview()
        name = getattr(layer, "name", "")
        record = DockJob(kind, layer, params, device or "", name, title, handlers=handlers)
        self.model.launch(record, job, description=description, wanted=wanted)
        self.panel.start_clock(self.runner)
        self.status.update_buttons()
