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
here (the package's lazy exports point here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._types import ArrayLike, Device
from ..arrays import InvalidInputError
from ..jobs import Job, Progress, mapped
from ..memory import check_budget
from ..results import Geometry, LayerDataTuple
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
from ._drift import iter_estimate_drift
from ._drift_result import DriftResult
from ._input import check_frames_per_chunk, check_stack
from ._params import EsrrfParams
from ._register import RegistrationResult, apply_registration, register_channels
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

@dataclass(frozen=True)
class ChannelsResult:
    """Each channel's eSRRF result and the registration that aligned them.

    Attributes
    ----------
    channels : tuple
        Channel ``c``'s :class:`~napari_gpuscope.compute.esrrf.EsrrfResult` (or what the
        ``finish`` of :func:`iter_channels` made of it); fewer than :attr:`n_channels` after
        Stop & keep.
    registration : RegistrationResult or None
        None when the channels were not registered.
    n_channels : int
        The input's channels.
    estimate : DriftResult or None
        Channel 0's drift as estimated in the run (None when a trace was given, or none).
    channel_axis : int
        The input's channel axis (dropped from a geometry given to :meth:`layers`).
    channel_names : tuple of str or None
        What each channel is called in layer names (default ``"<name> ch<c>"``).
    """

    channels: tuple[Any, ...]
    registration: RegistrationResult | None
    n_channels: int
    estimate: DriftResult | None = None
    channel_axis: int = 0
    channel_names: tuple[str, ...] | None = None

    @property
    def stopped_early(self) -> bool:
        """Whether Stop & keep ended the run before every channel was complete."""
        done = len(self.channels)
        return done < self.n_channels or any(c.stopped_early for c in self.channels)

    @property
    def drift(self) -> DriftResult | None:
        """The reference channel's drift trace (None without drift correction)."""
        if self.estimate is not None:
            return self.estimate
        return self.channels[0].drift if self.channels else None

    @property
    def image(self) -> np.ndarray:
        """float32 ``(C, n_timepoints, H M, W M)``: every channel's eSRRF image (the channels
        completed, and the time points every one of them has, after Stop & keep)."""
        if not self.channels:
            return np.zeros((0, 0, 0, 0), np.float32)
        points = min(c.image.shape[0] for c in self.channels)
        return np.stack([c.image[:points] for c in self.channels])

    @property
    def params(self) -> EsrrfParams | None:
        """The parameters every channel was reconstructed with."""
        return self.channels[0].params if self.channels else None

    def summary(self) -> dict[str, Any]:
        """Each channel's facts and the registration's."""
        return {
            "channels": [c.summary() for c in self.channels],
            "n_channels": self.n_channels,
            "channel_axis": self.channel_axis,
            "channel_names": None if self.channel_names is None else list(self.channel_names),
            "registration": None if self.registration is None else self.registration.summary(),
            "stopped_early": self.stopped_early,
        }

    def describe(self) -> str:
        """The registration, then each channel's line."""
        registration = (
            "not registered" if self.registration is None else self.registration.describe()
        )
        head = f"{self.n_channels} channels, {registration}"
        if len(self.channels) < self.n_channels:
            head += f"; stopped early after {len(self.channels)} channel(s)"
        lines = [f"channel {c}: {r.describe()}" for c, r in enumerate(self.channels)]
        return ". ".join([head, *lines])

    def layers(
        self,
        name: str = "stack",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """Every channel's eSRRF image first (additive colours, so they overlay), then the
        widefield means (hidden) and channel 0's drift track; channel ``c`` is named
        ``"<name> ch<c>"`` (or by :attr:`channel_names`), on the input's axes without the
        channel axis."""
        trailing = None if geometry is None else _without_axis(geometry, self.channel_axis)
        images, others = [], []
        for c, result in enumerate(self.channels):
            colour = CHANNEL_COLORMAPS[c % MAX_CHANNELS]
            for k, (data, kwargs, kind) in enumerate(
                result.layers(self._channel_name(name, c), trailing, metadata)
            ):
                kwargs = dict(kwargs)
                if kind == "tracks" and c > 0:
                    continue  # its path holds the registration's offset too: channel 0's says it
                if kind == "image":
                    kwargs.update(colormap=colour, blending="additive")
                    if k > 0:
                        kwargs["visible"] = False  # the widefield mean under the channels
                (images if k == 0 else others).append((data, kwargs, kind))
        return images + others

    def _channel_name(self, name: str, c: int) -> str:
        if self.channel_names is not None and c < len(self.channel_names):
            return self.channel_names[c]
        return f"{name} ch{c}"

    def files(self, geometry: Geometry | None = None) -> dict[str, str]:
        """Channel 0's drift trace as ``"drift.csv"`` (see
        :meth:`~napari_gpuscope.compute.esrrf.EsrrfResult.files`); ``{}`` without one."""
        trailing = None if geometry is None else _without_axis(geometry, self.channel_axis)
        return {} if self.drift is None else self.drift.files(trailing)


def _without_axis(geometry: Geometry, channel_axis: int) -> Geometry:
    """The geometry of one channel: a 4D geometry loses its channel axis; then the last 3."""
    fields = {}
    for key in ("scale", "translate", "units", "axis_labels"):
        value = getattr(geometry, key)
        if value is not None and len(value) == 4:
            value = tuple(v for i, v in enumerate(value) if i != channel_axis % 4)
        fields[key] = value
    return Geometry(**fields).trailing(3)


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
