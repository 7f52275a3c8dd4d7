"""A pymmcore-plus core's continuous sequence acquisition (its live mode) as a source of frames.

``core.startContinuousSequenceAcquisition()`` fills the core's circular sequence buffer and
emits no event per frame (pymmcore-plus has none: napari-micromanager's live view polls
``getLastImage`` on a timer). :class:`ContinuousSource` polls the buffer on its own thread and
pops every image in order, so each frame reaches the session once. A frame the core overwrote
before it was popped (the core's buffer is circular in continuous mode) is counted in
:attr:`ContinuousSource.frames_lost` from the gaps in the images' numbers. A core that raises
while it is polled ends the session with its error (:attr:`ContinuousSource.error`) instead of
leaving it waiting for frames that will never come.
"""

from __future__ import annotations

import threading
from typing import Any

from ._sources import EndCallback, FrameCallback, join_poller

__all__ = ["DEFAULT_POLL_S", "ContinuousSource"]

DEFAULT_POLL_S = 0.001
"""Seconds the polling thread sleeps when the core's buffer is empty: a frame waits at most
about this long before it is handed on (a camera at 1,000 frames/s fills one per ms)."""


class ContinuousSource:
    """The frames of a core's continuous sequence acquisition, popped from its buffer.

    The polling thread pops ``core.popNextImageAndMD()`` while images are waiting, and sleeps
    ``poll_s`` otherwise. The session ends when an acquisition that ran has stopped
    (``core.stopSequenceAcquisition()``) and its buffer is empty; a session attached before
    the acquisition starts waits for its first frame. When the core raises, the polling ends,
    :attr:`error` holds the exception and the session ends with it (``on_end(error)``).
    :meth:`disconnect` never waits for the polling thread (a GUI may call it); :meth:`join`
    does.

    The images are popped: another consumer popping the same buffer (a script's own
    ``popNextImage`` loop) would share the frames with the session. napari-micromanager's live
    view reads ``getLastImage``, which pops nothing.

    Parameters
    ----------
    core : pymmcore_plus.CMMCorePlus
        A ``CMMCorePlus`` or ``UniMMCore``.
    poll_s : float
        Seconds to sleep when the buffer is empty.
    end_with_sequence : bool
        End the session when the acquisition stops (default). False: several acquisitions,
        until :meth:`~napari_gpuscope.live.LiveSession.finish`.

    Examples
    --------
    >>> class Core:  # what the source uses of a core: two images waiting, then stopped
    ...     images = [(1, {"ImageNumber": "0"}), (2, {"ImageNumber": "2"})]
    ...     def getRemainingImageCount(self): return len(self.images)
    ...     def popNextImageAndMD(self): return self.images.pop(0)
    ...     def isSequenceRunning(self): return False
    >>> source, got, ended = ContinuousSource(Core()), [], threading.Event()
    >>> source.connect(got.append, ended.set)
    >>> ended.wait(10), got, source.frames_lost
    (True, [1, 2], 1)
    """

    def __init__(
        self, core: Any, *, poll_s: float = DEFAULT_POLL_S, end_with_sequence: bool = True
    ) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s must be a positive number of seconds, got {poll_s!r}")
        self.core = core
        self.name = "core (continuous)"
        self.poll_s = float(poll_s)
        self.end_with_sequence = end_with_sequence
        self.frames_lost = 0
        """Frames the core overwrote in its circular buffer before they were popped."""
        self.error: Exception | None = None
        """What the core raised while it was polled (the polling then ended)."""
        self._on_frame: FrameCallback | None = None
        self._on_end: EndCallback | None = None
        # Held while a frame is handed on: once disconnect() returns, no frame reaches the
        # session (a put is a copy, so disconnect waits at most that long).
        self._handing = threading.Lock()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_number: int | None = None

    def connect(self, on_frame: FrameCallback, on_end: EndCallback) -> None:
        self._on_frame, self._on_end = on_frame, on_end
        self._quit.clear()
        self._thread = threading.Thread(
            target=self._poll, name="napari-gpuscope-live-continuous", daemon=True
        )
        self._thread.start()

    def disconnect(self) -> None:
        """Stop polling and hand on no more frames; returns without waiting for the polling
        thread to end (:meth:`join`)."""
        self._quit.set()
        with self._handing:
            self._on_frame = self._on_end = None

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the polling thread to end; True when it has (or
        never started). The session's detach calls it from its caller's thread: never from
        the polling thread itself (on_end), which is returning anyway."""
        return join_poller(self._thread, timeout)

    def expected_frames(self) -> int | None:
        return None  # continuous: until stopped

    def _poll(self) -> None:
        try:
            self._poll_until_end()
        except Exception as error:  # the core failed: the session must not wait forever
            self.error = error
            on_end = self._on_end
            if on_end is not None and not self._quit.is_set():
                on_end(error)

    def _poll_until_end(self) -> None:
        core, started = self.core, False
        while not self._quit.is_set():
            if core.getRemainingImageCount() > 0:
                started = True
                image, metadata = core.popNextImageAndMD()
                self._count_lost(metadata)
                with self._handing:
                    callback = self._on_frame
                    if callback is not None:
                        callback(image)
                continue
            if not started:
                # Until its first frame, nothing but the buffer is asked: UniMMCore's
                # isSequenceRunning(), asked from this thread while another starts the
                # acquisition (between creating its thread and starting it), drops the core's
                # reference to that thread, so the acquisition looks stopped after one frame
                # and can no longer be stopped (seen under load).
                pass
            elif core.isSequenceRunning():
                pass
            elif core.getRemainingImageCount() == 0:
                # Stopped and drained (checked in this order: a stopped camera adds nothing).
                self._last_number = None
                if self.end_with_sequence:
                    on_end = self._on_end
                    if on_end is not None:
                        on_end()
                    return
                started = False
            self._quit.wait(self.poll_s)

    def _count_lost(self, metadata: Any) -> None:
        try:
            number = int(metadata.get("ImageNumber"))
        except (AttributeError, TypeError, ValueError):
            return  # a core that does not number its images: losses cannot be seen
        last = self._last_number
        if last is not None and number > last + 1:
            self.frames_lost += number - last - 1
        self._last_number = number
