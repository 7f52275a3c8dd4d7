"""The dock's Qt-free side of a live session (``dock/live_follow.py``): the latency's arrival
stamps, the refused frames counted apart and said in words, and why a session ended."""

from __future__ import annotations

import numpy as np

from napari_gpuscope import live
from napari_gpuscope.compute.tv import TVParams
from napari_gpuscope.dock.live_follow import COUNTERS_TIP, LiveFollow, LiveRequest
from napari_gpuscope.live._buffer import FrameBuffer

from .test_live import WAIT


def _follow(feed: live.FrameFeed) -> LiveFollow:
    return LiveFollow(feed, LiveRequest("tv", "denoise", TVParams(weight=5.0), {}), device="cpu")


def test_a_frame_processed_before_its_callback_returns_still_has_its_arrival(monkeypatch):
    # The worker processes each frame, and the dock polls, before the source's callback
    # returns: the arrival stamp must already be known then (it was taken after the callback
    # once, and the latency was missing).
    polled = []
    original = FrameBuffer.put

    def put_then_process_and_poll(buffer, frame):
        kept = original(buffer, frame)
        assert follow.session.wait_for_frames(buffer.kept, WAIT)
        polled.append(follow.poll())
        return kept

    monkeypatch.setattr(FrameBuffer, "put", put_then_process_and_poll)
    feed = live.FrameFeed()
    follow = _follow(feed)
    for value in range(3):
        feed.push(np.full((8, 8), float(value)))
    assert [status.processed for status in polled] == [1, 2, 3]
    assert all(status.image is not None for status in polled), "each poll had a new image"
    assert all(status.latency_ms is not None and status.latency_ms >= 0 for status in polled)
    assert follow.session.arrival(2) is not None and follow.session.arrival(3) is None
    follow.cancel()


def test_refused_frames_are_counted_apart_and_say_what_came_and_what_is_taken():
    feed = live.FrameFeed()
    follow = _follow(feed)
    for shape in ((8, 8), (8, 8), (9, 9)):
        feed.push(np.ones(shape))
    assert follow.session.wait(WAIT)
    status = follow.poll()
    assert status.done and (status.dropped, status.refused_frames) == (0, 1)
    assert status.describe().startswith("3 received · 2 processed · 0 dropped · 1 refused")
    head, detail = status.ending()
    assert head == "Frames refused" and "The acquisition ended" not in head
    assert detail.startswith("Frame 2 is (9, 9) float64, the first was (8, 8) float64")
    assert "one shape and dtype" in detail and "goes on" in detail
    assert "refused" in COUNTERS_TIP and f"{live.DEFAULT_CAPACITY} frames" in COUNTERS_TIP
    assert follow.stop_and_keep().image.shape == (2, 8, 8)


def test_an_acquisition_that_ends_says_so_and_nothing_else():
    feed = live.FrameFeed()
    follow = _follow(feed)
    feed.push(np.ones((8, 8)))
    feed.end()
    assert follow.session.wait(WAIT)
    assert follow.poll().ending() == ("The acquisition ended", "")
    follow.request_stop()  # never waits; the session has ended already
    follow.session.detach()
    assert follow.ended


def test_kept_layers_say_the_sources_intensity_unit():
    """A core's frames are camera counts (ADU) and no input layer says so in the viewer: the
    kept TV result names σ in ADU and its image says its unit; a layer's stated unit is
    taken; a script's frames have none, and none is invented."""
    import napari.layers

    from napari_gpuscope.dock.live_follow import source_intensity_unit
    from napari_gpuscope.provenance import PROVENANCE_KEY

    from .camera import make_core, time_series

    frames = np.random.default_rng(0).poisson(50, (2, 16, 16)).astype(np.uint16)
    core, _ = make_core(frames)
    request = LiveRequest("tv", "denoise", TVParams(), {})  # weight from the noise: σ said
    follow = LiveFollow(core, request, device="cpu")
    core.mda.run(time_series(2))
    assert follow.session.wait(WAIT)
    ((_, kwargs, _),) = follow.result_layers(follow.stop_and_keep(), "scope")
    assert kwargs["metadata"]["intensity_unit"] == "ADU"
    assert "ADU" in str(kwargs["metadata"][PROVENANCE_KEY]["result"])
    layer = napari.layers.Image(frames, metadata={"intensity_unit": "photons"})
    assert source_intensity_unit(live.LayerSource(layer)) == "photons"
    assert source_intensity_unit(live.LayerSource(napari.layers.Image(frames))) is None
    feed = live.FrameFeed()
    follow = _follow(feed)
    feed.push(frames[0])
    feed.end()
    assert follow.session.wait(WAIT)
    ((_, kwargs, _),) = follow.result_layers(follow.stop_and_keep(), "frames")
    assert "intensity_unit" not in kwargs["metadata"]
