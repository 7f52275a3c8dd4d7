"""A live method as a session sees it: the control it is given (:class:`Control`) and the
method it drives in its worker thread (:class:`LiveMethod`); each method's own form is
:mod:`._per_frame` or :mod:`._live_esrrf`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..methods import JobSpec
from ._buffer import FrameBuffer

if TYPE_CHECKING:
    from ..compute._types import Device
    from ..compute.params import Params

__all__ = ["Control", "LiveMethod"]


class Control(Protocol):
    """What a live method may ask of its session (from the worker thread)."""

    name: str

    def stopping(self) -> bool:
        """Whether Stop & keep (or detach) was asked for."""

    def processed(self, count: int) -> None:
        """``count`` frames are processed."""

    def expected_frames(self) -> int | None:
        """The source's frame count, when known."""


class LiveMethod:
    """A method's job applied to the frames of a session."""

    def __init__(
        self, job: JobSpec, params: Params, device: Device, inputs: Mapping[str, Any]
    ) -> None:
        self.job = job
        self.params = params
        self.device = device
        self.inputs = dict(inputs)
        self.function: Callable[..., Any] = job.job_function()
        self._latest: np.ndarray | None = None
        self._latest_frames = 0
        """Frames (kept) that :attr:`_latest` covers: what a dock's latency is measured from."""
        self.unit = 1
        """Frames per unit of work: 1, or a z-stack's slices."""

    def run(self, buffer: FrameBuffer, control: Control) -> Any:
        """Process the buffer's frames until it is closed and empty (or a stop); return the
        result (None without a frame)."""
        raise NotImplementedError

    def partial_result(self) -> Any:
        """The result over the frames processed so far, while the session runs."""
        raise NotImplementedError

    def latest(self) -> np.ndarray | None:
        """The latest output (a processed frame, or the running reconstruction)."""
        return self._latest

    def latest_with_count(self) -> tuple[np.ndarray | None, int]:
        """:meth:`latest` and how many of the frames kept it covers (its last frame's index
        among them, plus one), read together."""
        latest = self.latest()
        return latest, self._latest_frames if latest is not None else 0

    def _show(self, image: np.ndarray, frames: int) -> None:
        # The count first: a reader that sees the new image never pairs it with an older count
        # (it may pair the older image with the new count, a latency one frame too short).
        self._latest_frames = frames
        self._latest = image


def _run_job(job: Any) -> Any:
    from ..compute.jobs import run_job

    return run_job(job)
