"""eSRRF of multi-channel ``(C, T, Y, X)`` input: drift, channel registration, then each channel.

The order users follow with NanoPyx, as one job (:func:`iter_esrrf` hands 4D input here):

1. drift: with ``drift_correction``, each channel's drift is estimated over its whole stack
   (:func:`~napari_gpuscope.compute.esrrf.iter_estimate_drift`), or the given trace is used for
   every channel (channels acquired together drift together);
2. registration to channel 0 (``channel_registration``,
   :func:`~napari_gpuscope.compute.esrrf.register_channels`), on the drift-corrected means when
   drift was estimated (the raw means otherwise): a translation joins each frame's drift shift
   (one resampling, streamed by eSRRF, no copy of the stack); the elastic map is applied to the
   whole stack first (:func:`~napari_gpuscope.compute.esrrf.apply_registration`: a float32 copy
   in host memory), then the drift is corrected in the stream;
3. eSRRF of each channel.

Each channel is read lazily (:class:`~._channel_input.ChannelView`): a Zarr array or a
memory-mapped TIFF is read frame chunk by frame chunk, whatever axis holds the channels. The
channel views and axis checks live in :mod:`._channel_input`; their names stay importable from
here (the package's lazy exports point here), as does :class:`ChannelsResult`
(:mod:`._channels_result`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .._types import ArrayLike, Device
from ..arrays import InvalidInputError
from ..job_parts import mapped
from ..jobs import Job, Progress
from ..memory import check_budget
from ._channel_input import (
    CHANNEL_COLORMAPS,
    MAX_CHANNELS,
    ChannelView,
    StackedChannels,
    channel_stack,
    check_channels,
    first_frames,
    guess_channel_axis,
)
from ._channels_result import ChannelsResult
from ._drift import iter_estimate_drift
from ._drift_result import DriftResult
from ._input import check_frames_per_chunk, check_stack
from ._params import EsrrfParams
from ._register import apply_registration, register_channels
from ._resolution_frc import with_frc
from ._stream import check_drift_input, iter_stack

__all__ = [
    "CHANNEL_COLORMAPS",
    "MAX_CHANNELS",
    "ChannelView",
    "ChannelsResult",
    "StackedChannels",
    "guess_channel_axis",
    "iter_channels",
]


def _quiet(start: float, stop: float, prefix: str) -> Callable[[Progress], Progress]:
    """Rescale updates into [start, stop] and drop their outputs (no per-channel stream)."""

    def transform(update: Progress) -> Progress:
        fraction = None if update.fraction is None else start + (stop - start) * update.fraction
        return dataclasses.replace(
            update, fraction=fraction, message=prefix + update.message, outputs={}
        )

    return transform


def iter_channels(
    data: ArrayLike,
    params: EsrrfParams,
    *,
    channel_axis: int = 0,
    drift_shifts: np.ndarray | DriftResult | None = None,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    device: Device | None = None,
    finish: Callable[[Job[Any]], Job[Any]] | None = None,
    channel_names: tuple[str, ...] | None = None,
) -> Job[ChannelsResult]:
    """eSRRF of each channel of a 4D input after drift correction and channel registration
    (see the module docstring); returns a :class:`ChannelsResult`.

    Parameters
    ----------
    data : array-like
        ``(C, T, Y, X)`` (``channel_axis=0``) or ``(T, C, Y, X)`` (``channel_axis=1``), 2 to
        :data:`MAX_CHANNELS` channels. Never modified.
    params : EsrrfParams
        ``channel_registration`` and the drift fields say what is done before eSRRF.
    channel_axis : {0, 1}
    drift_shifts : array-like, optional
        A ``(T, 2)`` trace used for every channel instead of estimating one.
    frames_per_chunk, memory_budget, name, device
        As :func:`~napari_gpuscope.compute.esrrf.iter_esrrf`'s.
    finish : callable, optional
        Wraps each channel's eSRRF job (e.g. the dock's decorrelation analysis after it).
    channel_names : tuple of str, optional
        Each channel's name in the result's layers (e.g. the layers they came from).

    Examples
    --------
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> stack = np.random.default_rng(0).poisson(50, (2, 4, 16, 16)).astype(np.uint16)
    >>> result = run_job(iter_channels(stack, EsrrfParams(magnification=2), device="cpu"))
    >>> [r.image.shape for r in result.channels]
    [(1, 32, 32), (1, 32, 32)]
    """
    check_frames_per_chunk(frames_per_chunk)
    if not (hasattr(data, "shape") and hasattr(data, "dtype")):
        data = np.asarray(data)  # a nested list: as NumPy reads it
    if len(data.shape) != 4:
        raise InvalidInputError(
            f"{name} has {len(data.shape)} dimension(s) {tuple(data.shape)}; channels of "
            "blinking frames are 4D, (C, T, Y, X) or (T, C, Y, X) with channel_axis=1"
        )
    n_channels = check_channels(data, channel_axis, name=name)
    axis = channel_axis % 4
    stacks = [channel_stack(data, axis, c) for c in range(n_channels)]
    n_frames, height, width = check_stack(stacks[0], params, name=f"{name} channel 0")
    drift_shifts = check_drift_input(
        drift_shifts, n_frames, params, name=name, frame_shape=(height, width)
    )
    memory_budget = check_budget(memory_budget)
    if channel_names is not None and len(channel_names) != n_channels:
        raise ValueError(f"channel_names has {len(channel_names)} names for {n_channels} channels")
    job = _run_channels(
        stacks, params, axis, drift_shifts, (frames_per_chunk, memory_budget), name, device, finish
    )
    return job if channel_names is None else _named(job, tuple(channel_names))


def _named(job: Job[ChannelsResult], names: tuple[str, ...]) -> Job[ChannelsResult]:
    result = yield from job
    return dataclasses.replace(result, channel_names=names)


def _run_channels(
    stacks: list[Any],
    params: EsrrfParams,
    axis: int,
    drift_shifts: np.ndarray | DriftResult | None,
    chunking: tuple[int | None, int | None],
    name: str,
    device: Device,
    finish: Callable[[Job[Any]], Job[Any]] | None,
) -> Job[ChannelsResult]:
    """The job of :func:`iter_channels` once its input is checked (the module docstring's
    three steps)."""
    n_channels, n_frames = len(stacks), int(stacks[0].shape[0])
    frames_per_chunk, memory_budget = chunking
    registration = params.channel_registration
    estimate = drift_shifts is None and params.drift_correction
    drifts: list[Any] = [drift_shifts] * n_channels  # a (T, 2) trace, a DriftResult or None
    aligned_means = []
    estimates: list[DriftResult] = []
    first = 0.0
    if estimate:  # 20 % of the bar
        for c in range(n_channels):
            span = (0.2 * c / n_channels, 0.2 * (c + 1) / n_channels)
            trace = yield from mapped(
                iter_estimate_drift(
                    stacks[c],
                    params=params.drift_params(),
                    frames_per_chunk=frames_per_chunk,
                    memory_budget=memory_budget,
                    name=f"{name} channel {c}",
                    device=device,
                ),
                _quiet(*span, f"channel {c} drift: "),
            )
            estimates.append(trace)
            if trace.stopped_early:  # Stop & keep: channel 0 on the frames its trace covers
                return (
                    yield from _stopped_in_drift(
                        stacks[0],
                        params,
                        estimates[0],
                        trace,
                        chunking,
                        name,
                        device,
                        finish,
                        axis,
                        n_channels,
                    )
                )
            drifts[c] = trace.shifts
            aligned_means.append(trace.aligned_mean)
        first = 0.2
    registered = None
    sources: list[Any] = stacks
    if registration != "off":
        yield Progress(first, "registering the channels to channel 0...")
        if aligned_means:
            images = np.stack(aligned_means)
        else:
            images = np.stack([_mean(stack, frames_per_chunk) for stack in stacks])
        # compute's 64 px blocks, smaller on small frames (a block must fit the frame)
        side = min(int(stacks[0].shape[-2]), int(stacks[0].shape[-1]))
        block = int(min(64, max(16, side // 2)))
        registered = register_channels(
            images, elastic=registration == "elastic", block_size=block, device=device
        )
        if registered.elastic:
            yield Progress(first, "applying the elastic registration to every frame...")
            sources = list(apply_registration(np.stack(stacks), registered, device=device))
        first += 0.05
    results: list[Any] = []
    for c in range(n_channels):
        shifts = drifts[c]
        if registered is not None and not registered.elastic:
            if isinstance(shifts, DriftResult):
                shifts = shifts.shifts
            base = np.zeros((n_frames, 2)) if shifts is None else np.asarray(shifts, np.float64)
            shifts = base + registered.shifts[c]  # a translation joins each frame's drift
        span = (first + (1 - first) * c / n_channels, first + (1 - first) * (c + 1) / n_channels)
        job = iter_stack(
            sources[c],
            params,
            device=device,
            frames_per_chunk=frames_per_chunk,
            memory_budget=memory_budget,
            name=f"{name} channel {c}",
            drift_shifts=shifts,
        )
        if params.measure_resolution:  # the halves moved as the channel's frames
            job = with_frc(
                job,
                sources[c],
                params,
                shifts,
                device=device,
                frames_per_chunk=frames_per_chunk,
                memory_budget=memory_budget,
            )
        if registered is not None and not registered.elastic:
            # Its frames moved by drift + registration; its trace says the drift alone (the
            # registration is the ChannelsResult's).
            own = estimates[c] if estimates else drifts[c]
            job = _reporting_drift(job, own)
        if finish is not None:
            job = finish(job)
        result = yield from mapped(job, _quiet(*span, f"channel {c}: "))
        results.append(result)
        if result.stopped_early:  # Stop & keep: the channels so far
            break
    return ChannelsResult(
        tuple(results), registered, n_channels, estimates[0] if estimates else None, axis
    )


def _stopped_in_drift(
    stack: ArrayLike,
    params: EsrrfParams,
    reference: DriftResult,
    stopped: DriftResult,
    chunking: tuple[int | None, int | None],
    name: str,
    device: Device,
    finish: Callable[[Job[Any]], Job[Any]] | None,
    axis: int,
    n_channels: int,
) -> Job[ChannelsResult]:
    """Stop & keep during a channel's drift estimate: channel 0 alone, not registered, on the
    frames the stopped trace covers (its eSRRF stops after one chunk: the stop stands)."""
    frames_per_chunk, memory_budget = chunking
    covered = int(stopped.shifts.shape[0])
    job = iter_stack(
        first_frames(stack, covered),
        params,
        device=device,
        frames_per_chunk=frames_per_chunk,
        memory_budget=memory_budget,
        name=f"{name} channel 0",
        drift_shifts=reference.shifts[:covered],
    )
    if finish is not None:
        job = finish(job)
    result = yield from mapped(job, _quiet(0.2, 1.0, "channel 0: "))
    return ChannelsResult((result,), None, n_channels, reference, axis)


def _reporting_drift(job: Job[Any], drift: Any) -> Job[Any]:
    """``job`` whose result's ``drift`` is ``drift`` (a DriftResult, a ``(T, 2)`` trace or
    None)."""
    result = yield from job
    shape = tuple(result.widefield.shape[-2:])
    if drift is not None and not isinstance(drift, DriftResult):
        drift = DriftResult.from_shifts(drift, shape)
    elif drift is not None and drift.frame_shape != shape:  # e.g. read from a CSV file
        drift = dataclasses.replace(drift, frame_shape=shape)
    return dataclasses.replace(result, drift=drift)


def _mean(stack: ArrayLike, frames_per_chunk: int | None) -> np.ndarray:
    """The mean over frames, read in chunks (a lazy channel is never read whole)."""
    step = max(1, frames_per_chunk or 64)
    total = np.zeros(stack.shape[1:], np.float64)
    for start in range(0, int(stack.shape[0]), step):
        total += np.asarray(stack[start : start + step], np.float64).sum(axis=0)
    return (total / int(stack.shape[0])).astype(np.float32)
