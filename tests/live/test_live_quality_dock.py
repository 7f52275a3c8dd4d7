"""The eSRRF dock's live quality (issue 28 items 2, 5, 6): a real live session followed by the
dock plots its resolution track, and "Say when more frames stop helping" says when its rule
fired, in the status line and in the kept result's provenance. Run under ``xvfb-run``.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live
from napari_gpuscope.provenance import PROVENANCE_KEY

from .camera import make_core, time_series
from .test_live import blinking
from .test_live_dock import WAIT_MS, _live_threads, _napari_like, _open  # noqa: F401


@pytest.fixture
def viewer(make_napari_viewer_proxy):
    return make_napari_viewer_proxy()


def test_esrrf_dock_plots_the_resolution_track_and_says_when_good_enough(viewer, qtbot, cpu_device):
    from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

    # 50 ms a frame: the MDA still runs when the rule fires at 20 frames (polls see it).
    stack = blinking(60, size=32)
    core, _ = make_core(stack, exposure_ms=50.0)
    name = live.register_core(core, "quality scope")
    dock = _open(EsrrfDock, viewer, qtbot)
    dock.set_param("magnification", 2)
    part = dock.live_acquisition
    assert part.quality is not None
    # A rule that fires at the second measurement (20 frames at one every 10): what the test
    # checks is the dock's wiring, not where a plateau is (test_live_quality.py does that).
    part.quality.rule = live.PlateauRule.rsp(change=0.99, window=1)
    part.quality.good_enough_box.setChecked(True)
    part.choose(f"{name}: MDA")
    assert part.start(), part.status.text()
    session = part.follow.session
    session.quality.max_share = None  # every measurement due, whatever this CPU's load
    acquisition = threading.Thread(target=core.mda.run, args=(time_series(len(stack)),))
    acquisition.start()
    seen = []
    qtbot.waitUntil(
        lambda: seen.append(part.status.text()) or "Good enough at" in part.status.text(),
        timeout=WAIT_MS,
    )
    qtbot.waitUntil(lambda: not part.running, timeout=WAIT_MS)  # kept when the MDA ends
    acquisition.join(timeout=120)
    live.unregister_core(core)
    message = next(text for text in seen if "Good enough at" in text)
    assert message.startswith("Good enough at 20 frames (RSP error ")
    assert "changed < 99 % over the last 1 measurements); resolution " in message
    points = session.track()
    assert [p.frames for p in points] == [10, 20, 30, 40, 50, 60]
    plotted = part.quality.plot.values("decorrelation resolution")
    assert plotted == pytest.approx([p.resolution_px for p in points], nan_ok=True)
    assert part.quality.error_plot.values("1 - RSP") == pytest.approx([p.rsp_error for p in points])
    # The estimated error (what the default rule reads), each point's with its own floor; none
    # at the first measurement (one half only).
    estimated = [live.PlateauRule.estimates(points[: i + 1])[-1] for i in range(1, len(points))]
    assert part.quality.error_plot.values("estimated error") == pytest.approx(estimated)
    assert part.quality.plot.title == "Pixel-grid limited (output px): "  # said, at M 2
    assert "It was good enough at 20 frames" in part.status.text()
    kept = next(layer for layer in viewer.layers if layer.name.startswith("eSRRF · "))
    facts = kept.metadata[PROVENANCE_KEY]["result"]["live"]["quality"]
    assert facts["good_enough"]["frames"] == 20
    assert facts["good_enough_rule"]["change"] == 0.99
    assert [p["frames"] for p in facts["track"]] == [10, 20, 30, 40, 50, 60]
    # The drift so far, in blocks of the drift section's 50 frames (a still sample: one block
    # of 50 is compared with nothing yet, so the line waits for a second block).
    assert part.quality.drift_label.text() == "drift: waiting for 2 blocks of 50 frames"
    drift = kept.metadata[PROVENANCE_KEY]["result"]["live"]["drift"]
    assert drift["frames_per_block"] == 50 and len(drift["shifts"]) == 1
    assert _live_threads() == []


def test_a_layer_in_micrometres_gives_the_track_in_nm():
    """napari says a layer's µm as "micrometer": the line said "0.15 micrometer" (found in
    review), where the dock says nm."""
    import napari.layers
    import numpy as np

    from napari_gpuscope.compute.results import Geometry
    from napari_gpuscope.live import QualityPoint
    from napari_gpuscope.widgets._live_quality import _scale, resolution_words

    layer = napari.layers.Image(np.zeros((2, 8, 8)), scale=(1, 0.1, 0.1), units=("s", "um", "um"))
    geometry = Geometry.of_layer(layer)
    assert str(geometry.units[-1]) == "micrometer"
    pixel, unit = _scale(geometry)
    assert (pixel, unit) == (0.1, "µm")
    point = QualityPoint(10, 0, 3.0, "", 0.05, 0.0)
    assert resolution_words(point, pixel, unit, 2) == "150 nm"  # 3 output px of 50 nm


def test_the_resolution_plot_is_titled_by_the_latest_finding():
    """Only a grid-limited value is called "Pixel-grid limited"; no peak and a failed
    measurement are no resolution at all."""
    from napari_gpuscope.widgets._live_quality import resolution_title

    assert resolution_title("") == "Live"
    assert resolution_title("limited by the pixel grid") == "Pixel-grid limited"
    assert resolution_title("no peak") == "No resolution"
    assert resolution_title("not measured (ValueError: empty)") == "No resolution"
