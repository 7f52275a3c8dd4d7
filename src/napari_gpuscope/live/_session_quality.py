"""What a live session says of its reconstruction's quality (a live eSRRF's quality track,
:mod:`._quality`) and the "good enough" event a script acts on; a part of
:class:`~napari_gpuscope.live.LiveSession`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._quality import GoodEnough, PlateauRule, QualityPoint, QualityTrack

if TYPE_CHECKING:
    from ._live_drift import DriftTrack
    from ._live_method import LiveMethod

__all__ = ["SessionQuality", "configure_quality"]


def configure_quality(
    live: LiveMethod,
    measure_every: int | None,
    good_enough: PlateauRule | bool | None,
    stop_when_good_enough: bool,
) -> None:
    """Set a live method's quality track before its session starts (:func:`attach`'s
    ``measure_every``, ``good_enough`` and ``stop_when_good_enough``)."""
    track: QualityTrack | None = getattr(live, "quality", None)
    asked = measure_every is not None or good_enough not in (None, False)
    if track is None:
        if asked or stop_when_good_enough:
            raise ValueError(
                f"{live.job.title}: measure_every and good_enough are for a live eSRRF (its "
                "quality track); this method has none"
            )
        return
    if measure_every is not None:
        live.quality = track = QualityTrack(
            measure_every, track.magnification, split_half=track.split_half
        )
    if good_enough is True:
        rule: PlateauRule | None = track.default_rule()
    elif good_enough is None or good_enough is False:
        rule = None
    elif isinstance(good_enough, PlateauRule):
        rule = good_enough
    else:
        raise TypeError(
            f"good_enough must be True, False, None or a live.PlateauRule, got {good_enough!r}"
        )
    if rule is not None and track.every == 0:
        raise ValueError("good_enough reads the quality track: measure_every must be > 0")
    if stop_when_good_enough and rule is None:
        raise ValueError("stop_when_good_enough needs a rule: give good_enough=True or a rule")
    track.watch(rule, stop=stop_when_good_enough)


class SessionQuality:
    """The quality track of a session's method (a live eSRRF's), None for other methods."""

    method: LiveMethod
    source: object
    pixel_size: float | None = None
    """The input's pixel size for :meth:`track_table` (a core's ``getPixelSizeUm`` when it
    has one, else None: :meth:`set_scale`)."""
    unit: str = ""

    def set_scale(self, pixel_size: float | None, unit: str = "µm") -> None:
        """The frames' pixel size and its unit, for the resolutions in :meth:`track_table`."""
        valid = pixel_size is not None and math.isfinite(pixel_size) and pixel_size > 0
        self.pixel_size, self.unit = (float(pixel_size), unit) if valid else (None, "")

    def _scale_from_source(self) -> None:
        core = getattr(self.source, "core", None)
        try:
            pixel = float(core.getPixelSizeUm()) if core is not None else 0.0
        except Exception:  # a core without a pixel size configuration
            pixel = 0.0
        self.set_scale(pixel if pixel > 0 else None)

    def stop(self) -> None:  # the session's
        raise NotImplementedError

    @property
    def quality(self) -> QualityTrack | None:
        """The live eSRRF's quality track (None for other methods): its reconstruction
        measured every ``quality.every`` frames (:class:`~._quality.QualityTrack`)."""
        return getattr(self.method, "quality", None)

    def track(self) -> list[QualityPoint]:
        """The measurements so far, oldest first (empty for a method without a track). Safe
        from any thread."""
        quality = self.quality
        return [] if quality is None else quality.points()

    def track_table(self) -> list[dict[str, Any]]:
        """The track as rows: ``frames``, ``timepoint``, ``resolution_px``, ``resolution`` (in
        :attr:`unit`; None without a pixel size or when the finding says there is none),
        ``unit``, ``finding``, ``rsp_error``, ``noise``. Safe from any thread.

        Examples
        --------
        >>> import numpy as np
        >>> from napari_gpuscope import live
        >>> feed = live.FrameFeed()
        >>> session = live.attach(feed, "esrrf", {"magnification": 2}, device="cpu",
        ...                       measure_every=10)
        >>> session.set_scale(0.1, "µm")
        >>> for frame in np.random.default_rng(0).poisson(100, (10, 32, 32)).astype("uint16"):
        ...     feed.push(frame)
        >>> feed.end()
        >>> session.wait(60)
        True
        >>> row = session.track_table()[0]  # noise: no resolution, the finding says why
        >>> row["frames"], row["unit"], row["resolution"], row["finding"] != ""
        (10, 'µm', None, True)
        """
        quality = self.quality
        m = 1 if quality is None else quality.magnification
        return [
            {
                "frames": p.frames,
                "timepoint": p.timepoint,
                "resolution_px": p.resolution_px,
                "resolution": p.resolution(self.pixel_size, m),
                "unit": self.unit,
                "finding": p.finding,
                "rsp_error": p.rsp_error,
                "noise": p.noise,
            }
            for p in self.track()
        ]

    @property
    def good_enough(self) -> GoodEnough | None:
        """When more frames stopped helping (the rule fired), None before or without a rule."""
        quality = self.quality
        return None if quality is None else quality.good_enough

    def say_when_good_enough(self, rule: PlateauRule | None = None, *, stop: bool = False) -> None:
        """Apply the plateau rule (default: the track's :meth:`~.QualityTrack.default_rule`)
        to the track from now on;
        ``stop``: the session stops (Stop & keep) when it fires. The acquisition goes on
        either way: a script stops it in :meth:`on_good_enough`'s callback."""
        if self.quality is None:
            raise ValueError(f"{self.method.job.title}: only a live eSRRF has a quality track")
        configure_quality(self.method, None, rule or True, stop)

    def on_good_enough(self, callback: Callable[[GoodEnough], None]) -> None:
        """Call ``callback(good_enough)`` once when the rule fires, in the session's worker
        thread (at once if it has fired already); what it raises is kept in
        ``quality.callback_errors``, never stops the processing.

        Examples
        --------
        Stop the MDA when more frames stop helping (a script's acquisition)::

            session = live.attach(core, "esrrf", params, device="cuda:0", good_enough=True)
            session.on_good_enough(lambda fired: core.mda.cancel())
            core.run_mda(sequence)
            session.wait()
            print(session.good_enough.describe())  # "good enough at 60 frames (...)"
        """
        quality = self.quality
        if quality is None:
            raise ValueError(f"{self.method.job.title}: only a live eSRRF has a quality track")
        quality.on_good_enough(callback)

    def drift_track(self) -> DriftTrack | None:
        """A live eSRRF's drift so far (None for other methods): each completed block of
        frames' shift from the first block (:class:`~._live_drift.DriftTrack`). Safe from any
        thread."""
        tracker = getattr(self.method, "drift", None)
        return None if tracker is None else tracker.track()

    def quality_facts(self) -> dict[str, Any]:
        """The track, the rule and when it fired, and the drift track, JSON-able (for
        ``result.live`` in the provenance); empty without a track."""
        quality = self.quality
        if quality is None:
            return {}
        facts: dict[str, Any] = {"quality": quality.summary()}
        drift = self.drift_track()
        if drift is not None:
            facts["drift"] = drift.summary()
            error = getattr(self.method, "drift_error", None)
            if error:
                facts["drift"]["stopped"] = error
        return facts

    def _stop_when_good_enough(self, fired: GoodEnough) -> None:
        quality = self.quality
        if quality is not None and quality.stop_when_good_enough:
            self.stop()
