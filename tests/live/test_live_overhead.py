"""The per-frame work of a live eSRRF outside the job (issue 28 item 8): the drift track's and
the widefield sum's host work (a conversion, an upload and a device sync per frame for the
drift) is done for a batch of frames at a time, at every drift block's end and every
measurement, with the same sums in the same order.

Nothing is timed: the calls are counted with patched methods, and the track, the measured
frames and the reconstruction are compared with their independent references (a drift track fed
frame by frame, the offline job).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live
from napari_gpuscope.compute import esrrf
from napari_gpuscope.live import _live_esrrf
from napari_gpuscope.live._live_drift import LiveDriftTrack

from .test_live import WAIT, blinking, offline

FRAMES, BLOCK, EVERY = 40, 20, 10


class _Calls:
    """Wraps a method, counting its calls."""

    def __init__(self, cls, name):
        self.real, self.count = getattr(cls, name), 0
        counter = self

        def counted(self, *args, **kwargs):
            counter.count += 1
            return counter.real(self, *args, **kwargs)

        self.wrapper = counted


def test_a_live_esrrf_does_its_host_work_in_batches_with_the_same_results(monkeypatch):
    stack = blinking(FRAMES, size=24, seed=3)
    adds = _Calls(LiveDriftTrack, "add")
    folds = _Calls(_live_esrrf._GrowingStack, "fold")
    monkeypatch.setattr(LiveDriftTrack, "add", adds.wrapper)
    monkeypatch.setattr(_live_esrrf._GrowingStack, "fold", folds.wrapper)
    params = esrrf.EsrrfParams(magnification=2, drift_time_averaging=BLOCK)
    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", params, device="cpu", measure_every=EVERY, capacity=64)
    session.quality.max_share = None  # every measurement due, whatever this CPU's load
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT) and session.frames_processed == FRAMES
    monkeypatch.undo()
    batches = FRAMES // _live_esrrf.HOST_BATCH
    # Once per frame before (40 calls each); now per batch, block end and measurement.
    assert adds.count <= batches + FRAMES // BLOCK
    assert folds.count <= batches + FRAMES // EVERY
    assert adds.count < FRAMES / 2 and folds.count < FRAMES / 2
    reference = LiveDriftTrack(BLOCK, max_drift=None, device="cpu")
    for frame in stack:
        reference.add(frame[None])
    track = session.drift_track()
    assert len(track.centres) == FRAMES // BLOCK
    assert track.shifts.tobytes() == reference.track().shifts.tobytes()
    points = session.track()
    assert [p.frames for p in points] == list(range(EVERY, FRAMES + 1, EVERY))
    expected = offline("esrrf", None, stack, esrrf.EsrrfParams(magnification=2))
    assert session.result().image.tobytes() == expected.image.tobytes()


def test_the_widefield_measured_is_the_mean_of_the_frames_so_far(monkeypatch):
    """The batched sums hold every frame once, in order: each measurement's widefield is the
    NumPy mean of the frames up to it (a rolling session: of its time point's frames)."""
    stack = blinking(30, size=16, seed=4)
    params = esrrf.EsrrfParams(magnification=2, frames_per_timepoint=15)
    seen = []

    def measure(image, widefield, magnification, *, frames, timepoint, device, halves):
        seen.append((timepoint, frames, widefield.copy()))
        raise ValueError("recorded, not measured")

    monkeypatch.setattr(_live_esrrf, "measure_quality", measure)
    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", params, device="cpu", measure_every=5, capacity=64)
    session.quality.max_share = None
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT)
    assert [(t, n) for t, n, _ in seen] == [(0, 5), (0, 10), (0, 15), (1, 5), (1, 10), (1, 15)]
    for timepoint, frames, widefield in seen:
        first = 15 * timepoint
        mean = stack[first : first + frames].astype(np.float64).sum(axis=0) / frames
        np.testing.assert_array_equal(widefield, mean)  # integers: exact sums in float64


def test_a_single_frame_is_handed_on_without_a_second_copy():
    """A per-frame method takes its frame as a view of the buffer's own copy (made when the
    frame arrived): no frame-sized allocation and copy per frame. Ranges stay one new array."""
    from napari_gpuscope.live._buffer import FrameBuffer

    frames = np.arange(3 * 4 * 5, dtype=np.uint16).reshape(3, 4, 5)
    buffer = FrameBuffer(4)
    for frame in frames:
        buffer.put(frame)
    first, again = buffer.take(0, 1), buffer.take(0, 1)
    assert np.shares_memory(first, again) and not np.shares_memory(first, frames)
    np.testing.assert_array_equal(first, frames[:1])
    both = buffer.take(1, 3)
    assert not np.shares_memory(both, buffer.take(1, 2))
    np.testing.assert_array_equal(both, frames[1:])
    buffer.release(1)
    np.testing.assert_array_equal(first, frames[:1])  # still the frame once released
    with pytest.raises(IndexError, match="released"):
        buffer.take(0, 1)


def test_a_frame_handed_on_is_read_only_and_c_ordered():
    """take() hands a per-frame method the buffer's own copy: nothing may write to it, and a
    Fortran-ordered camera frame arrives C-ordered like every other."""
    buffer = live.FrameBuffer(4)
    frame = np.asfortranarray(np.arange(12, dtype=np.uint16).reshape(3, 4))
    assert buffer.put(frame)
    taken = buffer.take(0, 1)
    assert taken[0].flags.c_contiguous and not taken.flags.writeable
    assert np.array_equal(taken[0], frame)
    frame[0, 0] = 99  # the caller's buffer reused: the copy is unchanged
    assert taken[0, 0, 0] == 0
