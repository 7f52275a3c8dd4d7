"""Every dock's public surface (run, is_running, stop, params, set_param, input_layer) and its
one runner: a second job is refused with the reason in the status line, never run beside the
first."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from napari_gpuscope.compute.jobs import Progress, is_stop
from napari_gpuscope.dock.jobs import JobHandlers, JobRefused


@pytest.fixture
def image(viewer):
    return viewer.add_image(np.arange(48, dtype=np.float32).reshape(6, 8) + 1, name="cells")


def _finish(dock, qtbot, timeout=20_000):
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=timeout)


def _side_job(gate: threading.Event, log: list[str]):
    """A side job that waits after its first update until ``gate`` is set; honours Stop & keep
    (read at its next update)."""
    log.append("started")
    try:
        yield Progress(0.5, "half way")
        gate.wait(timeout=10)
        command = yield Progress(0.9, "nearly done")
        if is_stop(command):
            log.append("stopped early")
        return "side result"
    finally:
        log.append("closed")


def test_params_set_param_and_input_layer(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    other = viewer.add_image(np.ones((4, 4), np.float32), name="other")
    assert dock.input_layer == other  # follows the newest layer (a proxy of it)
    dock.input_layer = image
    assert dock.input_layer == image
    assert dock.model.input_layer is dock.input.layer  # the controller holds what the picker shows
    dock.set_param("factor", 3.5)
    dock.set_param("steps", 7)  # an advanced field
    assert (dock.params().factor, dock.params().steps) == (3.5, 7)
    assert dock.model.params == dock.params() and dock.model.params_error is None
    with pytest.raises(KeyError, match="no control"):
        dock.set_param("weight", 1.0)


def test_run_refuses_a_second_run_and_stop_keeps_the_result(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    assert not dock.is_running() and dock.stop() is False  # nothing to stop
    dock.gate = threading.Event()
    assert dock.run() is True and dock.is_running()
    assert dock.run() is False
    assert "already running on 'cells'" in dock.panel.status.text()
    qtbot.waitUntil(lambda: "Fake running · cells" in viewer.layers)
    assert dock.stop() is True
    assert "result so far will be kept" in dock.panel.status.text()
    dock.gate.set()
    _finish(dock, qtbot)
    assert viewer.layers[-1].metadata["napari_gpuscope"]["result"]["stopped_early"] is True
    assert len([s for s in dock.starts if not s["preview"]]) == 1


def test_one_runner_side_jobs_and_runs_refuse_each_other(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    gate, log, seen = threading.Event(), [], {}
    handlers = JobHandlers(
        succeeded=lambda result, elapsed: seen.setdefault("result", result),
        progressed=lambda update: seen.setdefault("progress", update.message),
        ended=lambda: seen.setdefault("ended", True),
    )
    dock.start_job(
        "sweep", _side_job(gate, log), title="The sweep", description="sweep", handlers=handlers
    )
    assert dock.runner.tag == "sweep" and dock.is_running()

    # the run waits for nothing: it is refused, in words, and nothing of it starts
    assert dock.run() is False
    assert dock.panel.status.text() == (
        "The sweep is running; start it when it has finished (Escape cancels it)."
    )
    assert not dock.panel.run_button.isEnabled()
    # a second side job is refused as well, and its generator is closed unstarted
    second: list[str] = []
    with pytest.raises(JobRefused, match="already running"):
        dock.start_job(
            "sweep", _side_job(gate, second), title="The sweep", description="2", handlers=handlers
        )
    assert second == []
    # a live preview waits too
    dock.panel.live_preview.setChecked(True)
    assert dock.preview_now() is False

    qtbot.waitUntil(lambda: "progress" in seen)
    assert dock.stop() is True  # Stop & keep reaches the side job
    gate.set()
    _finish(dock, qtbot)
    assert seen["result"] == "side result" and seen["ended"] is True
    assert log == ["started", "stopped early", "closed"]
    assert dock.starts == []  # the fake method's run and preview never started

    # and the other way round: a side job is refused while a run holds the device
    dock.panel.live_preview.setChecked(False)
    dock.gate = threading.Event()
    assert dock.run()
    with pytest.raises(JobRefused, match="Fake is running on 'cells'; start the sweep"):
        dock.start_job(
            "sweep", _side_job(gate, second), title="The sweep", description="3", handlers=handlers
        )
    assert "start the sweep when it has finished" in dock.panel.status.text()
    dock.gate.set()
    _finish(dock, qtbot)


def test_cancel_ends_a_side_job(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    gate, log, ended = threading.Event(), [], []
    dock.start_job(
        "apply",
        _side_job(gate, log),
        title="The correction",
        description="apply",
        handlers=JobHandlers(ended=lambda: ended.append(True)),
    )
    qtbot.waitUntil(lambda: log == ["started"])
    dock.cancel()
    assert ended == [True] and not dock.is_running()
    assert dock.panel.status.text() == "Cancelled; nothing was changed."
    gate.set()
    qtbot.waitUntil(lambda: log == ["started", "closed"])
