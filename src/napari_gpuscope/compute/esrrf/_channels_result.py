"""The result of eSRRF of multi-channel input (:class:`ChannelsResult`: each channel's eSRRF
result and the registration that aligned them, and their layers overlaid). The job that makes
it is :mod:`._channels`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..results import Geometry, LayerDataTuple
from ._channel_input import CHANNEL_COLORMAPS, MAX_CHANNELS
from ._drift_result import DriftResult
from ._params import EsrrfParams
from ._register import RegistrationResult

__all__ = ["ChannelsResult"]


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
        """A short status: the channels, their registration, each one's resolution (one
        line per channel would not fit a dock; :meth:`details` has them)."""
        if self.registration is None:
            registration = "not registered"
        else:
            kind = "elastic (per block) " if self.registration.elastic else ""
            registration = f"{kind}registration to channel {self.registration.reference_channel}"
        head = f"{self.n_channels} channels, {registration}"
        drift = self.drift
        if drift is not None:
            head += f", drift-corrected (up to {drift.max_drift:.2f} px)"
        if len(self.channels) < self.n_channels:
            head += f"; stopped early after {len(self.channels)} channel(s)"
        parts = []
        for c, result in enumerate(self.channels):
            measured = getattr(result, "decorrelation", None)
            if measured is not None:
                parts.append(f"{self._label(c)} {measured.short()}")
        return "; ".join([head, *parts])

    def details(self) -> str:
        """Several lines (a tooltip): the registration, then each channel's description."""
        lines = ["not registered" if self.registration is None else self.registration.describe()]
        for c, result in enumerate(self.channels):
            lines.append(f"{self._label(c)}: {result.describe()}")
            more = getattr(result, "details", None)
            if more is not None:
                lines.append(more())
        return "\n".join(lines)

    def in_units(self, pixel_size: float | None, unit: str) -> ChannelsResult:
        """The same result whose channels' resolutions are said in the input's unit
        (:meth:`EsrrfResult.in_units`)."""
        channels = tuple(
            r.in_units(pixel_size, unit) if hasattr(r, "in_units") else r for r in self.channels
        )
        return replace(self, channels=channels)

    def _label(self, c: int) -> str:
        """Channel ``c`` as a status names it: its layer's name when given, else ``ch<c>``."""
        if self.channel_names is not None and c < len(self.channel_names):
            return self.channel_names[c]
        return f"ch{c}"

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
