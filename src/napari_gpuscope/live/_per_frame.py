"""The live methods that run the registry's job once per frame or z-stack and stack the
results: TV (one weight for the session), flat-field's apply, and phase (see
:mod:`._methods`)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np

from ._buffer import FrameBuffer
from ._live_method import Control, LiveMethod, _run_job
from ._pacing import StepPacer

__all__ = ["LiveApply", "LivePhase", "LiveTV"]


class _PerFrame(LiveMethod):
    """A job run on each frame (or z-stack: :attr:`unit` frames); the result stacks theirs.

    A z-stack whose last frame never comes (the acquisition stopped within it) is not
    processed."""

    most_per_job = 1
    """Units one job may take when they wait in the buffer (a method whose job treats its
    frames one by one, so that a job over several equals a job for each, raises it)."""

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
        pacer = StepPacer()
        while not control.stopping() and buffer.wait_for((index + 1) * unit):
            if control.stopping():
                break
            # The units in hand, up to most_per_job and about half a second of work (a stop
            # acts between jobs): a worker that fell behind catches up in fewer jobs.
            count = min(self.most_per_job, buffer.kept // unit - index)
            most = pacer.most()  # frames
            if most is not None:
                count = min(count, most // unit)
            count = max(1, count)
            end = (index + count) * unit
            frames = buffer.take(index * unit, end)
            buffer.release(end)  # in hand: the buffer's places are free
            data = frames[0] if unit == 1 and count == 1 else frames
            pacer.start()
            result = self.process(data)
            pacer.done(count * unit)
            with self._lock:
                self._results.append(result)
            self._show(self.latest_of(result, data), end)
            index += count
            control.processed(end)
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
    """Flat-field: the saved profile applied to each frame.

    The profile's device fields are prepared (uploaded, checked) at the first frame and
    reused by every frame's job while the session runs (the profile is fixed at attach);
    they are freed when it ends. The frames waiting go through one job, up to
    :attr:`most_per_job` (the correction treats each frame alone: the same images)."""

    most_per_job = 16

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        from ..compute.flatfield._fields import ProfileFields

        if getattr(self.params, "timelapse_baseline", False):
            # Found while batching the frames waiting: a job over a few frames fitted other
            # baselines than one over the stack (up to 3 counts on a test stack).
            raise ValueError(
                "BasicParams.timelapse_baseline: each frame's baseline is fitted jointly over "
                "the frames of the stack (BaSiCPy's timelapse transform), which a live session "
                "does not have: set timelapse_baseline=False, or apply the profile to the "
                "acquired stack afterwards"
            )
        self.fields = ProfileFields()

    def run(self, buffer: FrameBuffer, control: Control) -> Any:
        try:
            return super().run(buffer, control)
        finally:
            self.fields.clear()

    def process(self, frame: np.ndarray) -> Any:
        job = self.function(
            frame[None] if frame.ndim == 2 else frame,
            self.inputs["profile"],
            self.params,
            measure_shading=False,
            device=self.device,
        )
        with self.fields.reused():
            return _run_job(job)

    def latest_of(self, result: Any, data: np.ndarray) -> np.ndarray:
        image = np.asarray(result.image)  # the newest frame (or z-stack) of the job's
        return image[-self.unit :] if self.unit > 1 else image[-1]

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
