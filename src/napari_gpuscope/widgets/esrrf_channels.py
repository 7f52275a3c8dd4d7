"""eSRRF of a multi-channel ``(C, T, Y, X)`` layer in the dock: drift, registration, channels.

The order users follow with NanoPyx, as one job of the dock (run in its worker thread):

1. drift: with drift correction, each channel's drift is estimated over its whole stack
   (:func:`~napari_gpuscope.compute.esrrf.iter_estimate_drift`), or the dock's trace is used
   for every channel (channels acquired together drift together);
2. registration to channel 0 (:func:`~napari_gpuscope.compute.esrrf.register_channels`), on
   the drift-corrected means when drift was estimated (the raw means otherwise): a translation
   joins each frame's drift shift (one resampling, streamed by eSRRF, no copy of the stack);
   the elastic map is applied to the whole stack first
   (:func:`~napari_gpuscope.compute.esrrf.apply_registration`: a float32 copy in host memory),
   then the drift is corrected in the stream;
3. eSRRF of each channel, with its decorrelation resolution (:mod:`.esrrf_results`).

The channels' reconstructions are not streamed into a layer while they build up (one layer
per channel appears at the end), in additive colours (magenta, green, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtWidgets import QComboBox, QSizePolicy, QWidget

from napari_gpuscope.compute.jobs import Job, Progress, mapped
from napari_gpuscope.widgets.esrrf_results import ResolvedResult, with_resolution

if TYPE_CHECKING:
    from napari_gpuscope.compute.esrrf import DriftResult, EsrrfParams, RegistrationResult
    from napari_gpuscope.compute.results import Geometry, LayerDataTuple

__all__ = [
    "CHANNEL_COLORMAPS",
    "MAX_CHANNELS",
    "REGISTRATIONS",
    "ChannelsResult",
    "RegistrationRow",
    "iter_channels",
]

REGISTRATIONS = {"off": "Off", "translation": "Translation", "elastic": "Elastic (per block)"}
"""Channel registration choices: value -> what the dock's combo says."""
CHANNEL_COLORMAPS = ("magenta", "green", "cyan", "yellow", "red", "blue", "orange", "gray")
MAX_CHANNELS = len(CHANNEL_COLORMAPS)


class RegistrationRow(QComboBox):
    """The choice "Register channels: Off | Translation | Elastic (per block)": :meth:`add_to`
    makes it a row of the dock's form (lined up with the others), :meth:`show_row` shows or
    hides it with its label (it applies to (C, T, Y, X) layers only)."""

    def __init__(self) -> None:
        super().__init__()
        for value, text in REGISTRATIONS.items():
            self.addItem(text, value)
        self.setToolTip(
            "For a 4D (C, T, Y, X) layer: align every channel to channel 0 before eSRRF, by a "
            "sub-pixel translation or an elastic per-block map (chromatic or field distortion), "
            "measured on the channels' means (drift-corrected when drift is estimated)"
        )
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(80)
        self.title: QWidget | None = None

    def add_to(self, form: Any, after: str) -> None:
        """A row of ``form`` (a ParamForm) under field ``after``."""
        form.add_row("Register channels", self, self.toolTip(), after=after)
        self.title = form.main.labels[id(self)]

    def show_row(self, visible: bool) -> None:
        """Show or hide the row, label included."""
        self.setVisible(visible)
        if self.title is not None:
            self.title.setVisible(visible)

    @property
    def value(self) -> str:
        """``"off"``, ``"translation"`` or ``"elastic"``."""
        return str(self.currentData())

    @value.setter
    def value(self, value: str) -> None:
        if value not in REGISTRATIONS:
            raise ValueError(f"registration must be one of {list(REGISTRATIONS)}: {value!r}")
        self.setCurrentIndex(list(REGISTRATIONS).index(value))


@dataclass(frozen=True)
class ChannelsResult:
    """Each channel's eSRRF result (with its decorrelation resolution) and the registration.

    Attributes
    ----------
    channels : tuple of ResolvedResult
        Channel ``c``'s result (fewer than the input's channels after Stop & keep).
    registration : RegistrationResult or None
        None when the channels were not registered.
    n_channels : int
        The input's channels.
    estimate : DriftResult or None
        Channel 0's drift as estimated in the run (None when a trace was given, or none).
    """

    channels: tuple[ResolvedResult, ...]
    registration: RegistrationResult | None
    n_channels: int
    estimate: DriftResult | None = None

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

    def summary(self) -> dict[str, Any]:
        """Each channel's facts and the registration's."""
        return {
            "channels": [c.summary() for c in self.channels],
            "n_channels": self.n_channels,
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
        ``"<name> ch<c>"``, on the input's last three axes."""
        trailing = None if geometry is None else geometry.trailing(3)
        images, others = [], []
        for c, result in enumerate(self.channels):
            colour = CHANNEL_COLORMAPS[c % MAX_CHANNELS]
            for k, (data, kwargs, kind) in enumerate(
                result.layers(f"{name} ch{c}", trailing, metadata)
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


def _quiet(start: float, stop: float, prefix: str) -> Callable[[Progress], Progress]:
    """Rescale updates into [start, stop] and drop their outputs (no per-channel stream)."""

    def transform(update: Progress) -> Progress:
        fraction = None if update.fraction is None else start + (stop - start) * update.fraction
        return dataclasses.replace(
            update, fraction=fraction, message=prefix + update.message, outputs={}
        )

    return transform


def iter_channels(
    data: Any,
    params: EsrrfParams,
    device: str,
    *,
    registration: str = "off",
    drift_shifts: np.ndarray | None = None,
    frames_per_chunk: int | None = None,
    name: str = "stack",
    pixel: tuple[float, str] | None = None,
) -> Job[ChannelsResult]:
    """eSRRF of each channel of ``data`` ``(C, T, Y, X)`` after drift correction and channel
    registration (see the module docstring); returns a :class:`ChannelsResult`."""
    from napari_gpuscope.compute.esrrf import (
        apply_registration,
        iter_esrrf,
        iter_estimate_drift,
        register_channels,
    )

    if registration not in REGISTRATIONS:
        raise ValueError(f"registration must be one of {list(REGISTRATIONS)}: {registration!r}")
    n_channels, n_frames = int(data.shape[0]), int(data.shape[1])
    estimate = drift_shifts is None and params.drift_correction
    drifts: list[np.ndarray | None] = [drift_shifts] * n_channels
    aligned_means = []
    estimates: list[DriftResult] = []
    first = 0.0
    if estimate:  # 20 % of the bar
        for c in range(n_channels):
            span = (0.2 * c / n_channels, 0.2 * (c + 1) / n_channels)
            trace = yield from mapped(
                iter_estimate_drift(
                    data[c],
                    params=params.drift_params(),
                    frames_per_chunk=frames_per_chunk,
                    name=f"{name} channel {c}",
                    device=device,
                ),
                _quiet(*span, f"channel {c} drift: "),
            )
            drifts[c] = trace.shifts
            estimates.append(trace)
            aligned_means.append(trace.aligned_mean)
        first = 0.2
    registered = None
    source = data
    if registration != "off":
        yield Progress(first, "registering the channels to channel 0...")
        images = np.stack(aligned_means) if aligned_means else data
        # compute's 64 px blocks, smaller on small frames (a block must fit the frame)
        block = int(min(64, max(16, min(int(data.shape[-2]), int(data.shape[-1])) // 2)))
        registered = register_channels(
            images, elastic=registration == "elastic", block_size=block, device=device
        )
        if registered.elastic:
            yield Progress(first, "applying the elastic registration to every frame...")
            source = apply_registration(data, registered, device=device)
        first += 0.05
    results: list[ResolvedResult] = []
    for c in range(n_channels):
        shifts = drifts[c]
        if registered is not None and not registered.elastic:
            base = np.zeros((n_frames, 2)) if shifts is None else np.asarray(shifts, np.float64)
            shifts = base + registered.shifts[c]  # a translation joins each frame's drift
        span = (first + (1 - first) * c / n_channels, first + (1 - first) * (c + 1) / n_channels)
        job = iter_esrrf(
            source[c],
            params=params,
            device=device,
            frames_per_chunk=frames_per_chunk,
            name=f"{name} channel {c}",
            drift_shifts=shifts,
        )
        result = yield from mapped(
            with_resolution(job, device, pixel), _quiet(*span, f"channel {c}: ")
        )
        results.append(result)
        if result.stopped_early:  # Stop & keep: the channels so far
            break
    return ChannelsResult(
        tuple(results), registered, n_channels, estimates[0] if estimates else None
    )
