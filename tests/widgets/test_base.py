"""The MethodDock base, driven by a tiny fake method (tests/widgets/conftest.py::FakeDock)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from napari_gpuscope.provenance import PROVENANCE_KEY

PROVENANCE_KEYS = {
    "method",
    "parameters",
    "result",
    "input",
    "device",
    "software",
    "timestamp",
    "elapsed_seconds",
    "automatic",  # the values chosen from the data (empty here)
}


@pytest.fixture
def image(viewer):
    data = np.arange(48, dtype=np.float32).reshape(6, 8) + 1
    return viewer.add_image(
        data,
        name="cells",
        scale=(2.0, 0.5),
        translate=(10.0, -3.0),
        units=("um", "um"),
        axis_labels=("y", "x"),
    )


def _finish(dock, qtbot, timeout=10_000):
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=timeout)


def test_full_run_streams_then_stores_provenance(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    original = image.data.copy()
    inserted, seen = [], []
    viewer.layers.events.inserted.connect(lambda e: inserted.append(e.value.name))

    def watch(event):
        layer = event.value
        seen.append(float(np.asarray(layer.data).flat[0]))
        layer.events.data.connect(lambda _: seen.append(float(layer.data.flat[0])))

    viewer.layers.events.inserted.connect(watch)
    assert dock.run() is True
    _finish(dock, qtbot)

    # the first update added the layer (named as running), no more layers; the result named it
    assert inserted == ["Fake running · cells"]
    factor, first = 2.0, float(original.flat[0])
    streamed = [first * factor * k / 4 for k in range(1, 5)]
    assert seen[:4] == pytest.approx(streamed)  # yield order, each update replaced the data
    assert [ly.name for ly in viewer.layers] == ["cells", "cells [Fake x2]"]
    result = viewer.layers["cells [Fake x2]"]
    np.testing.assert_allclose(result.data, original * factor)
    np.testing.assert_array_equal(image.data, original)  # input untouched

    record = result.metadata[PROVENANCE_KEY]
    assert set(record) == PROVENANCE_KEYS
    assert record["method"] == "fake"
    assert record["parameters"] == {"factor": 2.0, "steps": 4}
    assert record["result"] == {"steps": 4, "stopped_early": False}
    assert record["automatic"] == {}
    assert record["input"] == "cells"
    assert record["device"].startswith("cpu")
    assert set(record["software"]) >= {"napari-gpuscope", "torch", "cupy", "numpy"}
    assert record["elapsed_seconds"] >= 0
    assert "Fake done in 4 steps." in dock.panel.status.text()
    assert dock.panel.progress_bar.value() == 1000
    assert dock.last_result_layer.name == result.name

    # geometry is inherited
    assert tuple(result.scale) == (2.0, 0.5)
    assert tuple(result.translate) == (10.0, -3.0)
    assert tuple(result.axis_labels) == ("y", "x")
    assert [str(u) for u in result.units] == [str(u) for u in image.units]


def test_region_updates_fill_a_host_buffer(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    dock.regions = True
    dock.gate = threading.Event()
    dock.run()
    qtbot.waitUntil(lambda: "Fake running · cells" in viewer.layers)
    partial = np.asarray(viewer.layers["Fake running · cells"].data)
    assert partial.shape == image.data.shape
    np.testing.assert_allclose(partial[:1], image.data[:1] * 2.0 / 4)
    assert not partial[1:].any()  # rows not computed yet are still empty
    dock.gate.set()
    _finish(dock, qtbot)
    np.testing.assert_allclose(viewer.layers["cells [Fake x2]"].data, image.data * 2.0)


def test_cancel_mid_run_removes_the_layer_it_created(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    dock.gate = threading.Event()
    original = image.data.copy()
    dock.run()
    qtbot.waitUntil(lambda: "Fake running · cells" in viewer.layers)
    changes = []
    viewer.layers.events.connect(lambda e: changes.append(e.type))
    dock.cancel()
    assert "Fake running · cells" not in viewer.layers
    changes.clear()
    dock.gate.set()  # the job now yields a late update, then stops at that yield
    qtbot.waitUntil(dock.closed.is_set)
    qtbot.wait(100)  # let any queued late signal arrive (it must be dropped)
    assert changes == []
    assert [ly.name for ly in viewer.layers] == ["cells"]
    np.testing.assert_array_equal(image.data, original)
    assert "Cancelled" in dock.panel.status.text()
    assert not dock.panel.cancel_button.isEnabled() and dock.panel.run_button.isEnabled()
    assert len(dock.starts) == 1


def test_cancel_keeps_the_previous_result(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    dock.run()
    _finish(dock, qtbot)
    result = viewer.layers["cells [Fake x2]"]
    previous_data = result.data
    previous_record = result.metadata[PROVENANCE_KEY]

    # a new run into a new layer: cancelling removes that layer only
    dock.factor.value = 5.0
    dock.gate = threading.Event()
    dock.run()
    qtbot.waitUntil(lambda: "Fake running · cells" in viewer.layers)
    dock.cancel()
    dock.gate.set()
    qtbot.waitUntil(dock.closed.is_set)
    qtbot.wait(100)
    assert [ly.name for ly in viewer.layers] == ["cells", "cells [Fake x2]"]
    assert result.data is previous_data

    # "replace last result": the run streams into the previous layer; cancel restores it
    dock.panel.replace_last.setChecked(True)
    dock.gate = threading.Event()
    dock.run()
    qtbot.waitUntil(lambda: result.data is not previous_data)  # streaming replaced the data
    dock.cancel()
    dock.gate.set()
    qtbot.waitUntil(dock.closed.is_set)
    qtbot.wait(100)
    assert [ly.name for ly in viewer.layers] == ["cells", "cells [Fake x2]"]
    assert result.data is previous_data
    assert result.metadata[PROVENANCE_KEY] == previous_record


def test_live_preview_runs_once_for_a_burst(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "Fake preview · cells" in viewer.layers)
    dock.starts.clear()
    # One burst: no Qt event is processed between the changes, so the debounce timer cannot
    # fire in between, however slowly a loaded machine runs the event loop.
    for value in (3.0, 3.5, 4.0, 4.5, 5.0):
        dock.factor.value = value
    qtbot.waitUntil(lambda: bool(dock.starts) and not dock.is_running(), timeout=5000)
    qtbot.wait(400)  # no further (late) start
    assert [s["factor"] for s in dock.starts] == [5.0]
    assert all(s["preview"] for s in dock.starts)
    preview = viewer.layers["Fake preview · cells"]
    np.testing.assert_allclose(preview.data, image.data * 5.0)
    # switching live preview off removes the preview layer
    dock.panel.live_preview.setChecked(False)
    assert "Fake preview · cells" not in viewer.layers


def test_new_preview_supersedes_a_running_one(viewer, qtbot, image, fake_dock, cpu_device):
    # Issue 7, 1.9: the superseded job must close (and free its device memory) before the new
    # one starts planning; it stops at its next yield.
    dock = fake_dock()
    dock.gate = threading.Event()
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "Fake preview · cells" in viewer.layers)
    first_closed = dock.closed
    dock.closed = threading.Event()
    order = []
    first_closed_at = threading.Thread(
        target=lambda: first_closed.wait(20) and order.append("first closed"), daemon=True
    )
    first_closed_at.start()
    dock.factor.value = 7.0
    qtbot.waitUntil(lambda: dock.runner.waiting, timeout=5000)  # superseded, not yet started
    qtbot.wait(300)
    assert len(dock.starts) == 1  # the old job still holds its memory: no new job yet
    assert not first_closed.is_set()
    dock.gate.set()  # the old job reaches its next yield, stops and closes
    qtbot.waitUntil(lambda: len(dock.starts) == 2, timeout=5000)
    order.append("second started")
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=5000)
    assert order == ["first closed", "second started"]
    qtbot.wait(100)
    np.testing.assert_allclose(viewer.layers["Fake preview · cells"].data, image.data * 7.0)
    assert [ly.name for ly in viewer.layers].count("Fake preview · cells") == 1


def test_crashes_become_notifications_and_input_errors_stay_in_the_dock(
    viewer, qtbot, image, fake_dock, cpu_device, errors
):
    dock = fake_dock()
    dock.fail_at = 3
    dock.run()
    _finish(dock, qtbot)
    assert len(errors) == 1  # a crash: in the status line and notified (a bug to report)
    assert "Fake failed on 'cells'" in errors[0] and "diverged" in errors[0]
    assert "diverged" in dock.panel.status.text()
    assert "cells [Fake x2]" not in viewer.layers  # the partial result was rolled back

    # What the user fixes in the dock is said once, there (issue 30: it came three times).
    errors.clear()
    dock.factor.value = 0.0
    assert dock.run() is False
    assert errors == []
    status = dock.panel.status.text()
    assert "FakeParams.factor" in status and "> 0" in status

    dock.factor.value = 1.0
    dock.image_combo.choices = []  # no input
    assert dock.run() is False
    assert errors == [] and "No input" in dock.panel.status.text()


def test_an_input_refused_by_the_job_is_said_in_the_dock_only(
    viewer, qtbot, image, fake_dock, cpu_device, errors
):
    from napari_gpuscope.compute.arrays import InvalidInputError

    dock = fake_dock()

    def refusing(layer, params, device):
        raise InvalidInputError("layer 'cells' contains 1 non-finite value(s)")
        yield  # a job generator that refuses when first resumed, as a lazy input's scan does

    dock.make_job = refusing
    assert dock.run() is True
    _finish(dock, qtbot)
    assert errors == []
    assert "non-finite" in dock.panel.status.text()


def test_preview_crashes_are_not_repeated(viewer, qtbot, image, fake_dock, cpu_device, errors):
    dock = fake_dock()
    dock.fail_at = 1  # the preview's job crashes at its first step
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "diverged" in dock.panel.status.text(), timeout=5000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=5000)
    assert len(errors) == 1
    dock.panel.status.setText("")
    dock.request_preview()  # the same problem again
    qtbot.waitUntil(lambda: "diverged" in dock.panel.status.text(), timeout=5000)
    assert len(errors) == 1 and "diverged" in errors[0]  # said, but notified once


def test_job_runs_and_is_closed_in_the_worker_thread(viewer, qtbot, image, fake_dock, cpu_device):
    # Compute jobs enter their device inside themselves, so they must run in the worker thread.
    dock = fake_dock()
    closed_in = []
    original_job = dock._job_on

    def job(*args, **kwargs):
        try:
            return (yield from original_job(*args, **kwargs))
        finally:
            closed_in.append(threading.get_ident())

    dock._job_on = job
    dock.gate = threading.Event()
    dock.run()
    qtbot.waitUntil(lambda: "Fake running · cells" in viewer.layers)
    dock.cancel()
    dock.gate.set()
    qtbot.waitUntil(lambda: bool(closed_in))
    main = threading.get_ident()
    assert dock.starts[0]["thread"] != main
    assert closed_in[0] != main  # the cancelled job's finally ran in the worker thread


def test_changing_the_plane_re_runs_the_preview(viewer, qtbot, fake_dock, cpu_device):
    volume = np.arange(5 * 6 * 8, dtype=np.float32).reshape(5, 6, 8)  # every plane differs
    viewer.add_image(volume, name="vol", scale=(2.0, 1.0, 0.5), translate=(-1.0, 0.0, 3.0))
    dock = fake_dock()
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: len(dock.starts) == 1 and not dock.is_running(), timeout=5000)
    preview = viewer.layers["Fake preview · vol"]
    np.testing.assert_allclose(preview.data, volume[2:3] * 2.0)  # napari starts mid-stack
    assert tuple(preview.translate) == (-1.0 + 2 * 2.0, 0.0, 3.0)
    viewer.dims.set_current_step(0, 3)
    qtbot.waitUntil(lambda: len(dock.starts) == 2 and not dock.is_running(), timeout=5000)
    assert all(s["preview"] for s in dock.starts)
    assert viewer.layers["Fake preview · vol"] == preview  # the same layer, moved
    np.testing.assert_allclose(preview.data, volume[3:4] * 2.0)
    assert tuple(preview.translate) == (-1.0 + 3 * 2.0, 0.0, 3.0)
    assert tuple(preview.scale) == (2.0, 1.0, 0.5)


def test_export_buttons_call_the_export_commands(
    viewer, qtbot, image, fake_dock, cpu_device, monkeypatch
):
    from napari_gpuscope.export import commands

    calls = []
    monkeypatch.setattr(commands, "export_screenshot_dialog", lambda v: calls.append("figure"))
    monkeypatch.setattr(
        commands, "save_tiff_dialog", lambda v, layer=None: calls.append(("tiff", layer.name))
    )
    dock = fake_dock()
    dock.run()
    _finish(dock, qtbot)
    dock.panel.figure_button.click()
    dock.panel.save_tiff_button.click()
    assert calls == ["figure", ("tiff", "cells [Fake x2]")]  # the latest result


def _connected(emitter, obj) -> bool:
    """Whether a napari event emitter still calls a method of ``obj``."""
    for callback in emitter.callbacks:
        owner = callback[0]() if isinstance(callback, tuple) else None
        if owner is obj or getattr(callback, "__self__", None) is obj:
            return True
    return False


def test_removing_the_dock_from_napari_releases_it(
    make_napari_viewer, qtbot, fake_dock_class, cpu_device
):
    # napari's close button and remove_dock_widget never reach the dock's closeEvent.
    viewer = make_napari_viewer()
    viewer.add_image(np.arange(5 * 6 * 8, dtype=np.float32).reshape(5, 6, 8), name="vol")
    dock = fake_dock_class(viewer)
    viewer.window.add_dock_widget(dock, name="Fake")
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    assert _connected(viewer.dims.events.current_step, dock)
    dock.factor.value = 3.0
    dock.gate = threading.Event()
    dock.run()
    qtbot.waitUntil(lambda: len(viewer.layers) == 2)  # the run streams into a new layer

    viewer.window.remove_dock_widget(dock)
    assert not dock.is_running()  # cancelled...
    assert [layer.name for layer in viewer.layers] == ["vol"]  # ...and rolled back
    dock.gate.set()
    qtbot.waitUntil(dock.closed.is_set)  # the job itself was closed
    assert not _connected(viewer.dims.events.current_step, dock)
    viewer.add_image(np.ones((6, 8), np.float32), name="later")
    assert dock.input_layer.name == "vol"  # no longer follows the layer list
    saved, _ = dock.model.load_settings()
    assert saved.factor == 3.0  # saved when it changed; nothing was pending


def test_hiding_the_dock_pauses_its_live_preview(
    make_napari_viewer, qtbot, fake_dock_class, cpu_device
):
    viewer = make_napari_viewer(show=True)
    viewer.add_image(np.arange(5 * 6 * 8, dtype=np.float32).reshape(5, 6, 8), name="vol")
    dock = fake_dock_class(viewer)
    panel = viewer.window.add_dock_widget(dock, name="Fake")
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: len(dock.starts) == 1 and not dock.is_running(), timeout=5000)
    assert [layer.name for layer in viewer.layers] == ["vol", "Fake preview · vol"]
    dock.gate = threading.Event()
    dock.run()

    panel.close()  # napari's "hide this panel" button
    assert [layer.name for layer in viewer.layers][-1] != "Fake preview · vol"
    viewer.dims.set_current_step(0, 3)
    qtbot.wait(400)  # past the preview's quiet time
    assert [s["preview"] for s in dock.starts] == [True, False]  # no preview while hidden
    dock.gate.set()  # the full run goes on and delivers its result
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=5000)
    assert "vol [Fake x2]" in viewer.layers

    panel.show()  # shown again: the preview catches up with the displayed plane
    qtbot.waitUntil(lambda: "Fake preview · vol" in viewer.layers, timeout=5000)
    assert dock.starts[-1]["preview"] and _connected(viewer.dims.events.current_step, dock)


def test_enter_during_a_run_does_not_restart_it(viewer, qtbot, image, fake_dock, cpu_device):
    from qtpy.QtCore import Qt

    dock = fake_dock()
    dock.gate = threading.Event()
    qtbot.keyClick(dock.factor.native, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(viewer.layers) == 2)  # the run streams
    streamed = viewer.layers[-1]
    qtbot.keyClick(dock.factor.native, Qt.Key.Key_Return)  # impatient
    assert dock.run() is False
    assert "already running on 'cells'" in dock.panel.status.text()
    assert dock.runner.tag == "run" and len(dock.starts) == 1
    dock.gate.set()
    _finish(dock, qtbot)
    assert len(dock.starts) == 1 and viewer.layers[-1] == streamed  # the first run finished
    np.testing.assert_allclose(streamed.data, image.data * 2.0)


def test_an_output_that_cannot_be_shown_cancels_the_job_once(
    viewer, qtbot, image, fake_dock, fake_result, cpu_device, errors
):
    from napari_gpuscope.compute.jobs import Output, Progress

    dock = fake_dock()
    closed = threading.Event()

    def misplaced(layer, params, device):
        def job():
            try:
                for k in range(5):  # a region that does not fit the declared shape
                    output = Output(
                        np.ones((2, 3), np.float32), region=(slice(0, 2),), shape=(6, 8)
                    )
                    yield Progress(k / 5, f"step {k}", outputs={"result": output})
                return fake_result(np.asarray(layer.data, np.float32), 5)
            finally:
                closed.set()

        return job()

    dock.make_job = misplaced
    assert dock.run()
    qtbot.waitUntil(closed.is_set)
    qtbot.wait(100)
    assert not dock.is_running()
    assert len(errors) == 1 and "could not be shown" in errors[0] and "'result'" in errors[0]
    assert "could not be shown" in dock.panel.status.text()
    assert [layer.name for layer in viewer.layers] == ["cells"]


def test_a_new_input_cancels_the_preview_of_the_old_one(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    dock.gate = threading.Event()
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "Fake preview · cells" in viewer.layers)  # streaming, held
    viewer.add_image(np.full((6, 8), 10.0, np.float32), name="other")  # the new input
    assert dock.input_layer.name == "other"
    assert "Fake preview · cells" not in viewer.layers  # rolled back at once
    dock.gate.set()
    qtbot.waitUntil(lambda: "Fake preview · other" in viewer.layers, timeout=5000)
    _finish(dock, qtbot)
    qtbot.wait(100)
    assert [layer.name for layer in viewer.layers] == ["cells", "other", "Fake preview · other"]
    np.testing.assert_allclose(viewer.layers["Fake preview · other"].data, 20.0)
