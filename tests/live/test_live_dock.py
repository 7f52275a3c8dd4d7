"""A dock's Live part following a simulated acquisition (UniMMCore and the pure-Python camera,
``camera.py``) or a growing layer in napari: counters, the live layer, Stop & keep (a valid
partial result, equal to the offline job over the frames processed, with provenance), Cancel
(nothing left behind) and the session kept when the acquisition ends.

The core's events come through Qt signals here, as in napari (pymmcore-plus's backend when a Qt
application runs): the frames reach the session from the event loop that ``qtbot.waitUntil``
runs. Run under ``xvfb-run``.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live
from napari_gpuscope.provenance import PROVENANCE_KEY

from .camera import make_core, time_series
from .test_live import blinking, offline, shading_profile

WAIT_MS = 120_000  # a bound on a hung session, never a pacing


@pytest.fixture(autouse=True)
def _napari_like(monkeypatch, tmp_path):
    from napari_gpuscope.dock.settings import CONFIG_DIR_ENV

    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "config"))  # never the user's settings
    monkeypatch.setenv("PYMM_SIGNALS_BACKEND", "qt")


@pytest.fixture
def viewer(make_napari_viewer_proxy):
    return make_napari_viewer_proxy()


def _open(dock_class, viewer, qtbot):
    dock = dock_class(viewer)
    qtbot.addWidget(dock)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)  # kernel warm-up
    return dock


def _live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("napari-gpuscope-live")]


def connections(core) -> dict[str, int]:
    """How many slots each MDA signal a live session uses has (Qt's signals count them with
    ``receivers``)."""
    events = core.mda.events
    names = ("frameReady", "sequenceStarted", "sequenceFinished")
    return {name: events.receivers(getattr(events, name)) for name in names}


def _registered(core, name):
    chosen = live.register_core(core, name)
    return chosen


def _follow_mda(part, name, core, frames):
    """The dock's Live part follows ``core``'s MDA; the MDA of ``frames`` time points then
    runs in a thread of its own (as a script would start it), which is returned."""
    part.choose(f"{name}: MDA")
    assert part.start(), part.status.text()
    acquisition = threading.Thread(target=core.mda.run, args=(time_series(frames),))
    acquisition.start()
    return acquisition


def test_flatfield_dock_follows_an_mda_and_stop_and_keep_equals_the_offline_apply(
    viewer, qtbot, cpu_device
):
    from napari_gpuscope.compute.flatfield import BasicParams
    from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock

    stack = blinking(60, size=16) + np.uint16(10)
    profile = shading_profile((16, 16))
    # 20 ms a frame: the acquisition is still running when Stop & keep is pressed.
    core, camera = make_core(stack, exposure_ms=20.0)
    name = _registered(core, "flatfield scope")
    before = connections(core)
    # The job's first run in this process loads what it needs: not while the camera runs.
    offline("flatfield", "apply", stack[:1], BasicParams(), profile=profile, measure_shading=False)
    dock = _open(FlatfieldDock, viewer, qtbot)
    dock.apply_panel.set_profile(profile, "from the test")
    part = dock.live_acquisition
    acquisition = _follow_mda(part, name, core, len(stack))
    try:
        qtbot.waitUntil(lambda: part.follow.session.frames_processed >= 6, timeout=WAIT_MS)
        part.poll()  # what the timer does: the newest image into the live layer
        assert part.layer is not None and part.layer.data.shape == (16, 16)
        session = part.follow.session
        part.stop_and_keep()  # returns at once; kept once the frames being processed are done
        qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
        kept = part.kept
    finally:
        acquisition.join(timeout=120)
    live.unregister_core(core)
    assert camera.index == len(stack), "Stop & keep left the acquisition running to its end"
    n = session.frames_processed
    assert 6 <= n < len(stack)
    assert session.frames_received == n + session.frames_dropped + session.frames_pending
    expected = offline(
        "flatfield", "apply", stack[:n], BasicParams(), profile=profile, measure_shading=False
    )
    assert kept and kept[0].data.tobytes() == np.asarray(expected.image).tobytes()
    assert tuple(kept[0].axis_labels) == ("t", "y", "x")  # a time slider named "t", not "-3"
    record = kept[0].metadata[PROVENANCE_KEY]
    assert record["method"] == "flatfield" and record["input"] == name
    assert record["result"]["live"]["frames_processed"] == n
    assert part.layer is None and all(" live · " not in layer.name for layer in viewer.layers)
    assert connections(core) == before and _live_threads() == []
    assert "processed" in part.counters.text() and "Stopped: kept" in part.status.text()


def test_esrrf_dock_follows_an_mda_to_its_end_and_keeps_the_offline_result(
    viewer, qtbot, cpu_device
):
    from napari_gpuscope.dock.live_follow import live_request
    from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

    stack = blinking(24)
    core, _ = make_core(stack, exposure_ms=20.0)  # polls (every 100 ms) see it running
    name = _registered(core, "esrrf scope")
    dock = _open(EsrrfDock, viewer, qtbot)
    dock.set_param("magnification", 2)
    params = live_request("esrrf", dock.params()).params
    part = dock.live_acquisition
    part.choose(f"{name}: MDA")
    assert part.start(), part.status.text()
    shown = []  # from here: a layer the live session shows, not one start() made
    viewer.layers.events.inserted.connect(lambda event: shown.append(event.value.name))
    acquisition = threading.Thread(target=core.mda.run, args=(time_series(len(stack)),))
    acquisition.start()
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)  # kept when the MDA ends
    acquisition.join(timeout=120)
    live.unregister_core(core)
    assert any(" live · " in layer_name for layer_name in shown), "a live layer was shown"
    assert "The acquisition ended: kept" in part.status.text()
    assert "24 received · 24 processed · 0 dropped" in part.counters.text()
    expected = offline("esrrf", None, stack, params)
    result = dock.viewer.layers[next(n for n in shown if n.startswith("eSRRF · "))]
    assert result.data.tobytes() == expected.image.tobytes()
    assert result.metadata[PROVENANCE_KEY]["result"]["live"]["frames_received"] == 24
    # The eSRRF image over its widefield mean, as a run puts it (the mean, added after it,
    # hid it in napari's window).
    widefield = dock.viewer.layers[next(n for n in shown if n.startswith("widefield mean"))]
    layers = list(dock.viewer.layers)
    assert layers.index(result) > layers.index(widefield)
    assert dock.viewer.layers.selection.active == result
    assert _live_threads() == []


def test_cancel_leaves_no_thread_callback_or_layer_and_the_acquisition_goes_on(
    viewer, qtbot, cpu_device
):
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock as TVDock

    stack = blinking(30)
    core, camera = make_core(stack, exposure_ms=5.0)
    name = _registered(core, "tv scope")
    before = connections(core)
    dock = _open(TVDock, viewer, qtbot)
    layers_before = list(viewer.layers)
    part = dock.live_acquisition
    acquisition = _follow_mda(part, name, core, len(stack))
    try:
        qtbot.waitUntil(lambda: part.follow.session.frames_processed >= 3, timeout=WAIT_MS)
        part.cancel()
        qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    finally:
        acquisition.join(timeout=120)
    live.unregister_core(core)
    assert camera.index == len(stack), "Cancel left the acquisition running to its end"
    assert connections(core) == before and _live_threads() == []
    assert list(viewer.layers) == layers_before and "Cancelled" in part.status.text()
    assert not part.running and part.start_button.isEnabled()


def test_a_growing_layer_followed_by_a_dock(viewer, qtbot, cpu_device):
    from napari_gpuscope.compute import tv
    from napari_gpuscope.dock.live_follow import live_request
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock as TVDock

    stack = blinking(9, size=16)
    layer = viewer.add_image(stack[:2], name="acquiring")
    dock = _open(TVDock, viewer, qtbot)
    before = len(layer.events.data.callbacks)
    part = dock.live_acquisition
    part.choose("layer: acquiring (grows)")
    assert part.start(), part.status.text()
    for end in (4, 9):
        layer.data = stack[:end]  # what a plugin acquiring into the layer does
    qtbot.waitUntil(
        lambda: part.follow is None or part.follow.session.frames_processed == 9, timeout=WAIT_MS
    )
    assert part.running, part.status.text()
    part.poll()
    assert part.layer is not None and part.layer.data.shape == (16, 16)
    part.stop_and_keep()
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    kept = part.kept
    assert len(layer.events.data.callbacks) == before, "the session left the layer's event"
    # The weight is resolved on the first frame and held (docs/live.md, exactness).
    params = live_request("tv", dock.params()).params  # the frames' (Y, X) spacing
    assert params.spacing is None or len(params.spacing) == 2
    fixed = params.replace(weight=tv.resolve_weight(stack[0], params).weight)
    expected = np.stack([offline("tv", None, frame, fixed).image for frame in stack])
    assert kept[0].data.tobytes() == expected.tobytes()
    assert kept[0].metadata[PROVENANCE_KEY]["input"] == "acquiring"


def test_continuous_acquisition_followed_by_a_dock(viewer, qtbot, cpu_device):
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock as TVDock

    stack = blinking(5)
    core, _ = make_core(stack, exposure_ms=2.0)
    name = _registered(core, "live scope")
    dock = _open(TVDock, viewer, qtbot)
    part = dock.live_acquisition
    part.choose(f"{name}: continuous acquisition")
    assert part.start(), part.status.text()
    core.startContinuousSequenceAcquisition(0)
    qtbot.waitUntil(lambda: part.follow.session.frames_processed >= 5, timeout=WAIT_MS)
    core.stopSequenceAcquisition()
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    live.unregister_core(core)
    assert "The acquisition ended: kept" in part.status.text()
    assert _live_threads() == []


def test_a_dock_whose_method_cannot_run_live_says_so(viewer, qtbot, cpu_device):
    from napari_gpuscope.dock.live_follow import live_request

    with pytest.raises(ValueError, match="profile"):
        from napari_gpuscope.compute.flatfield import BasicParams

        live_request("flatfield", BasicParams())
    with pytest.raises(ValueError, match="does not run live"):
        live_request("fake", None)  # type: ignore[arg-type]


# -- what the dock says when a session ends, and that it never blocks -----------------------------


def test_frames_refused_are_said_and_counted_apart_from_dropped(viewer, qtbot, cpu_device):
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock as TVDock

    stack = blinking(3, size=16)
    layer = viewer.add_image(stack[:2], name="acquiring")
    dock = _open(TVDock, viewer, qtbot)
    part = dock.live_acquisition
    part.choose("layer: acquiring (grows)")
    assert part.start(), part.status.text()
    qtbot.waitUntil(lambda: part.follow.session.frames_processed == 2, timeout=WAIT_MS)
    layer.data = stack[:, :15, :15]  # frame 2 arrives cropped (the camera's region changed)
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    status, counters = part.status.text(), part.counters.text()
    assert "The acquisition ended" not in status
    assert status.startswith("Frames refused: kept"), status
    assert "Frame 2 is (15, 15) uint16, the first was (16, 16) uint16" in status
    assert "one shape and dtype" in status and "goes on" in status
    assert counters.startswith("3 received · 2 processed · 0 dropped · 1 refused"), counters
    assert part.kept and part.kept[0].data.shape == (2, 16, 16)
    assert _live_threads() == []


def test_phase_with_the_wrong_slices_per_stack_is_refused_at_the_mda_start_in_words(
    viewer, qtbot, cpu_device
):
    from napari_gpuscope.widgets.phase.dock import PhaseDock

    from .camera import z_stacks

    core, camera = make_core(blinking(10, size=16), exposure_ms=5.0)
    name = _registered(core, "phase scope")
    dock = _open(PhaseDock, viewer, qtbot)
    part = dock.live_acquisition
    part.slices.setValue(4)  # the MDA's stacks have 5 slices
    part.choose(f"{name}: MDA")
    assert part.start(), part.status.text()
    acquisition = threading.Thread(target=core.mda.run, args=(z_stacks(2, 5),))
    acquisition.start()
    try:
        qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    finally:
        acquisition.join(timeout=120)
    live.unregister_core(core)
    status, counters = part.status.text(), part.counters.text()
    assert status.startswith("Frames refused: nothing kept"), status
    assert "not z-stacks of 4 slices" in status and "must be its 5 z positions" in status
    assert "goes on" in status and "The acquisition ended" not in status
    # Every frame that reached the session before the dock let it go was refused, none dropped.
    assert re.match(r"(\d+) received · 0 processed · 0 dropped( · \1 refused)?$", counters), (
        counters
    )
    assert camera.index == 10, "the MDA acquired every frame"
    assert _live_threads() == []


def _blocking_tv(monkeypatch, block_at: int):
    """TV's live processing, with frame ``block_at`` held until the returned event is set (a
    slow job); the other event says the worker is holding it."""
    from napari_gpuscope.live._per_frame import LiveTV

    entered, release = threading.Event(), threading.Event()
    original, seen = LiveTV.process, []

    def process(self, frame):
        seen.append(frame)
        if len(seen) == block_at:
            entered.set()
            assert release.wait(WAIT_MS / 1000)
        return original(self, frame)

    monkeypatch.setattr(LiveTV, "process", process)
    return entered, release


def _follow_layer(viewer, qtbot, stack):
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock as TVDock

    viewer.add_image(stack, name="acquiring")
    dock = _open(TVDock, viewer, qtbot)
    part = dock.live_acquisition
    part.choose("layer: acquiring (grows)")
    assert part.start(), part.status.text()
    return part


def test_stop_and_keep_returns_while_the_worker_is_busy_and_keeps_once_it_is_done(
    viewer, qtbot, cpu_device, monkeypatch
):
    entered, release = _blocking_tv(monkeypatch, block_at=2)
    stack = blinking(4, size=16)
    part = _follow_layer(viewer, qtbot, stack)
    assert entered.wait(WAIT_MS / 1000)
    part.stop_button.click()  # a Qt slot: returns while frame 2 is still being processed
    assert not release.is_set() and part.running and part.stopping
    assert part.status.text() == "Stopped: finishing the frames being processed..."
    assert not part.stop_button.isEnabled() and not part.cancel_button.isEnabled()
    release.set()
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    assert part.status.text().startswith("Stopped: kept"), part.status.text()
    assert "The acquisition goes on." in part.status.text()
    assert part.kept and part.kept[0].data.shape == (2, 16, 16)  # the frame in hand finished
    assert _live_threads() == [] and part.start_button.isEnabled()


def test_a_worker_that_never_finishes_its_frame_is_let_go_with_words(
    viewer, qtbot, cpu_device, monkeypatch
):
    from napari_gpuscope.widgets import _live_acquisition

    monkeypatch.setattr(_live_acquisition, "GIVE_UP_S", 0.0)  # no waiting for it at all
    entered, release = _blocking_tv(monkeypatch, block_at=1)
    part = _follow_layer(viewer, qtbot, blinking(2, size=16))
    assert entered.wait(WAIT_MS / 1000)
    session = part.follow.session
    part.stop_and_keep()
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    assert "nothing kept (still processing a frame after 0 s)" in part.status.text()
    assert part.layer is None and part.kept == []
    release.set()  # the worker, disconnected, ends by itself
    session.detach(WAIT_MS / 1000)
    assert _live_threads() == []


def test_a_continuous_acquisition_whose_core_fails_ends_with_the_error_shown(
    viewer, qtbot, cpu_device, monkeypatch
):
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock as TVDock

    stack = blinking(5)
    core, _ = make_core(stack, exposure_ms=2.0)
    popped, pop = [], core.popNextImageAndMD

    def pop_then_fail(*args):
        if len(popped) == 3:
            raise RuntimeError("camera adapter: buffer read failed")
        popped.append(1)
        return pop(*args)

    monkeypatch.setattr(core, "popNextImageAndMD", pop_then_fail)
    name = _registered(core, "failing scope")
    dock = _open(TVDock, viewer, qtbot)
    part = dock.live_acquisition
    part.choose(f"{name}: continuous acquisition")
    assert part.start(), part.status.text()
    core.startContinuousSequenceAcquisition(0)
    try:
        qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    finally:
        core.stopSequenceAcquisition()
        live.unregister_core(core)
    status = part.status.text()
    assert status.startswith("The source failed: kept"), status
    assert "Camera adapter: buffer read failed" in status
    assert part.counters.text().startswith("3 received · 3 processed · 0 dropped")
    assert part.kept and part.kept[0].data.shape == (3, *stack.shape[1:])
    assert _live_threads() == []


def test_closing_the_dock_mid_frame_lets_the_session_go_at_once(
    viewer, qtbot, cpu_device, monkeypatch
):
    entered, release = _blocking_tv(monkeypatch, block_at=1)
    part = _follow_layer(viewer, qtbot, blinking(2, size=16))
    assert entered.wait(WAIT_MS / 1000)
    session = part.follow.session
    part.release()  # what the dock's close does
    assert not part.running and not release.is_set()
    assert part.status.text() == "Cancelled: nothing kept. The acquisition goes on."
    release.set()
    session.detach(WAIT_MS / 1000)
    assert _live_threads() == []
