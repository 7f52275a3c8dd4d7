"""What each method does with the frames of a live session, through the registry's jobs only.

- TV (``tv``, job ``denoise``): every frame (or z-stack, ``frames_per_stack``) denoised by the
  registry's job. With ``weight=None`` the weight (and Poisson mode's camera model) is resolved
  once, on the first frame (:func:`~napari_gpuscope.compute.tv.resolve_weight`, exactly what the
  job does when it starts) and held for the session, so every frame is smoothed the same.
- Flat-field (``flatfield``, job ``apply``): a saved profile applied to each frame by the
  registry's apply job (``measure_shading=False``, as batch runs: the shading statistics need
  the whole stack).
- Phase (``phase``, job ``reconstruct``): each z-stack reconstructed by the registry's job as
  soon as its last frame is kept (``frames_per_stack``); ``result()`` is the latest stack's.
- eSRRF (``esrrf``, job ``run``): the registry's job reads the frames as they arrive through a
  stack whose reads wait for them (:class:`_GrowingStack`), one frame per chunk, into its
  online temporal statistics: a cumulative reconstruction (``frames_per_timepoint=0``) or a new
  time point every N frames (``frames_per_timepoint=N``); the session's end sends the job
  ``STOP``, which returns the time points over the frames analysed.

Each runs in the session's worker thread (:meth:`LiveMethod.run`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..methods import JobSpec, method
from ._buffer import FrameBuffer

if TYPE_CHECKING:
    from ..compute._types import Device
    from ..compute.params import Params

__all__ = ["LIVE_JOBS", "Control", "LiveMethod", "live_method"]


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


def _run_job(job: Any) -> Any:
    from ..compute.jobs import run_job

    return run_job(job)


class _PerFrame(LiveMethod):
    """A job run on each frame (or z-stack: :attr:`unit` frames); the result stacks theirs.

    A z-stack whose last frame never comes (the acquisition stopped within it) is not
    processed."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._results: list[Any] = []
        self._lock = threading.Lock()

    def process(self, frame: np.ndarray) -> Any:
        raise NotImplementedError

    def combine(self, results: list[Any]) -> Any:
        raise NotImplementedError

    def run(self, buffer: FrameBuffer, control: Control) -> Any:
        unit, index = self.unit, 0
        while not control.stopping() and buffer.wait_for((index + 1) * unit):
            if control.stopping():
                break
            frames = buffer.take(index * unit, (index + 1) * unit)
            buffer.release((index + 1) * unit)  # in hand: the buffer's places are free
            data = frames[0] if unit == 1 else frames
            result = self.process(data)
            with self._lock:
                self._results.append(result)
            self._latest = self.latest_of(result, data)
            index += 1
            control.processed(index * unit)
        return self.partial_result()

    def latest_of(self, result: Any, data: np.ndarray) -> np.ndarray:
        """What :meth:`latest` shows of a unit's result."""
        image = np.asarray(result.image)
        return image[0] if image.ndim > data.ndim else image

    def partial_result(self) -> Any:
        with self._lock:
            results = list(self._results)
        return self.combine(results) if results else None


class LiveTV(_PerFrame):
    """TV: every frame denoised with one weight (resolved on the first frame)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.resolved: Any = None

    def process(self, frame: np.ndarray) -> Any:
        from ..compute import tv

        if self.resolved is None:
            self.resolved = tv.resolve_weight(frame, self.params)
        return _run_job(self.function(frame, **self.frame_arguments()))

    def frame_arguments(self) -> dict[str, Any]:
        """What the registry's job is given for every frame (the resolved weight)."""
        kwargs: dict[str, Any] = {
            "params": self.params.replace(weight=self.resolved.weight),
            "device": self.device,
        }
        if self.resolved.camera is not None:
            kwargs["camera"] = self.resolved.camera
        return kwargs

    def combine(self, results: list[Any]) -> Any:
        first = results[0]
        # TVResult's own rules for independent problems: the largest iterations and gap,
        # converged only if every frame is; the time axis is not coupled (spacing 0).
        return dataclasses.replace(
            first,
            image=np.stack([r.image for r in results]),
            params=self.params,
            weight=self.resolved.weight,
            noise_sigma=self.resolved.noise_sigma,
            camera=self.resolved.camera,
            iterations=max(r.iterations for r in results),
            relative_gap=max(r.relative_gap for r in results),
            converged=all(r.converged for r in results),
            spacing=(0.0, *first.spacing),
            chunks=max(r.chunks for r in results),
            stopped_early=any(r.stopped_early for r in results),
            kernel_paths=dict(results[-1].kernel_paths),
        )


class LiveApply(_PerFrame):
    """Flat-field: the saved profile applied to each frame."""

    def process(self, frame: np.ndarray) -> Any:
        job = self.function(
            frame[None] if frame.ndim == 2 else frame,
            self.inputs["profile"],
            self.params,
            measure_shading=False,
            device=self.device,
        )
        return _run_job(job)

    def combine(self, results: list[Any]) -> Any:
        image = np.concatenate([np.asarray(r.image) for r in results])
        return dataclasses.replace(results[0], image=image)


class LivePhase(_PerFrame):
    """Phase: each z-stack reconstructed as soon as it is complete."""

    def process(self, frame: np.ndarray) -> Any:
        return _run_job(self.function(frame, params=self.params, device=self.device))

    def latest_of(self, result: Any, data: np.ndarray) -> np.ndarray:
        return np.asarray(result.phase)

    def combine(self, results: list[Any]) -> Any:
        # One z-stack makes one result: the latest completed stack's (results() has them all).
        return results[-1]

    def results(self) -> list[Any]:
        """Every completed z-stack's result, in order."""
        with self._lock:
            return list(self._results)


class _GrowingStack:
    """A ``(length, Y, X)`` stack whose reads wait for the frames to arrive.

    What the eSRRF job reads: ``stack[a:b]`` returns the buffer's frames ``a:b`` (zeros for
    frames past the session's end, which only a read ahead asks for and the job never uses,
    since the session sends ``STOP`` before it resumes past the last frame). Frames before
    ``a`` are released: the job reads forward only, so the buffer holds the frames not yet read
    and the last chunk (for an out-of-memory retry, which re-reads it).
    """

    def __init__(self, buffer: FrameBuffer, length: int) -> None:
        assert buffer.frame_shape is not None and buffer.dtype is not None
        self.buffer = buffer
        self.shape = (length, *buffer.frame_shape)
        self.dtype = buffer.dtype
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, int):
            return self[key : key + 1][0]
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"a live stack is read in frame ranges, not {key!r}")
        start, stop, _ = key.indices(self.shape[0])
        frames = self.buffer.take(start, stop)
        self.buffer.release(start)
        return frames


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
        self.max_frames = max_frames
        self._want_latest = False
        self.frames_analysed = 0

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
        job = self.function(
            stack, params=self.params, frames_per_chunk=1, name=control.name, device=self.device
        )
        threads_before = set(threading.enumerate())
        stopped_by_user = False
        command: Any = None
        try:
            while True:
                try:
                    update = job.send(command)
                except StopIteration as end:
                    result = end.value
                    break
                command = None
                if update.step is None:
                    continue  # the measurement of the result's resolution, after the frames
                done = int(update.step)
                self.frames_analysed = done
                if self._want_latest and esrrf.OUTPUT in update.outputs:
                    self._latest = np.asarray(update.outputs[esrrf.OUTPUT].data())[0]
                    self._want_latest = False
                control.processed(done)
                if control.stopping():
                    command, stopped_by_user = STOP, True
                elif done < length and not buffer.wait_for(done + 1):
                    # No frame `done` will come: the acquisition is over, or a stop closed the
                    # buffer while the job waited for it.
                    command, stopped_by_user = STOP, control.stopping()
        finally:
            job.close()
            buffer.close()
            # The job's read-ahead thread waits for a frame only while the buffer is open; it
            # ends now, and the session leaves no thread behind.
            for thread in set(threading.enumerate()) - threads_before:
                if thread.name.startswith("esrrf-reader"):
                    thread.join(timeout=10)
        n = int(result.frames_analysed)
        try:
            total = len(esrrf.time_points(n, self.params))
        except ValueError:
            total = result.total_time_points
        return dataclasses.replace(result, stopped_early=stopped_by_user, total_time_points=total)

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


_CLASSES: dict[tuple[str, str], type[LiveMethod]] = {
    ("tv", "denoise"): LiveTV,
    ("flatfield", "apply"): LiveApply,
    ("esrrf", "run"): LiveEsrrf,
    ("phase", "reconstruct"): LivePhase,
}

LIVE_JOBS = frozenset(_CLASSES)
"""The (method, job) pairs a live session runs."""


def live_method(
    method_id: str,
    job_id: str | None,
    params: Params | Mapping[str, Any] | None,
    *,
    device: Device,
    inputs: Mapping[str, Any],
    max_frames: int | None = None,
    frames_per_stack: int | None = None,
) -> LiveMethod:
    """The live form of a registered job, its parameters validated now."""
    spec = method(method_id)
    job = spec.job_spec(job_id)
    key = (spec.id, job.id)
    if key not in _CLASSES:
        raise ValueError(
            f"{spec.title}'s job {job.id!r} does not run live yet; live jobs: "
            + ", ".join(f"{m} {j}" for m, j in sorted(LIVE_JOBS))
        )
    params_class = job.params_class()
    if params is None:
        params = params_class()
    elif isinstance(params, Mapping):
        params = params_class(**params)
    elif not isinstance(params, params_class):
        raise TypeError(f"params must be a {params_class.__name__}, got {type(params).__name__}")
    missing = [name for name in job.needs if name not in inputs]
    if missing:
        raise ValueError(f"{spec.title}'s job {job.id!r} needs {missing} (give them as keywords)")
    unknown = sorted(set(inputs) - set(job.needs))
    if unknown:
        raise TypeError(f"{spec.title}'s live job {job.id!r} takes no {unknown}")
    cls = _CLASSES[key]
    if cls is LivePhase and frames_per_stack is None:
        raise ValueError("a live phase reconstructs z-stacks: give frames_per_stack (slices)")
    if cls is LiveEsrrf and frames_per_stack not in (None, 1):
        raise ValueError("a live eSRRF takes single frames, not z-stacks (frames_per_stack)")
    if cls is LiveEsrrf and max_frames is not None:
        live = cls(job, params, device, inputs, max_frames=max_frames)
    else:
        live = cls(job, params, device, inputs)
    live.unit = frames_per_stack or 1
    return live
