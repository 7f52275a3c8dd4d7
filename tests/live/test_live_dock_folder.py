"""A dock's Live part following a folder TIFF files are written into ("Folder..."): the frames
of each settled file processed, Stop & keep keeping the offline job's result over them, with
the folder named in the result and its provenance. Run under ``xvfb-run``."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from napari_gpuscope.provenance import PROVENANCE_KEY

from .test_live import offline, shading_profile
from .test_live_folder import _write

WAIT_MS = 120_000  # a bound on a hung session, never a pacing


@pytest.fixture(autouse=True)
def _settings(monkeypatch, tmp_path):
    from napari_gpuscope.dock.settings import CONFIG_DIR_ENV

    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "config"))  # never the user's settings


def test_flatfield_dock_follows_a_folder_and_keeps_the_offline_apply(
    make_napari_viewer_proxy, qtbot, cpu_device, tmp_path
):
    from napari_gpuscope.compute.flatfield import BasicParams
    from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock

    viewer = make_napari_viewer_proxy()
    folder = tmp_path / "acquisition"
    folder.mkdir()
    frames = np.random.default_rng(0).poisson(300, (5, 16, 16)).astype(np.uint16)
    profile = shading_profile((16, 16))
    dock = FlatfieldDock(viewer)
    qtbot.addWidget(dock)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    dock.apply_panel.set_profile(profile, "from the test")
    part = dock.live_acquisition
    other = tmp_path / "elsewhere" / "acquisition"  # a folder of the same name
    other.mkdir(parents=True)
    part.add_folder(str(other))
    part.add_folder(str(folder))  # chosen by the folder, not by a label both share
    assert part.source_box.currentText() == f"folder: {tmp_path.name}/acquisition (TIFF files)"
    assert part.start(), part.status.text()
    assert part.follow.source.folder == folder
    assert part.choice.name == f"{tmp_path.name}/acquisition"  # the results say which one
    assert not part.folder_button.isEnabled()  # no other source chosen while one is followed
    _write(folder / "t0.tif", frames[:3])
    _write(folder / "t1.tif", frames[3:])
    qtbot.waitUntil(lambda: part.follow.session.frames_processed == 5, timeout=WAIT_MS)
    part.stop_and_keep()
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)
    expected = offline(
        "flatfield", "apply", frames, BasicParams(), profile=profile, measure_shading=False
    )
    (kept,) = part.kept
    assert kept.data.tobytes() == np.asarray(expected.image).tobytes()
    assert kept.metadata[PROVENANCE_KEY]["input"] == f"{tmp_path.name}/acquisition"
    assert "acquisition" in kept.name and tuple(kept.axis_labels) == ("t", "y", "x")
    qtbot.waitUntil(
        lambda: not any(t.name.endswith("live-folder") for t in threading.enumerate()),
        timeout=WAIT_MS,
    )  # the folder's poller ends at its next look
