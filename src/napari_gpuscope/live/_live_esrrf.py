"""The live eSRRF: the registry's job reading the frames as they arrive, through a stack whose
reads wait for them, into its online temporal statistics (see :mod:`._methods`); every K frames
the running reconstruction is measured into the session's quality track (:mod:`._quality`),
and the drift is tracked as blocks of frames complete (:mod:`._live_drift`)."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import numpy as np

from ._buffer import FrameBuffer
from ._live_drift import LiveDriftTrack
from ._live_method import Control, LiveMethod
from ._pacing import StepPacer
from ._quality import (
    DEFAULT_MEASURE_EVERY,
    QualityPoint,
    QualityTrack,
    load_measurement,
    measure_quality,
)
from ._split_half import SplitHalves

__all__ = ["DEFAULT_DRIFT_BLOCK", "LiveEsrrf"]

DEFAULT_DRIFT_BLOCK = 50
"""Frames per block of the live drift track when the parameters choose it automatically (the
automatic length needs the whole stack): the offline estimate's fixed default."""

HOST_BATCH = 8
"""Frames whose host work for the drift track and the quality's widefield sum is done together
(and at every drift block's end and measurement): once per frame, their conversions, uploads
and device syncs came between two frames' kernels. The sums are the same, added in the same
order; at most this many frames, plus a chunk, wait on the host."""


class _GrowingStack:
    """A ``(length, Y, X)`` stack whose reads wait for the frames to arrive.

    What the eSRRF job reads: ``stack[a:b]`` returns the buffer's frames ``a:b``, which have
    arrived (:meth:`frames_ready` bounds the chunks; the job reads nothing ahead of a growing
    stack). Frames before ``a`` are released: the job reads forward only, so the buffer holds
    the frames not yet read and the last chunk (for an out-of-memory retry, which re-reads it).
    """

    def __init__(self, buffer: FrameBuffer, length: int) -> None:
        assert buffer.frame_shape is not None and buffer.dtype is not None
        self.buffer = buffer
        self.shape = (length, *buffer.frame_shape)
        self.dtype = buffer.dtype
        self.ndim = len(self.shape)
        # The widefield mean the quality track compares with: the frames read are summed
        # once each (a retry reads a chunk again), up to the frames processed
        # (:meth:`widefield`).
        self.summing = False
        self._lock = threading.Lock()
        self._unsummed: dict[int, np.ndarray] = {}
        self._read_until = 0
        self._sum: np.ndarray | None = None
        self._sum_range = (0, 0)
        # The frame count after ``start`` frames at which the session must see an update, and
        # the most frames a chunk may take (the worker's pace); None: no bound.
        self.next_update: Any = None
        self.most: Any = None
        # The frames read, in order, for the drift track (taken by the worker once processed).
        self.tracking = False
        self._untracked: dict[int, np.ndarray] = {}
        self._tracked_until = 0

    def __len__(self) -> int:
        return self.shape[0]

    def frames_ready(self, start: int) -> int:
        """Frames from ``start`` the job may take in one chunk without waiting (at least 1):
        those kept so far, at most :attr:`most` (a chunk of about half a second, so that a stop
        acts soon: :class:`~._pacing.StepPacer`), up to the first frame count at which the
        session must see an update (:attr:`next_update`: a measurement, a drift block's end).
        The job reads the frames waiting in larger chunks (fewer steps when it falls behind,
        the same sums: eSRRF's are the same whatever the chunks), and every update the session
        acts on still comes."""
        end = max(start + 1, self.buffer.kept)
        most = None if self.most is None else self.most()
        if most is not None:
            end = min(end, start + max(1, most))
        update = None if self.next_update is None else self.next_update(start)
        if update is not None:
            end = min(end, max(start + 1, update))
        return end - start

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, int):
            return self[key : key + 1][0]
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"a live stack is read in frame ranges, not {key!r}")
        start, stop, _ = key.indices(self.shape[0])
        frames = self.buffer.take(start, stop)
        self.buffer.release(start)
        with self._lock:
            first = max(start, self._read_until)
            for index in range(first, stop):
                if self.summing:
                    self._unsummed[index] = frames[index - start]
                if self.tracking:
                    self._untracked[index] = frames[index - start]
            self._read_until = max(self._read_until, stop)
        return frames

    def take_tracked(self, until: int) -> np.ndarray:
        """The frames read and not yet taken, before ``until`` (the frames processed), in
        order, as ``(n, Y, X)``: each frame once."""
        with self._lock:
            indices = range(self._tracked_until, until)
            frames = [self._untracked.pop(i) for i in indices if i in self._untracked]
            self._tracked_until = max(self._tracked_until, until)
        return np.stack(frames) if frames else np.empty((0, *self.shape[1:]), self.dtype)

    def fold(self, first: int, until: int) -> int:
        """Add frames ``first:until`` (a time point's frames processed so far) to the sum,
        each once; return how many it holds. Called by the worker at every step, so that at
        most a chunk waits unsummed."""
        with self._lock:
            if self._sum is None or self._sum_range[0] != first:
                self._sum = np.zeros(self.shape[1:], np.float64)
                self._sum_range = (first, first)
            end = self._sum_range[1]
            for index in sorted(i for i in self._unsummed if i < until):
                frame = self._unsummed.pop(index)
                if first <= index and index >= end:
                    self._sum += frame
                    end = index + 1
            self._sum_range = (first, end)
            return end - first

    def widefield(self) -> np.ndarray:
        """The mean of the frames :meth:`fold` summed."""
        with self._lock:
            assert self._sum is not None
            first, end = self._sum_range
            return self._sum / max(end - first, 1)


class LiveEsrrf(LiveMethod):
    """eSRRF: the registry's job over the frames as they arrive (see the module docstring)."""

    OUTPUT_LIMIT = 1 << 30
    """Bytes of time points the job may hold (a rolling session over a long acquisition)."""

    def __init__(self, *args: Any, max_frames: int = 10_000) -> None:
        super().__init__(*args)
        if self.params.drift_correction:
            raise ValueError(
                "EsrrfParams.drift_correction: a live eSRRF cannot estimate the drift over "
                "frames that do not exist yet; set drift_correction=False"
            )
        if self.params.frame_gap:
            raise ValueError(
                "EsrrfParams.frame_gap: a live eSRRF makes consecutive time points "
                "(frames_per_timepoint=N, a new one every N frames); overlapping ones "
                "(frame_gap > 0) are not supported live"
            )
        if self.params.measure_resolution:
            # Found by the dock (whose default measures it): the job's FRC reads every frame
            # again after the run, and a live session holds only the frames not yet processed.
            raise ValueError(
                "EsrrfParams.measure_resolution: the resolution is measured on the even and "
                "odd frames after the run, which reads every frame again; a live eSRRF keeps "
                "only the frames not yet processed: set measure_resolution=False"
            )
        self.max_frames = max_frames
        self._want_latest = False
        self.frames_analysed = 0
        self._started = 0.0
        linear = self.params.temporal == "AVG"
        self.quality = QualityTrack(
            DEFAULT_MEASURE_EVERY, self.params.magnification, split_half=linear
        )
        """The running reconstruction measured every ``quality.every`` frames (0: never)."""
        # Two disjoint halves of the measured reconstruction's frames, for its noise part: an
        # AVG's blocks of frames are differences of its running means; VAR's and TAC2's not.
        self._halves = SplitHalves(border=3 * self.params.magnification) if linear else None
        self._halves_timepoint = 0
        block = self.params.drift_time_averaging or DEFAULT_DRIFT_BLOCK
        self.drift: LiveDriftTrack | None = LiveDriftTrack(
            max(2, block), self.params.max_drift, self.device
        )
        """The drift so far: blocks of the dock's "frames per drift block" (50 when it is
        automatic) correlated with the first as they complete."""
        self.drift_error: str | None = None
        """Why the drift track stopped (it never stops the reconstruction)."""

    def latest(self) -> np.ndarray | None:
        self._want_latest = True  # the worker makes a fresh copy at the next frame
        return self._latest

    def partial_result(self) -> Any:
        raise RuntimeError(
            "a live eSRRF's result is made when the session ends (the acquisition finishes, "
            "finish(), stop() or detach()); latest() is the running reconstruction"
        )

    def run(self, buffer: FrameBuffer, control: Control) -> Any:
        from ..compute import esrrf
        from ..compute.jobs import STOP

        if not buffer.wait_for(1):
            return None
        length = control.expected_frames() or self.max_frames
        self._check_output_size(length, buffer)
        stack = _GrowingStack(buffer, length)
        stack.summing = self.quality.every > 0
        stack.tracking = self.drift is not None
        stack.next_update = self._next_update
        pacer = StepPacer()
        stack.most = pacer.most
        if stack.summing:
            load_measurement()
        self._started = time.perf_counter()
        # The job's own chunk size (a GPU's larger), cut by what has arrived (frames_ready).
        job = self.function(stack, params=self.params, name=control.name, device=self.device)
        threads_before = set(threading.enumerate())
        hosted = 0  # frames whose host work is done (HOST_BATCH)
        drift_block = self.drift.block if self.drift is not None else 1
        stopped_by_user = False
        command: Any = None
        analysed = 0
        try:
            while True:
                pacer.start()
                try:
                    update = job.send(command)
                except StopIteration as end:
                    result = end.value
                    break
                command = None
                if update.step is None:
                    continue  # the measurement of the result's resolution, after the frames
                done = int(update.step)
                pacer.done(done - analysed)
                analysed = self.frames_analysed = done
                if self._want_latest and esrrf.OUTPUT in update.outputs:
                    self._show(np.asarray(update.outputs[esrrf.OUTPUT].data())[0], done)
                    self._want_latest = False
                control.processed(done)
                batch = done - hosted >= HOST_BATCH
                hosted = done if batch else hosted
                if stack.tracking and (batch or done % drift_block == 0):
                    self._track_drift(stack, done)  # a block completes at the same frame
                if stack.summing and esrrf.OUTPUT in update.outputs:
                    self._measure(stack, update.outputs[esrrf.OUTPUT], done, batch)
                if control.stopping():
                    command, stopped_by_user = STOP, True
                elif done < length and not buffer.wait_for(done + 1):
                    # No frame `done` will come: the acquisition is over, or a stop closed the
                    # buffer while the job waited for it.
                    command, stopped_by_user = STOP, control.stopping()
        finally:
            job.close()
            buffer.close()
            # The job reads nothing ahead of a growing stack (no reader thread starts); were one
            # waiting for a frame, it would end now (the buffer is closed): none is left.
            for thread in set(threading.enumerate()) - threads_before:
                if thread.name.startswith("esrrf-reader"):
                    thread.join(timeout=10)
        n = int(result.frames_analysed)
        try:
            total = len(esrrf.time_points(n, self.params))
        except ValueError:
            total = result.total_time_points
        return dataclasses.replace(result, stopped_early=stopped_by_user, total_time_points=total)

    def _next_update(self, start: int) -> int | None:
        """After ``start`` frames, the next frame count the worker must handle an update at: a
        measurement (every ``quality.every`` frames of a time point) or a drift block's end;
        None when neither comes."""
        stops = []
        every = self.quality.every
        if every > 0:
            per = self.params.frames_per_timepoint
            first = start // per * per if per else 0
            stops.append(first + (start - first) // every * every + every)
        if self.drift is not None and self.drift_error is None:
            block = self.drift.block
            stops.append(start // block * block + block)
        return min(stops) if stops else None

    def _track_drift(self, stack: _GrowingStack, done: int) -> None:
        assert self.drift is not None
        try:
            self.drift.add(stack.take_tracked(done))
        except Exception as error:  # the reconstruction goes on without the track
            stack.tracking = False
            self.drift_error = f"{type(error).__name__}: {error}"

    def _measure(self, stack: _GrowingStack, output: Any, done: int, batch: bool) -> None:
        """Every ``quality.every`` frames of a time point: measure its reconstruction so far
        (a copy of the job's running image: the job's state is only read). The frames read are
        summed then, and with each ``batch`` of :data:`HOST_BATCH` frames."""
        per = self.params.frames_per_timepoint
        timepoint = (done - 1) // per if per else 0
        first = timepoint * per
        frames = done - first
        if frames % self.quality.every:
            if batch:  # the frames waiting on the host stay few
                stack.fold(first, done)
            return
        stack.fold(first, done)
        started = time.perf_counter()
        if not self.quality.due(started - self._started):
            return
        halves = self._halves
        if halves is not None and timepoint != self._halves_timepoint:
            halves.reset()  # a rolling session's next time point: its own frames only
            self._halves_timepoint = timepoint
        try:
            widefield = stack.widefield()
            image = np.asarray(output.data())[0]
            point = measure_quality(
                image,
                widefield,
                self.params.magnification,
                frames=frames,
                timepoint=timepoint,
                device=self.device,
                halves=halves,
            )
        except Exception as error:  # the reconstruction goes on without this measurement
            nan = float("nan")
            finding = f"not measured ({type(error).__name__}: {error})"
            point = QualityPoint(frames, timepoint, nan, finding, nan, 0.0)
        # The whole cost (the image's copy too), for the share said in docs/live.md.
        point = dataclasses.replace(point, seconds=time.perf_counter() - started)
        self.quality.add(point)

    def _check_output_size(self, length: int, buffer: FrameBuffer) -> None:
        from ..compute import esrrf

        assert buffer.frame_shape is not None
        height, width = buffer.frame_shape[-2:]
        m = self.params.magnification
        points = len(esrrf.time_points(length, self.params))
        size = points * (height * width * (m * m + 1)) * 4
        if size > self.OUTPUT_LIMIT:
            raise ValueError(
                f"a rolling eSRRF of {length} frames makes {points} time points "
                f"({size / 2**30:.1f} GiB on the host): attach with a smaller max_frames, "
                "or a larger frames_per_timepoint"
            )
