"""The bounded frame buffer between a source's callback and the session's worker.

A source's callback (the acquisition's thread, or napari's) hands each frame to
:meth:`FrameBuffer.put`, which copies it and returns at once: it never waits for the worker.
When the buffer already holds ``capacity`` frames that the worker has not taken, the frame is
not kept and is counted as dropped (the declared policy, :data:`DROP_POLICIES`). The worker
reads frames by their index among the frames kept (:meth:`wait_for`, :meth:`take`) and
releases them once processed (:meth:`release`), so the host memory held is at most
``capacity`` frames (plus the ones the worker is processing) whatever the acquisition's length.
A frame the session's method cannot take (another shape than the first) is refused: counted
apart from the dropped ones, with the reason in words (:attr:`FrameBuffer.refused`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np

__all__ = ["ARRIVALS_KEPT", "DROP_POLICIES", "FrameBuffer"]

ARRIVALS_KEPT = 4096
"""Arrival stamps held (the newest kept frames'): a dock's latency reads the newest, and the
memory stays bounded whatever the acquisition's length."""

DROP_POLICIES = {
    "skip": (
        "a frame that arrives while the buffer is full is not kept (counted in frames_dropped); "
        "with z-stacks as units (frames_per_stack), a stack that does not fit whole when its "
        "first frame arrives is not kept, none of its frames; the frames kept are processed in "
        "their order, so the result is that of the frames (or stacks) kept"
    ),
}
"""What happens to a frame when the worker has fallen ``capacity`` frames behind."""


class FrameBuffer:
    """Frames kept in arrival order, at most ``capacity`` of them not yet released.

    Parameters
    ----------
    capacity : int
        Frames the worker may fall behind before frames are dropped.
    unit : int
        Frames per unit of work (a z-stack): a unit is kept whole or dropped whole; the
        source delivers units one after the other, frame by frame. At most ``capacity``.

    Examples
    --------
    >>> buffer = FrameBuffer(2)
    >>> [buffer.put(np.full((2, 2), i)) for i in range(3)]
    [True, True, False]
    >>> buffer.received, buffer.kept, buffer.dropped, buffer.refused_frames
    (3, 2, 1, 0)
    >>> buffer.take(0, 2)[:, 0, 0].tolist()
    [0, 1]
    """

    def __init__(self, capacity: int, unit: int = 1) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer (frames), got {capacity!r}")
        if isinstance(unit, bool) or not isinstance(unit, int) or not 1 <= unit <= capacity:
            raise ValueError(
                f"frames per stack must be an integer from 1 to the capacity ({capacity}), "
                f"got {unit!r}"
            )
        self.capacity = capacity
        self.unit = unit
        self._dropping_unit = False
        self._frames: dict[int, np.ndarray] = {}
        self._condition = threading.Condition()
        self._received = 0
        self._kept = 0
        self._released = 0
        self._closed = False
        self._shape: tuple[int, ...] | None = None
        self._dtype: np.dtype[Any] | None = None
        self.refused: str | None = None
        self._refused_frames = 0
        self._discarded = 0  # kept, then refused by the worker (a live fit's tiles past its limit)
        self._arrivals: deque[float] = deque(maxlen=ARRIVALS_KEPT)

    # -- the source's side ------------------------------------------------------------------

    def put(self, frame: Any) -> bool:
        """Copy ``frame`` in (True), or count it as dropped (False): never waits.

        A frame of another shape or dtype than the first one is refused: the session's method
        cannot take it; the buffer closes, :attr:`refused` says why, and it and the frames
        after it are counted in :attr:`refused_frames` (not as dropped).
        """
        # Stamped before the copy (the frame has arrived), stored with the frame under the
        # lock: the worker can never process a frame whose arrival is not known yet.
        arrived = time.perf_counter()
        with self._condition:
            position = self._received % self.unit
            self._received += 1
            if position == 0:
                # A unit's first frame decides for the whole unit: room for all of it, or none.
                self._dropping_unit = self._kept - self._released + self.unit > self.capacity
            if self._closed:
                if self.refused is not None:
                    self._refused_frames += 1
                return False
            if self._dropping_unit:
                return False
            # The callback's buffer is reused after it returns. Read-only and C-ordered: take()
            # hands a per-frame method this very array, so nothing may write to it.
            array = np.array(frame, copy=True, order="C")
            array.setflags(write=False)
            if self._shape is None:
                self._shape, self._dtype = array.shape, array.dtype
            elif array.shape != self._shape or array.dtype != self._dtype:
                self.refused = (
                    f"frame {self._received - 1} is {array.shape} {array.dtype}, the first was "
                    f"{self._shape} {self._dtype}: a live session takes frames of one shape and "
                    "dtype (did the camera's region, binning or bit depth change?); start a new "
                    "session for the new frames"
                )
                self._refused_frames += 1
                self._closed = True
                self._condition.notify_all()
                return False
            self._frames[self._kept] = array
            self._arrivals.append(arrived)
            self._kept += 1
            self._condition.notify_all()
            return True

    def refuse(self, reason: str, discarded: int = 0) -> None:
        """Take no more frames, for ``reason`` (:attr:`refused`); the worker finishes with the
        frames kept, and frames delivered later are counted in :attr:`refused_frames`.
        ``discarded``: frames already kept that the worker refuses too (counted as refused,
        not as pending)."""
        with self._condition:
            self._discarded += discarded
            if self.refused is None:
                self.refused = reason
            self._closed = True
            self._condition.notify_all()

    def close(self) -> None:
        """No more frames: the worker finishes with the frames kept; later frames are dropped."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    # -- the worker's side ------------------------------------------------------------------

    def wait_for(self, count: int, timeout: float | None = None) -> bool:
        """Wait until ``count`` frames have been kept (True) or the buffer is closed with
        fewer (False). With ``timeout``, False also when it expires first."""
        with self._condition:
            self._condition.wait_for(lambda: self._kept >= count or self._closed, timeout)
            return self._kept >= count

    def take(self, start: int, stop: int) -> np.ndarray:
        """Frames ``start:stop`` (kept indices) as one array, waiting for them (one frame: a
        view of the buffer's own copy, which nothing writes to; the caller only reads it).

        A frame the buffer will never hold (closed first) reads as zeros: only a read ahead of
        the session's end asks for one, and its frames are never used.
        """
        with self._condition:
            self._condition.wait_for(lambda: self._kept >= stop or self._closed)
            assert self._shape is not None and self._dtype is not None
            if stop - start == 1 and start < self._kept:  # one frame (a per-frame method's)
                return self._kept_frame(start)[None]  # the buffer's own copy: never written to
            out = np.zeros((stop - start, *self._shape), self._dtype)
            for index in range(start, min(stop, self._kept)):
                out[index - start] = self._kept_frame(index)
            return out

    def _kept_frame(self, index: int) -> np.ndarray:
        frame = self._frames.get(index)
        if frame is None:
            raise IndexError(f"frame {index} was released before it was read")
        return frame

    def release(self, below: int) -> None:
        """Forget the frames of index below ``below``: they are processed."""
        with self._condition:
            for index in range(self._released, min(below, self._kept)):
                self._frames.pop(index, None)
            self._released = max(self._released, min(below, self._kept))

    # -- facts ------------------------------------------------------------------------------

    @property
    def received(self) -> int:
        """Frames the source delivered (kept or dropped)."""
        return self._received

    @property
    def kept(self) -> int:
        """Frames kept for processing."""
        return self._kept

    @property
    def dropped(self) -> int:
        """Frames delivered and not kept: the drop policy, or after the buffer closed (not
        those refused)."""
        return self._received - self._kept - self._refused_frames

    @property
    def refused_frames(self) -> int:
        """Frames refused (:attr:`refused`): the frame that did not fit and those after it,
        and kept frames the worker refused (:attr:`discarded`)."""
        return self._refused_frames + self._discarded

    @property
    def discarded(self) -> int:
        """Kept frames the worker refused (never to be processed)."""
        return self._discarded

    def arrival(self, kept_index: int) -> float | None:
        """When kept frame ``kept_index`` arrived (``time.perf_counter``; None: not kept yet,
        or older than the last :data:`ARRIVALS_KEPT`).

        Examples
        --------
        >>> buffer = FrameBuffer(2)
        >>> buffer.put(np.zeros((2, 2))), buffer.arrival(0) is not None, buffer.arrival(1)
        (True, True, None)
        """
        with self._condition:
            offset = kept_index - (self._kept - len(self._arrivals))
            if 0 <= offset < len(self._arrivals):
                return self._arrivals[offset]
        return None

    @property
    def held(self) -> int:
        """Frames held on the host now (at most ``capacity`` not yet released)."""
        return len(self._frames)

    @property
    def closed(self) -> bool:
        """Whether the buffer takes no more frames."""
        return self._closed

    @property
    def frame_shape(self) -> tuple[int, ...] | None:
        """The frames' shape (None before the first)."""
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The frames' dtype (None before the first)."""
        return self._dtype
