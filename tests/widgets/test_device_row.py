"""Device row: CUDA GPUs only, a prominent message without one, CPU only via the test fixture."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute import devices as compute_devices
from napari_gpuscope.compute.devices import GPUInfo, no_gpu_message
from napari_gpuscope.widgets import _devices
from napari_gpuscope.widgets._devices import DeviceRow, available_devices
from napari_gpuscope.widgets.tv.dock import TVDenoiseDock

GB = 1024**3


@pytest.fixture
def no_gpus(monkeypatch):
    monkeypatch.setattr(compute_devices, "list_gpus", list)


def _words(text):
    return " ".join(text.split())


def _shown_text(label):
    """What a (rich-text) QLabel displays, whitespace-normalised."""
    from qtpy.QtGui import QTextDocument

    document = QTextDocument()
    document.setHtml(label.text())
    return _words(document.toPlainText())


def test_no_gpu_shows_message_and_offers_nothing(qtbot, no_gpus):
    row = DeviceRow()
    qtbot.addWidget(row)
    assert available_devices() == []
    assert row.offered_devices() == []
    assert row.device is None
    assert not row.available
    assert _shown_text(row.message) == _words(no_gpu_message())
    assert not row.message.isHidden()


def test_gpus_are_listed_with_memory_and_never_cpu(qtbot, monkeypatch):
    gpus = [
        GPUInfo(0, "NVIDIA RTX 4090", int(24.0 * GB), int(21.3 * GB), (8, 9)),
        GPUInfo(1, "NVIDIA A100", int(80.0 * GB), int(79.5 * GB), (8, 0)),
    ]
    monkeypatch.setattr(compute_devices, "list_gpus", lambda: gpus)
    row = DeviceRow()
    qtbot.addWidget(row)
    assert row.offered_devices() == ["cuda:0", "cuda:1"]
    assert row.combo.itemText(0) == "cuda:0 - NVIDIA RTX 4090 - 21.3 / 24.0 GB free"
    assert row.message.isHidden()
    row.combo.setCurrentIndex(1)
    # a refresh keeps the selection when the GPU is still there
    row.refresh()
    assert row.device == "cuda:1"


def test_cpu_only_through_the_fixture(qtbot, no_gpus, cpu_device):
    row = DeviceRow()
    qtbot.addWidget(row)
    assert cpu_device == "cpu"
    assert row.offered_devices() == ["cpu"]
    assert row.available and row.message.isHidden()


def test_cpu_entry_is_gone_after_the_fixture(qtbot, no_gpus):
    assert _devices._TEST_ONLY_DEVICES == []
    row = DeviceRow()
    qtbot.addWidget(row)
    assert "cpu" not in row.offered_devices()


def test_tv_dock_without_gpu_disables_run_and_preview(viewer, qtbot, no_gpus, errors):
    dock = TVDenoiseDock(viewer)
    qtbot.addWidget(dock)
    assert not dock.panel.run_button.isEnabled()
    assert not dock.panel.live_preview.isEnabled()
    assert _shown_text(dock.device_row.message) == _words(no_gpu_message())
    # the status line says why Run is disabled (not "Ready."), even with a valid input
    viewer.add_image(np.arange(16.0).reshape(4, 4), name="valid")
    assert not dock.panel.run_button.isEnabled()
    assert dock.panel.status.text().startswith("Run is disabled: no usable CUDA GPU")
    # even if triggered programmatically, nothing runs and the user is told why: once, in the
    # dock (issue 18: the message also came as a notification that stayed until napari closed)
    assert dock.run() is False
    assert dock.panel.status.text().startswith("Run is disabled: no usable CUDA GPU")
    assert errors == []


def test_tv_dock_with_cpu_fixture_enables_run(viewer, qtbot, no_gpus, cpu_device):
    dock = TVDenoiseDock(viewer)
    qtbot.addWidget(dock)
    assert not dock.panel.run_button.isEnabled()  # no input yet
    viewer.add_image(np.arange(64.0).reshape(8, 8), name="img")
    assert dock.panel.run_button.isEnabled()
    assert dock.panel.live_preview.isEnabled()
    assert dock.device == "cpu"


def test_no_gpu_message_is_readable_and_copyable(qtbot, no_gpus):
    from qtpy.QtCore import Qt

    row = DeviceRow()
    qtbot.addWidget(row)
    message = no_gpu_message()
    text = row.message.text()
    headline = text.split("<br>")[0]
    # only the headline is alarm-red and bold; the instructions are plain (and selectable)
    assert headline.startswith("<b") and "#e04040" in headline and headline.endswith("</b>")
    assert _words(message).startswith(_shown_text(type(row.message)(headline)))
    assert row.message.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse


def test_refresh_button_probes_the_gpus_again(qtbot, monkeypatch):
    forgotten = []
    monkeypatch.setattr(compute_devices, "forget_gpus", lambda: forgotten.append(True))
    monkeypatch.setattr(compute_devices, "list_gpus", list)
    row = DeviceRow()
    qtbot.addWidget(row)
    assert forgotten == []  # building the row uses the cached probes
    row.refresh_button.click()
    assert forgotten == [True]
