"""eSRRF of one ``(T, Y, X)`` stack: frames stream through the pipeline into online temporal
statistics (:func:`iter_stack`, which :func:`~napari_gpuscope.compute.esrrf.iter_esrrf` runs
for a stack and :func:`~napari_gpuscope.compute.esrrf.iter_channels` for each channel), and
its result (:mod:`._stream_result`, whose names stay importable from here)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from .._types import ArrayLike, Device
from ..arrays import download_into
from ..devices import device_context
from ..job_parts import scaled
from ..jobs import Job, Output, Progress, is_stop
from ..memory import check_budget, plan_chunk, run_in_chunks
from ._drift import drift_blocks, iter_estimate_drift
from ._drift_correct import check_shifts, correction_bytes_per_frame, shift_frames
from ._drift_result import DriftResult
from ._input import check_frames_per_chunk, check_stack, time_points
from ._params import EsrrfParams
from ._pipeline import FramePipeline
from ._reader import FrameReader
from ._resolution import measure_resolution
from ._stream_result import EsrrfResult, output_geometry
from ._temporal import TemporalAccumulator, macro_pixel_correct

__all__ = ["CPU_CHUNK", "GPU_CHUNK", "OUTPUT", "EsrrfResult", "iter_stack", "output_geometry"]

CPU_CHUNK = 4
"""Default frames per chunk on the CPU (the reference path)."""

GPU_CHUNK = 32
"""Default frames per chunk on a GPU (fewer when device memory is short): two launches per
chunk keep the GPU busy, the next chunk's upload overlaps this chunk's kernels (a whole time
point in one chunk would leave nothing to overlap), and the preview updates every chunk."""

OUTPUT = "esrrf"
"""Name of the streamed output: the running reconstruction of the current time point."""


class _Stopped(Exception):
    """The user asked to stop and keep the frames analysed so far."""


def check_drift_input(
    drift_shifts: Any,
    n_frames: int,
    params: EsrrfParams,
    *,
    name: str = "stack",
    frame_shape: tuple[int, int] | None = None,
) -> np.ndarray | DriftResult | None:
    """A given trace checked against the frames (float64 ``(T, 2)``, each shift below the
    frame's size; a :class:`DriftResult` stays one, its shifts checked), or, with drift
    correction to estimate, a check that the frames hold two drift blocks; None without
    one."""
    if isinstance(drift_shifts, DriftResult):
        check_shifts(drift_shifts.shifts, n_frames, name="drift_shifts", frame_shape=frame_shape)
        return drift_shifts
    if drift_shifts is not None:
        return check_shifts(drift_shifts, n_frames, name="drift_shifts", frame_shape=frame_shape)
    if params.drift_correction:
        drift_blocks(
            n_frames, params.drift_time_averaging, name=name, parameter="drift_time_averaging"
        )
    return None


def iter_stack(
    stack: ArrayLike,
    params: EsrrfParams,
    *,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    drift_shifts: Any = None,
    device: str | torch.device | None = None,
) -> Job[EsrrfResult]:
    """eSRRF of one ``(T, Y, X)`` stack: :func:`~napari_gpuscope.compute.esrrf.iter_esrrf`
    for 3D input (same parameters, ``params`` an :class:`EsrrfParams`); the input is checked
    now, before the first update."""
    check_frames_per_chunk(frames_per_chunk)
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)  # a nested list: as NumPy reads it
    n_frames, height, width = check_stack(stack, params, name=name)
    drift_shifts = check_drift_input(
        drift_shifts, n_frames, params, name=name, frame_shape=(height, width)
    )
    memory_budget = check_budget(memory_budget)
    if device is None and isinstance(stack, torch.Tensor) and stack.is_cuda:
        device = stack.device
    drift = drift_shifts
    if drift is not None and not isinstance(drift, DriftResult):
        drift = DriftResult.from_shifts(drift_shifts, (height, width))
    elif drift is not None and drift.frame_shape != (height, width):
        # e.g. a trace read from a CSV file, which does not say its frames' shape (its track
        # is drawn from the frame's centre)
        drift = dataclasses.replace(drift, frame_shape=(height, width))
    return _run(stack, params, frames_per_chunk, memory_budget, name, device, drift)


def _run(
    stack: ArrayLike,
    params: EsrrfParams,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Device,
    drift: DriftResult | None = None,
) -> Job[EsrrfResult]:
    n_frames, height, width = (int(s) for s in stack.shape)
    ranges = time_points(n_frames, params, name=name)
    progress_from = 0.0
    if drift is None and params.drift_correction:
        # Over the whole stack, before it is split into time points; a quarter of the bar.
        estimate = iter_estimate_drift(
            stack,
            params=params.drift_params(),
            frames_per_chunk=frames_per_chunk,
            memory_budget=memory_budget,
            name=name,
            device=device,
        )
        drift = yield from scaled(estimate, 0.0, 0.25)
        progress_from = 0.25
        if drift.stopped_early:
            # Stop & keep during the estimate: its trace covers the blocks measured so far, and
            # only those frames can be corrected (the stop ends eSRRF after its first chunk).
            covered = int(drift.shifts.shape[0])
            ranges = [(a, min(b, covered)) for a, b in ranges if a < covered]
    # An input that grows while it is read (a live session's frames) says how many frames a
    # chunk may take now; nothing is read ahead of it (it would wait for frames to come).
    frames_ready = getattr(stack, "frames_ready", None)
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        table = None if drift is None else drift.shifts  # host: shift_frames plans there
        pipeline = FramePipeline(height, width, params, dev, name)
        rows, cols = pipeline.output_shape
        out = np.zeros((len(ranges), rows, cols), np.float32)
        widefield = np.zeros((len(ranges), height, width), np.float32)
        itemsize = int(getattr(stack.dtype, "itemsize", 4))
        # The drift correction's temporaries (the raw upload is the pipeline's already).
        extra = 0 if table is None else correction_bytes_per_frame(height, width, 0)
        total = sum(b - a for a, b in ranges)
        state = {"done": 0, "chunks": 0}
        computed: list[tuple[int, int]] = []
        stopped = False
        for index, (first, stop) in enumerate(ranges):
            accumulator = TemporalAccumulator(
                (rows, cols), params.temporal, dev, frame_shape=(height, width)
            )
            label = f"time point {index + 1}/{len(ranges)}, " if len(ranges) > 1 else ""

            def finish(acc: TemporalAccumulator = accumulator) -> torch.Tensor:
                image = acc.result()
                if params.macro_pixel_correction:
                    image = macro_pixel_correct(image, params.magnification)
                return image

            def process(
                start: int,
                end: int,
                first: int = first,
                stop: int = stop,
                index: int = index,
                acc: TemporalAccumulator = accumulator,
                label: str = label,
                finish: Any = finish,
            ) -> Job[None]:
                ahead = first + end if frames_ready is not None else stop
                host = reader.read(first + start, first + end, prefetch_until=ahead)
                frames = pipeline.upload(host, first + start)
                if table is not None:
                    frames = shift_frames(frames, table[first + start : first + end])
                pipeline.stage(frames, acc)
                acc.stage_widefield(frames)
                del frames
                # Only now, when nothing of the chunk can fail any more: an out-of-memory error
                # above leaves the committed sums as they were, and the retried chunk never
                # counts a frame twice.
                acc.commit()
                state["done"] += end - start
                state["chunks"] += 1
                region = (slice(index, index + 1), slice(0, rows), slice(0, cols))
                command = yield Progress(
                    1.0,  # of this chunk: run_in_chunks and scaled map it onto the whole job
                    f"{label}frames {first + start}-{first + end - 1} "
                    f"({state['done']}/{total} analysed)",
                    step=state["done"],
                    outputs={
                        OUTPUT: Output(
                            lambda: finish().cpu().numpy()[None],
                            region=region,
                            shape=(len(ranges), rows, cols),
                        )
                    },
                )
                if is_stop(command):
                    raise _Stopped

            n = stop - first
            # A CPU gains nothing from chunks larger than its caches.
            cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
            per_frame = pipeline.bytes_per_frame(itemsize) + extra
            chunk = plan_chunk(
                min(n, cap),
                per_frame,
                dev,
                fixed_bytes=pipeline.fixed_bytes(),
                budget=memory_budget,
                what="eSRRF of one frame chunk",
            )
            before = sum(b - a for a, b in ranges[:index])
            try:
                yield from scaled(
                    run_in_chunks(
                        n,
                        min(chunk, n),
                        process,
                        device=dev,
                        bytes_per_item=per_frame,
                        fixed_bytes=pipeline.fixed_bytes(),
                        budget=memory_budget,
                        what="eSRRF of one frame chunk",
                        ready=None
                        if frames_ready is None
                        else (lambda start, first=first: frames_ready(first + start)),
                    ),
                    progress_from + (1 - progress_from) * before / total,
                    progress_from + (1 - progress_from) * (before + n) / total,
                )
            except _Stopped:
                stopped = True
            download_into(out[index], finish())
            widefield[index] = accumulator.widefield().cpu().numpy()
            computed.append((first, first + accumulator.count))
            if stopped:
                break
        count = len(computed)
        if not np.isfinite(out[:count]).all():
            # The input range check keeps this from happening; never hand on a NaN silently.
            raise ArithmeticError(
                f"eSRRF ({params.temporal}) produced NaN or infinite values from finite input; "
                "please report it with the input's value range and dtype"
            )
        result = EsrrfResult(
            image=out[:count],
            widefield=widefield[:count],
            params=params,
            time_points=computed,
            frames_analysed=state["done"],
            chunks=state["chunks"],
            stopped_early=stopped,
            total_time_points=len(ranges),
            kernel_paths=pipeline.kernel_paths(),
            drift=drift,
        )
        if params.measure_resolution:  # still on the job's device and thread
            yield Progress(1.0, "Measuring the decorrelation resolution of the result...")
            measured = measure_resolution(result, dev)
            result = dataclasses.replace(result, decorrelation=measured)
        return result
