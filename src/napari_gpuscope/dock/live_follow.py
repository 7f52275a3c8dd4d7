"""A dock following an acquisition: a live session, its counters, rate and latency, and its
result as layers (the Qt-free side of the dock's Live part, :mod:`..widgets._live_acquisition`).

:class:`LiveFollow` attaches a method's job to a source (:func:`napari_gpuscope.live.attach`;
its buffer stamps the arrival of every frame it keeps). The view polls it on its own (main)
thread, :meth:`LiveFollow.poll`, and gets the counters, the processing rate, the image to show
in place with the latency from the arrival of the newest frame it covers to now (the moment the
view puts it in its layer), and why the session ended when it did by itself (the acquisition
finished, frames were refused, the source or the job failed: :meth:`LiveStatus.ending`). Stop
& keep and Cancel ask the session to stop (:meth:`LiveFollow.request_stop`, which never waits)
and the view keeps or discards it once :attr:`LiveFollow.ended`; never the acquisition.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_gpuscope import live
from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.dock.live_request import (
    FIT_AS_TILES_ARRIVE,
    LIVE_METHODS,
    LiveRequest,
    live_request,
)
from napari_gpuscope.dock.messages import plain_error_message, sentence
from napari_gpuscope.export.units import INTENSITY_UNIT_KEY, intensity_unit
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance

if TYPE_CHECKING:
    from napari.types import LayerDataTuple

    from napari_gpuscope.live import LiveSession

__all__ = [
    "FIT_AS_TILES_ARRIVE",
    "LIVE_METHODS",
    "LiveFollow",
    "LiveRequest",
    "LiveStatus",
    "live_request",
    "source_intensity_unit",
]

RATE_WINDOW_S = 2.0
"""Seconds of processing the rate is measured over (a steady number, still recent)."""

COUNTERS_TIP = (
    "received: frames the source delivered; processed: frames the method has processed; "
    f"dropped: frames not kept because processing fell behind (the buffer holds "
    f"{live.DEFAULT_CAPACITY} frames), or that came after the session ended; refused: frames "
    "the session could not take (another shape than the first, or not the z-stacks asked "
    "for; the status line says why); lost by the camera's buffer: frames a continuous "
    "acquisition overwrote before they were read; the processing rate; the latency from a "
    "frame's arrival to its image in the viewer"
)
"""What each counter of :meth:`LiveStatus.describe` means (the dock's tooltip)."""


@dataclass(frozen=True)
class LiveStatus:
    """The counters of a live session at one poll, and what to show.

    Attributes
    ----------
    received, processed, dropped, pending : int
        The session's counters (received = processed + dropped + pending + refused_frames).
    rate : float or None
        Frames processed per second over the last :data:`RATE_WINDOW_S` (None before two
        polls with processing between them).
    latency_ms : float or None
        From the arrival of the newest frame the shown image covers to this poll.
    image : ndarray or None
        A new image to show in place (None: nothing new since the last poll).
    done : bool
        The session has ended (the acquisition finished, or it was stopped).
    lost : int
        Frames the source lost before the session saw them (a core's overwritten buffer).
    refused_frames : int
        Frames the session could not take (counted apart from the dropped ones).
    refused : str or None
        Why they were refused, in words (what came, and what the session takes).
    source_error, job_error : str or None
        What stopped the source (a core that raised) or the job, in words.
    """

    received: int
    processed: int
    dropped: int
    pending: int
    rate: float | None
    latency_ms: float | None
    image: np.ndarray | None
    done: bool
    lost: int = 0
    refused_frames: int = 0
    refused: str | None = None
    source_error: str | None = None
    job_error: str | None = None

    def describe(self) -> str:
        """The counters in words, as the dock shows them (:data:`COUNTERS_TIP` says what
        each means).

        Examples
        --------
        >>> LiveStatus(10, 8, 1, 1, 250.0, 12.5, None, False).describe()
        '10 received · 8 processed · 1 dropped · 250 frames/s · latency 12 ms'
        >>> LiveStatus(3, 2, 0, 0, None, None, None, True, refused_frames=1).describe()
        '3 received · 2 processed · 0 dropped · 1 refused'
        """
        parts = [f"{self.received} received", f"{self.processed} processed"]
        parts.append(f"{self.dropped} dropped")
        if self.refused_frames:
            parts.append(f"{self.refused_frames} refused")
        if self.lost:
            parts.append(f"{self.lost} lost by the camera's buffer")
        if self.rate is not None:
            parts.append(f"{self.rate:.0f} frames/s")
        if self.latency_ms is not None:
            parts.append(f"latency {self.latency_ms:.0f} ms")
        return " · ".join(parts)

    def ending(self) -> tuple[str, str]:
        """Why a session that ended by itself ended: a short head, and the details in
        sentences (what came, what the session takes, whether the acquisition goes on), for
        the dock's status line.

        Examples
        --------
        >>> LiveStatus(3, 2, 0, 0, None, None, None, True, 1, refused="frame 2 is (9, 9)").ending()
        ('Frames refused', 'Frame 2 is (9, 9). The acquisition goes on without this session.')
        >>> LiveStatus(3, 3, 0, 0, None, None, None, True).ending()
        ('The acquisition ended', '')
        """
        if self.source_error is not None:
            return "The source failed", sentence(self.source_error)
        if self.job_error is not None:  # the result's error says what failed
            return "Processing failed", "The acquisition goes on without this session."
        if self.refused is not None:
            return "Frames refused", (
                f"{sentence(self.refused)} The acquisition goes on without this session."
            )
        return "The acquisition ended", ""


class LiveFollow:
    """A live session driven by a dock: attach, poll, Stop & keep or Cancel.

    Parameters
    ----------
    source : object
        What :func:`napari_gpuscope.live.attach` takes (a core, a layer, a Source).
    request : LiveRequest
        The job and its parameters.
    device : str
        The device the job runs on.
    capacity : int
        Frames the worker may fall behind before frames are dropped.

    Examples
    --------
    >>> feed = live.FrameFeed()
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> follow = LiveFollow(feed, LiveRequest("tv", "denoise", TVParams(weight=5.0), {}),
    ...                     device="cpu")
    >>> for frame in np.ones((3, 8, 8)):
    ...     feed.push(frame)
    >>> follow.session.wait_for_frames(3, 60)
    True
    >>> status = follow.poll()
    >>> status.processed, status.image.shape, status.latency_ms >= 0
    (3, (8, 8), True)
    >>> follow.stop_and_keep().image.shape
    (3, 8, 8)
    """

    def __init__(
        self,
        source: object,
        request: LiveRequest,
        *,
        device: str,
        capacity: int = live.DEFAULT_CAPACITY,
    ) -> None:
        self.request = request
        self.device = device
        self.source = live.as_source(source)
        self.started = time.perf_counter()
        self.session: LiveSession = live.attach(
            self.source,
            request.method_id,
            request.params,
            device=device,
            job=request.job_id,
            capacity=capacity,
            frames_per_stack=request.frames_per_stack,
            **request.inputs,
        )
        self._shown = 0
        self._latency: float | None = None
        self._history: deque[tuple[float, int]] = deque()

    def poll(self) -> LiveStatus:
        """The counters now, and the newest image when there is one not shown yet (call it
        from the thread that shows it: the latency is measured to this call)."""
        session, now = self.session, time.perf_counter()
        image, covered = session.latest_with_count()
        fresh = None
        if image is not None and covered > self._shown:
            fresh, self._shown = image, covered
            arrived = session.arrival(covered - 1)
            if arrived is not None:
                self._latency = (now - arrived) * 1000.0
        processed = session.frames_processed
        self._history.append((now, processed))
        while len(self._history) > 2 and now - self._history[1][0] >= RATE_WINDOW_S:
            self._history.popleft()
        (t0, p0), rate = self._history[0], None
        if now > t0 and processed > p0:
            rate = (processed - p0) / (now - t0)
        return LiveStatus(
            received=session.frames_received,
            processed=processed,
            dropped=session.frames_dropped,
            pending=session.frames_pending,
            rate=rate,
            latency_ms=self._latency,
            image=fresh,
            done=session.done,
            lost=int(getattr(self.source, "frames_lost", 0)),
            refused_frames=session.frames_refused,
            refused=session.refused,
            source_error=_plain(session.source_error),
            job_error=_plain(session.error),
        )

    def request_stop(self) -> None:
        """Ask the session to stop after the frames being processed, and disconnect it from
        its source (the acquisition goes on). Never waits for the worker: follow
        :attr:`ended`, then take :meth:`result`."""
        self.session.stop()

    @property
    def ended(self) -> bool:
        """Whether nothing of the session runs any more (after :meth:`request_stop`)."""
        return self.session.detached

    def result(self) -> Any:
        """The result over the frames processed (raises the job's error, or ValueError when
        no frame was processed)."""
        return self.session.result()

    def stop_and_keep(self) -> Any:
        """Detach, waiting for the worker (a script's Stop & keep; a dock uses
        :meth:`request_stop`), and return :meth:`result`."""
        self.session.detach()
        return self.session.result()

    def cancel(self) -> None:
        """Detach, waiting for the worker, and forget: no thread and no callback of the
        session remain."""
        self.session.detach()

    def result_layers(
        self, result: Any, input_name: str, geometry: Geometry | None = None
    ) -> list[LayerDataTuple]:
        """The result's layers, with provenance (the job's facts and the session's counters),
        as a dock's run makes them; in the source's intensity unit when it has one
        (:func:`source_intensity_unit`: TV's noise σ, the colorbars, the caption)."""
        from napari_gpuscope.compute.devices import device_label

        session = self.session
        unit = source_intensity_unit(self.source)
        if unit and hasattr(result, "with_intensity_unit"):
            result = result.with_intensity_unit(unit)
        facts = dict(result.summary())
        facts["live"] = {
            "source": session.name,
            "frames_received": session.frames_received,
            "frames_processed": session.frames_processed,
            "frames_dropped": session.frames_dropped,
            "frames_refused": session.frames_refused,
            "drop_policy": session.drop_policy,
            "capacity": session.capacity,
            **session.quality_facts(),  # a live eSRRF's track and its good-enough rule
        }
        record = build_provenance(
            self.request.method_id,
            self.request.params.to_dict(),
            device=device_label(self.device),
            input_name=input_name,
            elapsed_seconds=time.perf_counter() - self.started,
            result=facts,
        )
        layers: list[LayerDataTuple] = result.layers(input_name, geometry, {PROVENANCE_KEY: record})
        for _, kwargs, kind in layers if unit else ():
            # No input layer in the viewer says the unit of a core's frames: the images in the
            # input's unit (those that state none, as export reads them) say it themselves.
            metadata = kwargs.get("metadata")
            if kind == "image" and isinstance(metadata, dict):
                metadata.setdefault(INTENSITY_UNIT_KEY, unit)
        return layers


def source_intensity_unit(source: object) -> str | None:
    """The intensity unit of a source's frames: a pymmcore-plus core's are camera counts,
    ``"ADU"``; a layer's is the one it states (``metadata["intensity_unit"]``); a folder's or
    a script's frames have none known.

    Examples
    --------
    >>> from napari_gpuscope import live
    >>> source_intensity_unit(live.FrameFeed()) is None
    True
    """
    if isinstance(source, live.CoreSource | live.ContinuousSource):
        return "ADU"
    if isinstance(source, live.LayerSource):
        return intensity_unit(source.layer)
    return None


def _plain(error: BaseException | None) -> str | None:
    return None if error is None else plain_error_message(error)
