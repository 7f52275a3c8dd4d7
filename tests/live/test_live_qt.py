"""A core whose events come through Qt (pymmcore-plus's backend when a Qt application runs, as
in napari) feeds a session as a plain core does: the GUI's event loop delivers the frames, the
session's worker processes them, and detaching leaves no connection behind."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live

from .camera import make_core, time_series
from .test_live import blinking, offline


def test_a_core_with_qt_signals_feeds_a_session_through_the_event_loop(qtbot, monkeypatch):
    from napari_gpuscope.compute import tv

    monkeypatch.setenv("PYMM_SIGNALS_BACKEND", "qt")
    stack = blinking(6)
    core, _ = make_core(stack)
    assert type(core.mda.events).__module__.endswith("_qsignals")  # Qt's signals, as in napari
    params = tv.TVParams(strength=1.0)
    session = live.attach(core, "tv", params, device="cpu")
    acquisition = threading.Thread(target=core.mda.run, args=(time_series(len(stack)),))
    acquisition.start()
    qtbot.waitUntil(lambda: session.frames_processed == len(stack), timeout=120_000)
    acquisition.join(timeout=120)
    qtbot.waitUntil(lambda: session.wait(0), timeout=120_000)
    fixed = params.replace(weight=tv.resolve_weight(stack[0], params).weight)
    expected = np.stack([offline("tv", None, frame, fixed).image for frame in stack])
    assert session.result().image.tobytes() == expected.tobytes()
    session.detach()
    # Detached: another acquisition, run in this (the GUI) thread, so that Qt would call any
    # slot still connected directly, reaches the session no more.
    core.mda.run(time_series(2))
    assert session.frames_received == len(stack)
