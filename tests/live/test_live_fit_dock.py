"""A flat-field dock following a grid scan with the live fit (issue 28 item 2): the Qt-free
:class:`~napari_gpuscope.dock.live_follow.LiveFollow` and the dock's Live part in napari (run
under ``xvfb-run``): a dock with no profile fits one as the tiles arrive, and keeps the fit
over every tile, with provenance, equal to the offline fit job over them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live
from napari_gpuscope.dock.live_follow import FIT_AS_TILES_ARRIVE, LiveFollow, live_request
from napari_gpuscope.live._live_fit import MIN_TILES
from napari_gpuscope.provenance import PROVENANCE_KEY

from .camera import make_core, time_series
from .test_live import offline
from .test_live_fit import PARAMS, assert_same_profile, scan

WAIT = 300
WAIT_MS = WAIT * 1000


def test_live_request_chooses_the_fit_or_the_apply_job():
    from napari_gpuscope.compute.flatfield import BasicParams, ShadingProfile

    fit = live_request("flatfield", BasicParams(), profile=FIT_AS_TILES_ARRIVE)
    assert fit.job_id == "fit" and fit.inputs == {}
    assert any(f"from {MIN_TILES} tiles" in note for note in fit.notes)
    profile = ShadingProfile.from_arrays(np.ones((4, 4)))
    apply = live_request("flatfield", BasicParams(), profile=profile)
    assert apply.job_id == "apply" and apply.inputs == {"profile": profile}
    with pytest.raises(ValueError, match="fit the profile as the tiles arrive"):
        live_request("flatfield", BasicParams())


def test_live_request_takes_the_fits_dark_frame_and_mask_named():
    from napari_gpuscope.compute.flatfield import BasicParams
    from napari_gpuscope.dock.live_request import FitAsTilesArrive

    dark, mask = np.full((4, 4), 100.0), np.ones((4, 4), np.uint8)
    choice = FitAsTilesArrive(dark, mask, names={"dark_frame": "dark", "fitting_weight": "cells"})
    fit = live_request("flatfield", BasicParams(), profile=choice)
    assert fit.job_id == "fit" and sorted(fit.inputs) == ["dark_frame", "fitting_weight"]
    assert fit.inputs["dark_frame"] is not dark and np.array_equal(fit.inputs["dark_frame"], dark)
    assert "with the dark frame 'dark' and the mask (Fit on) 'cells'" in fit.notes[0]
    stack = FitAsTilesArrive(dark_frame=np.zeros((3, 4, 4)), names={"dark_frame": "darks"})
    with pytest.raises(ValueError, match=r"dark frame layer 'darks' has shape \(3, 4, 4\)"):
        live_request("flatfield", BasicParams(), profile=stack)


def test_live_follow_fits_as_tiles_arrive_and_keeps_the_profile_with_provenance():
    tiles, _ = scan(MIN_TILES + 3, seed=5)
    feed = live.FrameFeed()
    request = live_request("flatfield", PARAMS, profile=FIT_AS_TILES_ARRIVE)
    follow = LiveFollow(feed, request, device="cpu")
    for tile in tiles[:MIN_TILES]:
        feed.push(tile)
    assert follow.session.wait_for_frames(MIN_TILES, WAIT)
    status = follow.poll()
    # What the live layer shows: the flatfield of the fit over the tiles so far.
    assert status.image is not None and status.image.shape == tiles.shape[1:]
    assert status.processed == MIN_TILES and status.latency_ms is not None
    for tile in tiles[MIN_TILES:]:
        feed.push(tile)
    feed.end()
    assert follow.session.wait(WAIT)
    result = follow.result()
    assert_same_profile(result, offline("flatfield", "fit", tiles, PARAMS))
    layers = follow.result_layers(result, "scan")
    assert [kwargs["name"].split(" · ")[0] for _, kwargs, _ in layers] == ["flatfield"]
    assert layers[0][0].tobytes() == result.flatfield.tobytes()
    record = layers[0][1]["metadata"][PROVENANCE_KEY]
    assert record["method"] == "flatfield" and record["input"] == "scan"
    assert record["result"]["live"]["frames_processed"] == len(tiles)
    assert record["result"]["reweight_passes"] == list(result.reweight_passes)
    follow.cancel()


@pytest.fixture
def viewer(make_napari_viewer_proxy, monkeypatch, tmp_path):
    from napari_gpuscope.dock.settings import CONFIG_DIR_ENV

    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "config"))  # never the user's settings
    monkeypatch.setenv("PYMM_SIGNALS_BACKEND", "qt")
    return make_napari_viewer_proxy()


def test_a_flatfield_dock_with_no_profile_follows_a_scan_with_the_fit(viewer, qtbot, cpu_device):
    from napari_gpuscope.widgets.flatfield.dock import FlatfieldDock

    tiles, _ = scan(MIN_TILES + 4, seed=6)
    core, camera = make_core(tiles, exposure_ms=5.0)
    name = live.register_core(core, "tile scanner")
    dock = FlatfieldDock(viewer)
    qtbot.addWidget(dock)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)  # kernel warm-up
    for field in ("max_reweight_iterations", "max_iterations"):
        dock.set_param(field, getattr(PARAMS, field))
    part = dock.live_acquisition
    part.expand()
    part.choose(f"{name}: MDA")
    assert part.isAncestorOf(dock.live_job)  # the choice is a row of the Live part
    assert dock.apply_panel.profile is None
    assert not part.start()  # "apply the profile" without one: said, not started
    assert "fit the profile as the tiles arrive" in part.status.text()
    dock.live_job.setCurrentIndex(dock.live_job.findData("fit"))
    # The dock's dark frame and mask are the live fit's, as Run's fit takes them.
    dark = viewer.add_image(np.full(tiles.shape[1:], 100, np.uint16), name="dark")
    mask = np.ones(tiles.shape[1:], np.uint8)
    mask[:, :5] = 0
    cells = viewer.add_labels(mask, name="cells")
    dock.reset_choices()
    dock.dark_frame.value, dock.fit_mask.value = dark, cells
    part.choose(f"{name}: MDA")  # the new layers joined the list of sources
    dock.set_param("camera_offset", 100.0)  # a second darkfield beside the dark frame: said
    assert not part.start()
    assert "cannot be combined with camera_offset=100" in part.status.text()
    dock.set_param("camera_offset", None)
    assert part.start(), part.status.text()
    assert f"from {MIN_TILES} tiles" in part.status.text()
    assert "the dark frame 'dark' and the mask (Fit on) 'cells'" in part.status.text()
    assert not dock.live_job.isEnabled()  # read at Start: fixed while the session runs
    colormaps = []  # the live layer shows the flatfield as the kept one does (not grey)
    viewer.layers.events.inserted.connect(
        lambda event: colormaps.append((event.value.name, event.value.colormap.name))
    )
    acquisition = threading.Thread(target=core.mda.run, args=(time_series(len(tiles)),))
    acquisition.start()
    try:
        qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)  # the MDA's end keeps it
    finally:
        acquisition.join(timeout=WAIT)
        live.unregister_core(core)
    assert camera.index == len(tiles)
    # The profile's own words follow a dash (they start with a verb: "converged after ...").
    assert "The acquisition ended: kept the result — " in part.status.text(), part.status.text()
    weight = np.broadcast_to(mask, tiles.shape)
    inputs = {"dark_frame": dark.data, "fitting_weight": weight}
    expected = offline("flatfield", "fit", tiles, dock.params(), **inputs)
    assert expected.darkfield_source == "frame"
    # The flatfield, and the darkfield the dark frame gave (as a Run's fit shows them).
    assert [layer.name.split(" · ")[0] for layer in part.kept] == ["flatfield", "darkfield"]
    assert part.kept[1].data.tobytes() == expected.darkfield.tobytes()
    flat = [cmap for name, cmap in colormaps if not name.startswith("darkfield")]
    assert flat and all(cmap == "viridis" for cmap in flat), colormaps
    assert any(" live · " in name for name, _ in colormaps)
    assert part.kept[0].data.tobytes() == expected.flatfield.tobytes()
    record = part.kept[0].metadata[PROVENANCE_KEY]
    assert record["result"]["live"]["frames_processed"] == len(tiles)
    assert all(" live · " not in layer.name for layer in viewer.layers)
    # The kept profile is the Apply panel's, as a Run's fit is: ready to correct the scan.
    kept = dock.apply_panel.profile
    assert kept is not None and kept.flatfield.tobytes() == expected.flatfield.tobytes()
    assert "fitted live on" in dock.apply_panel.profile_label.text()
    assert dock.live_job.isEnabled()
