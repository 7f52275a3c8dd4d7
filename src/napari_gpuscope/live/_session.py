"""A live session: a source's frames, a bounded buffer, one worker thread, a method's job."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ._buffer import DROP_POLICIES, FrameBuffer
from ._methods import LiveMethod, live_method
from ._quality import PlateauRule
from ._session_quality import SessionQuality, configure_quality
from ._sources import Source, as_source

if TYPE_CHECKING:
    from ..compute._types import Device
    from ..compute.params import Params

__all__ = ["DEFAULT_CAPACITY", "LiveSession", "attach"]

DEFAULT_CAPACITY = 64
"""Frames the worker may fall behind before frames are dropped (64 frames of 2048 x 2048
uint16 are 512 MiB of host memory; of 512 x 512, 32 MiB)."""


class LiveSession(SessionQuality):
    """A method's job applied to the frames of a source while it acquires.

    Made by :func:`attach`. The source's callback copies each frame into a bounded buffer and
    returns; one worker thread runs the method on the frames kept, in order. The session ends
    when the source says the acquisition is over (a core's MDA finishes) or on :meth:`finish`
    (every frame kept is processed), :meth:`stop` (Stop & keep: the frames processed so far)
    or :meth:`detach`. A live eSRRF measures its reconstruction as it goes (:meth:`track`)
    and can say when more frames stop helping (:meth:`on_good_enough`).

    Attributes
    ----------
    method : LiveMethod
        What runs on the frames (its job spec, parameters and device).
    source : Source
        Where the frames come from.
    drop_policy : str
        ``"skip"`` (:data:`~napari_gpuscope.live.DROP_POLICIES`).
    capacity : int
        Frames the worker may fall behind before frames are dropped.
    """

    def __init__(
        self, source: Source, live: LiveMethod, *, capacity: int, drop_policy: str
    ) -> None:
        if drop_policy not in DROP_POLICIES:
            raise ValueError(
                f"drop_policy must be one of {sorted(DROP_POLICIES)}, got {drop_policy!r}"
            )
        self.source = source
        self.method = live
        self.name = source.name
        self.drop_policy = drop_policy
        self.capacity = capacity
        self._buffer = FrameBuffer(capacity, live.unit)
        self._processed = 0
        self._progress = threading.Condition()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._source_error: BaseException | None = None
        self._connected = False
        self._connect_lock = threading.Lock()
        if self.quality is not None:
            self.quality.on_good_enough(self._stop_when_good_enough)
            self._scale_from_source()
        self._worker = threading.Thread(
            target=self._work, name=f"napari-gpuscope-live-{live.job.id}", daemon=True
        )
        self._worker.start()
        self._connected = True
        expect_stacks = getattr(source, "expect_stacks", None)
        if expect_stacks is not None:
            expect_stacks(live.unit, self._buffer.refuse)
        try:
            source.connect(self._buffer.put, self._source_ended)
        except BaseException:
            self.detach()
            raise

    # -- counters -----------------------------------------------------------------------------

    @property
    def frames_received(self) -> int:
        """Frames the source delivered since the session attached."""
        return self._buffer.received

    @property
    def frames_processed(self) -> int:
        """Frames the method has processed."""
        return self._processed

    @property
    def frames_dropped(self) -> int:
        """Frames delivered and never processed: the buffer was full (the drop policy), or
        they came after the session's end (not those refused: :attr:`frames_refused`)."""
        return self._buffer.dropped

    @property
    def frames_refused(self) -> int:
        """Frames delivered and not taken because the session's intake was refused
        (:attr:`refused` says why): the frame that did not fit, and those after it."""
        return self._buffer.refused_frames

    @property
    def frames_pending(self) -> int:
        """Frames kept and not processed (yet: while running; ever: after a stop, or the
        slices of a z-stack the acquisition did not finish)."""
        return self._buffer.kept - self._processed - self._buffer.discarded

    @property
    def frames_held(self) -> int:
        """Frames held on the host, waiting for the worker (at most about ``capacity``)."""
        return self._buffer.held

    @property
    def frame_shape(self) -> tuple[int, ...] | None:
        """The frames' shape (None before the first frame is kept)."""
        return self._buffer.frame_shape

    # -- life cycle ---------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the session has ended and its result is made; False on timeout."""
        return self._done.wait(timeout)

    def wait_for_frames(self, count: int, timeout: float | None = None) -> bool:
        """Wait until ``count`` frames are processed (True), or the session ends or the
        timeout expires first (False)."""
        with self._progress:
            self._progress.wait_for(
                lambda: self._processed >= count or self._done.is_set(), timeout
            )
            return self._processed >= count

    @property
    def done(self) -> bool:
        """Whether the session has ended (its result, or its error, is ready)."""
        return self._done.is_set()

    def finish(self) -> None:
        """No more frames will come: process the frames kept, then end (a layer's acquisition
        is over; a core's session ends by itself when its MDA finishes)."""
        self._disconnect()
        self._buffer.close()

    def stop(self) -> None:
        """Stop & keep: end after the frames being processed; the result covers the frames
        processed. Frames kept and not processed stay in :attr:`frames_pending`."""
        self._stop.set()
        self._disconnect()
        self._buffer.close()

    def detach(self, timeout: float | None = 60.0) -> None:
        """Stop & keep, and wait for the worker thread (and a source's own thread) to end: no
        thread and no callback of the session stays behind. The result stays available.

        Blocks up to ``timeout`` seconds (TimeoutError after): a GUI calls :meth:`stop` and
        follows :attr:`detached` instead.
        """
        self.stop()
        self._worker.join(timeout)
        if self._worker.is_alive():
            raise TimeoutError(f"the live session's worker did not end within {timeout} s")
        if not self._source_joined(timeout):
            raise TimeoutError(f"the live source's thread did not end within {timeout} s")

    @property
    def detached(self) -> bool:
        """Whether nothing of the session runs any more: the source is disconnected, and the
        worker (and a source's own thread) have ended. Never waits: a GUI calls :meth:`stop`,
        then polls this."""
        return not self._connected and not self._worker.is_alive() and self._source_joined(0)

    def result(self) -> Any:
        """The job's result over the frames processed: the same type as the offline job's.

        While the session runs, the result so far (per-frame methods; a live eSRRF's result is
        made when the session ends). Raises the worker's error if it failed.
        """
        if self._error is not None:
            raise RuntimeError(f"the live {self.method.job.title} failed: {self._error}") from (
                self._error
            )
        if self._done.is_set():
            if self._result is None:
                raise ValueError("the live session ended before a frame was processed")
            return self._result
        partial = self.method.partial_result()
        if partial is None:
            raise ValueError("no frame has been processed yet")
        return partial

    @property
    def refused(self) -> str | None:
        """Why the session stopped taking frames before its end, in words (a frame of another
        shape; an MDA whose frames are not the z-stacks asked for); None when none was."""
        return self._buffer.refused

    @property
    def error(self) -> BaseException | None:
        """The job's error when it failed (:meth:`result` raises with it), else None."""
        return self._error

    @property
    def source_error(self) -> BaseException | None:
        """What the source raised when it failed (it then ended the session), else None."""
        return self._source_error

    def arrival(self, kept_index: int) -> float | None:
        """When kept frame ``kept_index`` arrived (``time.perf_counter``, stamped before the
        frame is kept, so known before it can be processed); None when it is not kept yet or
        long forgotten (the newest 4096 are held)."""
        return self._buffer.arrival(kept_index)

    def results(self) -> list[Any]:
        """Phase: every completed z-stack's result (``result()`` is the latest); other methods:
        ``[result()]``."""
        results = getattr(self.method, "results", None)
        return results() if results is not None else [self.result()]

    def latest(self) -> np.ndarray | None:
        """The latest output (the last processed frame, or eSRRF's running reconstruction; a
        fresh one is made at the next frame), None before the first."""
        return self.method.latest()

    def latest_with_count(self) -> tuple[np.ndarray | None, int]:
        """:meth:`latest` and the number of kept frames it covers (a dock measures the latency
        from the arrival of the last of them)."""
        return self.method.latest_with_count()

    def describe(self) -> str:
        """The counters in words (and the job's error when it failed)."""
        state = "ended" if self.done else "running"
        refused = f", {self.frames_refused} refused" if self.frames_refused else ""
        failed = "".join(
            f"; {what} failed: {type(error).__name__}: {error}"
            for what, error in (("the job", self.error), ("the source", self.source_error))
            if error is not None
        )
        return (
            f"live {self.method.job.title} on {self.name!r} ({state}): "
            f"{self.frames_received} frames received, {self.frames_processed} processed, "
            f"{self.frames_dropped} dropped ({self.drop_policy}), {self.frames_pending} pending"
            f"{refused}{failed}"
        )

    # -- internals ----------------------------------------------------------------------------

    def _source_ended(self, error: BaseException | None = None) -> None:
        # Called by the source in its own thread (a core's acquisition thread): disconnecting
        # there cannot race with the source's own emissions. A failed source ends the session
        # as a finished one does (the frames kept are processed), with its error recorded.
        if error is not None and self._source_error is None:
            self._source_error = error
        self.finish()

    def _source_joined(self, timeout: float | None) -> bool:
        # A source with a thread of its own (a continuous acquisition's poller) says whether
        # it has ended; the others have none.
        join = getattr(self.source, "join", None)
        return True if join is None else bool(join(timeout))

    def _disconnect(self) -> None:
        with self._connect_lock:
            if self._connected:
                self._connected = False
                self.source.disconnect()

    def _count(self, count: int) -> None:
        with self._progress:
            self._processed = count
            self._progress.notify_all()

    def _work(self) -> None:
        control = _SessionControl(self)
        try:
            self._result = self.method.run(self._buffer, control)
        except BaseException as error:  # reported by result()
            self._error = error
        finally:
            self._buffer.close()
            self._done.set()
            with self._progress:
                self._progress.notify_all()


class _SessionControl:
    """The session as its method sees it (:class:`~napari_gpuscope.live._methods.Control`)."""

    def __init__(self, session: LiveSession) -> None:
        self._session = session
        self.name = session.name

    def stopping(self) -> bool:
        return self._session._stop.is_set()

    def processed(self, count: int) -> None:
        self._session._count(count)

    def expected_frames(self) -> int | None:
        return self._session.source.expected_frames()


def attach(
    source: object,
    method: str,
    params: Params | Mapping[str, Any] | None = None,
    *,
    device: Device,
    job: str | None = None,
    capacity: int = DEFAULT_CAPACITY,
    drop_policy: str = "skip",
    max_frames: int | None = None,
    frames_per_stack: int | None = None,
    measure_every: int | None = None,
    good_enough: PlateauRule | bool | None = None,
    stop_when_good_enough: bool = False,
    track_drift: bool = True,
    **inputs: Any,
) -> LiveSession:
    """Attach a method's job to a source of frames while it acquires.

    Parameters
    ----------
    source : CMMCorePlus, UniMMCore, napari.layers.Image, FrameFeed or Source
        A pymmcore-plus core (its MDA's frames), a napari image layer that grows, or any
        object with ``connect(on_frame, on_end)``, ``disconnect()`` and ``expected_frames()``.
    method : str
        A registered method id: ``"tv"``, ``"flatfield"``, ``"esrrf"``, ``"phase"``.
    params : Params, mapping or None
        The job's parameters (its model, a mapping of its fields, or None for the defaults);
        validated now.
    device : str or torch.device
        The device the job runs on (a GPU; ``"cpu"`` for tests and reference runs).
    job : str, optional
        The method's job id (default: its main job); flat-field runs ``"apply"``.
    capacity : int
        Frames the worker may fall behind before the drop policy applies.
    drop_policy : str
        ``"skip"``: a frame arriving while the buffer is full is not kept (counted).
    max_frames : int, optional
        eSRRF: the most frames the job takes when the source does not say (a core's MDA does).
        Flat-field fit: the most tiles kept and fitted (at most what
        :data:`~napari_gpuscope.live.TILE_BYTES_LIMIT` holds); later tiles are refused.
    frames_per_stack : int, optional
        Slices per z-stack, when the unit of work is a z-stack (TV, flat-field; phase needs
        it): the source delivers the slices of one stack after the other (an MDA whose z axis
        is the innermost, useq's default order). A stack is kept or dropped whole.
    measure_every : int, optional
        eSRRF: measure the running reconstruction every this many frames (its decorrelation
        resolution, RSP error and noise part, :meth:`LiveSession.track`); default
        :data:`~napari_gpuscope.live.DEFAULT_MEASURE_EVERY`, 0 never.
    good_enough : PlateauRule or bool, optional
        eSRRF, off by default: say when more frames stop helping (True: :class:`PlateauRule`
        on the estimated error; VAR, TAC2: :meth:`PlateauRule.rsp`, no split halves there).
    stop_when_good_enough : bool
        eSRRF: the session stops (Stop & keep) when the rule fires; the acquisition goes on
        unless a callback stops it.
    track_drift : bool
        eSRRF: track the drift as blocks complete (:meth:`LiveSession.drift_track`; default).
        False saves its cost (about 1.3 ms a frame and 0.26 s a block at 512 x 512 on a CPU).
    **inputs
        The job's other inputs (flat-field's ``profile``).

    Returns
    -------
    LiveSession
        Running: the worker thread waits for frames, the source's callback is connected.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope import live
    >>> feed = live.FrameFeed()
    >>> session = live.attach(feed, "tv", {"weight": 5.0}, device="cpu")
    >>> for frame in np.random.default_rng(0).normal(100, 5, (3, 16, 16)):
    ...     feed.push(frame)
    >>> feed.end()
    >>> session.wait(60), session.frames_processed, session.result().image.shape
    (True, 3, (3, 16, 16))
    """
    live = live_method(
        method,
        job,
        params,
        device=device,
        inputs=inputs,
        max_frames=max_frames,
        frames_per_stack=frames_per_stack,
    )
    configure_quality(live, measure_every, good_enough, stop_when_good_enough)
    if not track_drift:
        if getattr(live, "drift", None) is None:
            raise ValueError(f"{live.job.title}: track_drift is for a live eSRRF")
        live.drift = None  # type: ignore[attr-defined]
    return LiveSession(as_source(source), live, capacity=capacity, drop_policy=drop_policy)
