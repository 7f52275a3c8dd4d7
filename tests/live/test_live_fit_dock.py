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
    dark = viewer.add_image(np.full(tiles.shape[1:], 100, np.uint16), name="dark")
    dock.reset_choices()
    dock.dark_frame.value = dark
    assert not part.start()  # a dark-frame layer the live fit does not take: said
    assert "'Dark frame' layer" in part.status.text()
    dock.dark_frame.value = None
    part.choose(f"{name}: MDA")  # the new layer joined the list of sources
    assert part.start(), part.status.text()
    assert f"from {MIN_TILES} tiles" in part.status.text()
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
    assert "The acquisition ended: kept" in part.status.text(), part.status.text()
    expected = offline("flatfield", "fit", tiles, dock.params())
    assert len(part.kept) == 1 and part.kept[0].name.startswith("flatfield")
    assert all(cmap == "viridis" for _, cmap in colormaps), colormaps
    assert any(" live · " in name for name, _ in colormaps)
    assert part.kept[0].data.tobytes() == expected.flatfield.tobytes()
    record = part.kept[0].metadata[PROVENANCE_KEY]
    assert record["result"]["live"]["frames_processed"] == len(tiles)
    assert all(" live · " not in layer.name for layer in viewer.layers)
