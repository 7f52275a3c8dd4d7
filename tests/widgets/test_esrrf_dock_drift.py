"""The eSRRF dock's drift section and decorrelation summary, on the CPU test device.

Oracles: a simulated blinking stack drawn with known sub-pixel drift (emitters rendered at
their drifted positions, not by shifting images), NanoPyx 2.1.5's eSRRF of an undrifted stack
(tests/fixtures/esrrf) against the dock's run of the same frames moved by whole pixels and
corrected with a loaded trace, and the CSV module reading what "Save trace" wrote.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from dock_helpers import WorkerGate, open_dock, select_input

from napari_gpuscope.compute.esrrf import DriftResult
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock

FIXTURES = np.load(Path(__file__).parents[1] / "fixtures" / "esrrf" / "nanopyx_esrrf.npz")
T, SIDE = 120, 48


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    return open_dock(EsrrfDock, viewer, qtbot)


def _true_drift(n=T):
    """A smooth sub-pixel drift with a little jitter (dy, dx) per frame, 0 at frame 0."""
    t = np.arange(n) / (n - 1)
    rng = np.random.default_rng(7)
    drift = np.stack([1.6 * t + 0.4 * np.sin(3 * t), -2.2 * t**2 + 0.3 * t], axis=1)
    drift += 0.03 * rng.normal(size=drift.shape)
    return drift - drift[0]


def _blinking_stack(drift, *, seed=3, blink_seed=None):
    """Emitters on two crossing lines and scattered points, each frame drawn with the
    emitters at their drifted positions (Gaussian PSF, sigma 1.3 px), ~30 % of them on,
    Poisson noise over a background. ``seed`` places the emitters; ``blink_seed`` (default:
    the same generator) draws the blinking and the noise."""
    rng = np.random.default_rng(seed)
    s = np.linspace(0, 1, 70)
    points = np.concatenate(
        [
            np.stack([8 + 30 * s, 10 + 26 * s], 1),
            np.stack([38 - 28 * s, 8 + 32 * s], 1),
            rng.uniform(10, SIDE - 10, size=(40, 2)),
        ]
    )
    if blink_seed is not None:
        rng = np.random.default_rng(blink_seed)
    y, x = np.mgrid[:SIDE, :SIDE].astype(np.float64)
    frames = np.empty((len(drift), SIDE, SIDE), np.float32)
    for k, (dy, dx) in enumerate(drift):
        on = points[rng.random(len(points)) < 0.3] + (dy, dx)
        image = np.zeros((SIDE, SIDE))
        for py, px in on:
            image += 300 * np.exp(-((y - py) ** 2 + (x - px) ** 2) / (2 * 1.3**2))
        frames[k] = rng.poisson(image + 20)
    return frames


@pytest.fixture(scope="module")
def drifting():
    drift = _true_drift()
    return _blinking_stack(drift), drift


def test_choice_drives_and_follows_the_drift_correction_parameter(dock):
    section = dock.drift
    assert section.current_mode == "off" and dock.params().drift_correction is False
    section.set_mode("estimate")
    assert dock.params().drift_correction is True
    dock.set_param("drift_correction", False)  # a recipe's or restored value
    assert section.current_mode == "off"
    dock.set_param("drift_correction", True)
    assert section.current_mode == "estimate"  # no trace yet: estimated in the run
    assert "Drift correction" in dock.changes.text.text()
    dock.reset_to_defaults()
    assert section.current_mode == "off"
    assert not section.save_button.isEnabled()


def test_estimate_plots_every_frame_and_draws_the_track_over_the_input(
    viewer, qtbot, dock, drifting
):
    stack, truth = drifting
    layer = viewer.add_image(
        stack.copy(), name="drifting", scale=(1.0, 0.1, 0.1), translate=(0, 2, 3), units="um"
    )
    select_input(dock, "drifting")
    dock.set_param("drift_time_averaging", 20)
    live = []
    real_add = dock.drift.plot.add_block
    dock.drift.plot.add_block = lambda *a: (live.append(a), real_add(*a))
    dock.drift.set_mode("estimate")
    assert dock.drift.estimate()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)

    assert len(live) == T // 20  # each block plotted as it finished (at its centre frame)
    plot = dock.drift.plot
    assert not plot.isHidden() and len(plot.frames) == T == len(plot.dy) == len(plot.dx)
    # against the drift the frames were drawn with (blocks of 20 follow it to ~0.1 px)
    error = np.hypot(plot.dy - truth[:, 0], plot.dx - truth[:, 1])
    assert math.sqrt(np.mean(error**2)) < 0.15, error
    assert dock.drift.current_mode == "trace"  # a run now uses this trace
    assert "Drift drift over 120 frames" not in dock.panel.status.text()
    assert "120 frames" in dock.panel.status.text()

    tracks = [ly for ly in viewer.layers if type(ly).__name__ == "Tracks"]
    assert len(tracks) == 1
    track = tracks[0]
    assert tuple(track.scale[1:]) == pytest.approx(tuple(layer.scale[1:]))
    assert tuple(track.translate[1:]) == pytest.approx(tuple(layer.translate[1:]))
    # the path of the frame's centre, in the input's pixels
    centre = (SIDE - 1) / 2
    np.testing.assert_allclose(track.data[:, 2:] - centre, np.stack([plot.dy, plot.dx], 1))
    assert track.metadata[PROVENANCE_KEY]["method"] == "esrrf"
    assert track.metadata[PROVENANCE_KEY]["parameters"]["time_averaging"] == 20
    np.testing.assert_array_equal(layer.data, stack)  # the input untouched
    assert viewer.layers.selection.active.name == "drifting"

    # a second estimate replaces the drawn trace instead of piling up layers
    assert dock.drift.estimate()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    assert sum(type(ly).__name__ == "Tracks" for ly in viewer.layers) == 1


def _moved(stack, shifts):
    """Frame t showing frame t's content moved by +shifts[t] (whole pixels; the edges wrap)."""
    return np.stack(
        [
            np.roll(f, (int(dy), int(dx)), axis=(0, 1))
            for f, (dy, dx) in zip(stack, shifts, strict=True)
        ]
    )


def test_a_loaded_trace_is_what_the_run_corrects_with(viewer, qtbot, dock, tmp_path, monkeypatch):
    stack = FIXTURES["var_m2_r1_s2_noiw/input"]  # 10 frames of 24 x 24
    reference = FIXTURES["var_m2_r1_s2_noiw/output"][0]  # NanoPyx, no drift
    shifts = np.array([[0, 0], [1, 0], [1, 1], [0, 1], [-1, 1]] * 2, np.float64)
    moved = _moved(stack, shifts)
    layer = viewer.add_image(moved.copy(), name="moved")
    select_input(dock, "moved")
    settings = {"magnification": 2, "radius": 1.0, "sensitivity": 2.0, "temporal": "VAR"}
    for name, value in {**settings, "intensity_weighting": False}.items():
        dock.set_param(name, value)
    path = DriftResult.from_shifts(shifts).to_csv(tmp_path / "trace.csv")
    monkeypatch.setattr(
        "qtpy.QtWidgets.QFileDialog.getOpenFileName", lambda *a, **k: (str(path), "")
    )
    dock.drift.load_button.click()
    assert dock.drift.current_mode == "trace" and dock.params().drift_correction
    assert "Loaded the drift trace trace.csv" in dock.panel.status.text()
    assert len(dock.drift.plot.frames) == 10

    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    (result,) = [ly for ly in viewer.layers if ly.name.startswith("eSRRF · moved")]
    record = result.metadata[PROVENANCE_KEY]
    assert record["result"]["drift"]["shifts_px"] == shifts.tolist()
    # the run's track replaces the one drawn when the trace was loaded
    (track,) = [ly for ly in viewer.layers if type(ly).__name__ == "Tracks"]
    assert track.metadata[PROVENANCE_KEY]["parameters"]["magnification"] == 2
    # Corrected by whole pixels, the frames are the fixture's again away from the edges that
    # wrapped or were repeated (1 px, plus the radius and interpolation reach); the edges
    # still move the image-wide macro-pixel correction a little (0.2 % RMS, at any margin).
    inner = (slice(12, -12), slice(12, -12))
    scale = reference.max()

    def rms(image):
        return float(np.sqrt(np.mean((image[inner] - reference[inner]) ** 2))) / scale

    assert rms(result.data[0]) < 0.005
    np.testing.assert_array_equal(layer.data, moved)

    # without the trace the same frames give another image (14 % RMS): the trace did the work
    dock.drift.set_mode("off")
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    assert rms(dock.last_result_layer.data[0]) > 0.1


def test_bad_traces_are_said_in_the_status_and_change_nothing(viewer, qtbot, dock, tmp_path):
    stack = FIXTURES["var_m2_r1_s2_noiw/input"]
    layer = viewer.add_image(stack.copy(), name="blink")
    select_input(dock, "blink")
    garbage = tmp_path / "notes.csv"
    garbage.write_text("time,x\n0,zero\n", encoding="utf-8")
    assert not dock.drift.load(garbage)
    status = dock.panel.status.text()
    assert status.startswith("Could not load the drift trace") and "dy_px" in status
    short = DriftResult.from_shifts(np.zeros((7, 2))).to_csv(tmp_path / "short.csv")
    assert not dock.drift.load(short)
    assert "7 frames but 'blink' has 10" in dock.panel.status.text()
    assert dock.drift.trace is None and dock.drift.current_mode == "off"
    assert not any(type(ly).__name__ == "Tracks" for ly in viewer.layers)

    dock.drift.set_mode("trace")  # a run that would need a trace
    assert not dock.run()
    assert "there is none" in dock.panel.status.text()
    assert not dock.is_running()
    np.testing.assert_array_equal(layer.data, stack)
    assert [ly.name for ly in viewer.layers] == ["blink"]


def test_save_writes_a_csv_with_units_that_round_trips(viewer, qtbot, dock, tmp_path, monkeypatch):
    stack = FIXTURES["var_m2_r1_s2_noiw/input"]
    viewer.add_image(stack.copy(), name="blink", scale=(1, 0.1, 0.1), units="um")
    select_input(dock, "blink")
    shifts = np.cumsum(np.full((10, 2), (0.125, -0.3)), axis=0)
    shifts -= shifts[0]
    dock.drift.set_trace(DriftResult.from_shifts(shifts), "made here")
    target = tmp_path / "saved.csv"
    monkeypatch.setattr(
        "qtpy.QtWidgets.QFileDialog.getSaveFileName", lambda *a, **k: (str(target), "")
    )
    dock.drift.save_button.click()
    assert f"Saved the drift trace to {target}" in dock.panel.status.text()
    text = target.read_text(encoding="utf-8")
    assert "# unit: px" in text and "# pixel_size: 0.1 µm" in text
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    assert [int(r["frame"]) for r in rows] == list(range(10))
    np.testing.assert_allclose([[float(r["dy_px"]), float(r["dx_px"])] for r in rows], shifts)
    np.testing.assert_allclose([[float(r["dy_µm"]), float(r["dx_µm"])] for r in rows], shifts * 0.1)
    np.testing.assert_array_equal(DriftResult.from_csv(target).shifts, shifts)


def test_a_run_estimating_its_drift_draws_it_and_says_the_decorrelation_resolution(
    viewer, qtbot, dock, drifting
):
    from napari_gpuscope.compute.esrrf import decorrelation_resolution
    from napari_gpuscope.compute.esrrf._resolution import PIXEL_LIMIT_PX

    stack, truth = drifting
    viewer.add_image(stack.copy(), name="drifting", scale=(1.0, 0.1, 0.1), units="um")
    select_input(dock, "drifting")
    dock.set_param("magnification", 2)
    dock.set_param("drift_time_averaging", 20)
    dock.drift.set_mode("estimate")
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)

    result = dock.last_result_layer
    facts = result.metadata[PROVENANCE_KEY]["result"]
    shifts = np.array(facts["drift"]["shifts_px"])
    assert math.sqrt(np.mean(np.sum((shifts - truth) ** 2, axis=1))) < 0.15
    tracks = [ly for ly in viewer.layers if type(ly).__name__ == "Tracks"]
    assert len(tracks) == 1 and tuple(tracks[0].scale[1:]) == pytest.approx((0.1, 0.1))
    assert tracks[0].units == viewer.layers["drifting"].units  # napari keeps units on
    assert tracks[0].color_by == "frame"
    plot = dock.drift.plot
    assert len(plot.frames) == T and "in the run" in plot.title
    assert dock.drift.save_button.isEnabled()  # the run's trace can be saved

    # the job's decorrelation analysis of what the dock shows (in output pixels: the job
    # sees the array; the layer's scale gives the micrometres)
    expected = decorrelation_resolution(result.data[0], device="cpu")
    measured = facts["decorrelation"]["esrrf"]
    assert measured["resolution_px"] == pytest.approx(expected.resolution, rel=1e-6)
    assert facts["decorrelation"]["unit"] == "px"
    assert facts["params"]["measure_resolution"] is True  # the dock's default
    status = dock.panel.status.text()
    assert "drift-corrected" in status and "decorrelation" in status
    # in the layer's unit (nm for µm), except a decorrelation at the pixel grid's limit,
    # which is named so in output px (issue 30: it is no resolution of the sample)
    if expected.resolution < PIXEL_LIMIT_PX:
        assert f"{expected.resolution:.3g} output px: limited by the pixel grid" in status
    else:
        assert f"{expected.resolution * 50:.3g} nm" in status  # 0.1 µm / M 2
    assert "widefield" in status and " nm" in status and "\n" not in status
    assert "Decorrelation" in dock.panel.status.toolTip()  # the details


def test_a_large_result_is_measured_on_its_centre_and_the_status_says_so(
    viewer, qtbot, dock, drifting, monkeypatch
):
    from napari_gpuscope.compute.esrrf import _resolution, decorrelation_resolution

    monkeypatch.setattr(_resolution, "DECORRELATION_SIDE", 64)  # the output is 96 x 96
    stack, _ = drifting
    viewer.add_image(stack.copy(), name="drifting")
    select_input(dock, "drifting")
    dock.set_param("magnification", 2)
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    result = dock.last_result_layer
    facts = result.metadata[PROVENANCE_KEY]["result"]["decorrelation"]
    centre = result.data[0][16:80, 16:80]
    expected = decorrelation_resolution(centre, device="cpu").resolution
    assert facts["esrrf"]["resolution_px"] == pytest.approx(expected, rel=1e-6)
    assert facts["region"] == "central 64 x 64 px"
    assert "(central 64 x 64 px)" in dock.panel.status.toolTip()  # the details


def test_channels_are_registered_to_channel_0_before_each_is_reconstructed(viewer, qtbot, dock):
    from skimage.registration import phase_cross_correlation

    offset = np.array([1.5, -2.0])  # channel 1's content relative to channel 0's
    frames = 60
    still = np.zeros((frames, 2))
    # the same emitters (seed 3 draws the same positions), drawn moved by the offset in
    # channel 1, whose frames are shuffled (blinking independent of channel 0's)
    channels = np.stack([_blinking_stack(still, seed=3), _blinking_stack(still + offset, seed=3)])
    channels[1] = np.random.default_rng(11).permutation(channels[1])
    viewer.add_image(channels.copy(), name="two colours", scale=(1, 1, 0.1, 0.1))
    select_input(dock, "two colours")
    assert _registration(dock).native.isVisibleTo(dock)
    dock.set_param("magnification", 2)
    _registration(dock).value = "translation"
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)

    results = sorted(
        (ly for ly in viewer.layers if ly.name.startswith("eSRRF · two colours ch")),
        key=lambda ly: ly.name,
    )
    assert [ly.colormap.name for ly in results] == ["magenta", "green"]
    facts = results[0].metadata[PROVENANCE_KEY]["result"]
    measured = np.array(facts["registration"]["shifts"][1])
    assert np.abs(measured - offset).max() < 0.1, measured
    # the reconstructions overlay: what is left between them is well under an output pixel
    left, _, _ = phase_cross_correlation(results[0].data[0], results[1].data[0], upsample_factor=20)
    assert np.hypot(*left) < 0.3, left
    assert len(facts["channels"]) == 2 and "decorrelation" in facts["channels"][1]
    assert "registration to channel 0" in dock.panel.status.text()
    np.testing.assert_array_equal(viewer.layers["two colours"].data, channels)

    _registration(dock).value = "off"  # the oracle's check: unregistered, they are 2x apart
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    plain = sorted(dock.last_results[:2], key=lambda ly: ly.name)
    apart, _, _ = phase_cross_correlation(plain[0].data[0], plain[1].data[0], upsample_factor=20)
    np.testing.assert_allclose(apart, -2 * offset, atol=0.3)

    single = viewer.add_image(channels[:1].copy(), name="one colour")
    select_input(dock, "one colour")
    assert not dock.run()
    assert "2 to 8 channels" in dock.panel.status.text()
    viewer.layers.remove(single)
    viewer.add_image(channels[0].copy(), name="plain")
    select_input(dock, "plain")
    assert not _registration(dock).native.isVisibleTo(dock)


def test_elastic_registration_and_the_drift_of_channels(viewer, qtbot, dock):
    from skimage.registration import phase_cross_correlation

    offset = np.array([-1.25, 0.75])
    drift = _true_drift(100)
    # the same emitters, moved by the offset in channel 1, blinking independently; both
    # channels drift together
    channels = np.stack(
        [_blinking_stack(drift, seed=5), _blinking_stack(drift + offset, seed=5, blink_seed=9)]
    )
    viewer.add_image(channels.copy(), name="two colours", scale=(1, 1, 0.1, 0.1))
    select_input(dock, "two colours")
    dock.set_param("magnification", 2)
    dock.set_param("drift_time_averaging", 20)
    assert dock.drift.estimate()  # on channel 0, which the others are registered to
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    assert len(dock.drift.plot.frames) == 100
    error = np.hypot(dock.drift.plot.dy - drift[:, 0], dock.drift.plot.dx - drift[:, 1])
    assert math.sqrt(np.mean(error**2)) < 0.15

    dock.drift.set_mode("estimate")  # each channel's drift, then the registration of the means
    _registration(dock).value = "elastic"
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    results = sorted(dock.last_results[:2], key=lambda ly: ly.name)
    facts = results[0].metadata[PROVENANCE_KEY]["result"]
    assert facts["registration"]["elastic"] is True
    # Measured on the drift-corrected means: each channel's own trace sets where its mean
    # sits (within the drift bound above, 0.15 px), so the offset is known to about that.
    assert np.abs(np.array(facts["registration"]["shifts"][1]) - offset).max() < 0.15
    left, _, _ = phase_cross_correlation(results[0].data[0], results[1].data[0], upsample_factor=20)
    assert np.hypot(*left) < 0.3, left
    assert "elastic (per block) registration to channel 0" in dock.panel.status.text()


def test_one_job_at_a_time_and_a_cancelled_estimate_keeps_the_trace(viewer, qtbot, dock, drifting):
    stack, _ = drifting
    viewer.add_image(stack.copy(), name="drifting")
    select_input(dock, "drifting")
    dock.set_param("drift_time_averaging", 20)
    kept = DriftResult.from_shifts(np.zeros((T, 2)))
    dock.drift.set_trace(kept, "made here")
    assert dock.run()
    assert not dock.drift.estimate()  # the run holds the device: refused, said
    assert "running" in dock.panel.status.text().lower()
    dock.cancel()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)

    assert dock.drift.estimate()
    assert not dock.drift.estimate_button.isEnabled()
    dock.cancel()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    assert dock.drift.estimate_button.isEnabled()
    assert dock.drift.trace is kept
    assert dock.drift.plot.title == "Drift trace: made here"
    np.testing.assert_array_equal(dock.drift.plot.dy, np.zeros(T))


def test_the_channel_registration_choice_is_saved_with_the_settings(viewer, qtbot, dock):
    import json

    viewer.add_image(np.zeros((2, 8, 32, 32), np.float32), name="two colours")
    select_input(dock, "two colours")
    _registration(dock).value = "elastic"
    record = json.loads(dock.model.settings.path.read_text())
    assert record["params"]["channel_registration"] == "elastic"
    assert dock.params().channel_registration == "elastic"
    again = open_dock(EsrrfDock, viewer, qtbot)  # a new napari session
    select_input(again, "two colours")
    assert again.params().channel_registration == "elastic"
    assert _registration(again).native.isVisibleTo(again)


def _registration(dock):
    """The form's "Register channels" control (the model's channel_registration)."""
    return dock.form.widgets["channel_registration"]


def test_stop_and_keep_during_a_drift_estimate_keeps_the_blocks_measured(
    viewer, qtbot, dock, drifting, monkeypatch
):
    stack, truth = drifting
    viewer.add_image(stack.copy(), name="drifting")
    select_input(dock, "drifting")
    dock.set_param("drift_time_averaging", 20)
    dock.drift.set_mode("estimate")
    gate = WorkerGate(monkeypatch, after=1)
    assert dock.drift.estimate()
    gate.wait_paused()  # the estimate's first update: within its first block
    assert dock.stop()  # the estimate finishes two blocks and keeps them
    gate.release()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    trace = dock.drift.trace
    assert trace is not None and trace.stopped_early and trace.shifts.shape == (40, 2)
    error = trace.shifts - (truth[:40] - truth[0])
    assert math.sqrt(np.mean(error**2)) < 0.15
    assert "stopped early: frames 0-39 only" in dock.panel.status.text()
    assert dock.drift.current_mode == "estimate"  # a run still estimates over every frame
    dock.drift.set_mode("trace")
    assert not dock.run()
    assert "covers frames 0-39 only" in dock.panel.status.text()


def test_stop_and_keep_during_the_runs_drift_estimate_keeps_the_covered_frames(
    viewer, qtbot, dock, drifting, monkeypatch
):
    stack, _ = drifting
    viewer.add_image(stack.copy(), name="drifting")
    select_input(dock, "drifting")
    dock.set_param("magnification", 2)
    dock.set_param("drift_time_averaging", 20)
    dock.drift.set_mode("estimate")
    gate = WorkerGate(monkeypatch, after=1)
    assert dock.run()
    gate.wait_paused()  # the run's first update: its drift estimate's first block
    assert dock.stop()
    gate.release()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    facts = dock.last_result_layer.metadata[PROVENANCE_KEY]["result"]
    assert facts["stopped_early"] and facts["drift"]["stopped_early"]
    assert facts["drift"]["frames"] == 40 and facts["frames_analysed"] <= 40
    status = dock.panel.status.text()
    assert status.startswith("Stopped early") and "estimate stopped after frame 39" in status


def test_a_t_c_y_x_layer_is_read_by_its_shape(viewer, qtbot, dock, drifting):
    """An ImageJ hyperstack opens in napari as (T, C, Y, X): 120 frames of 2 channels, not 120
    channels; its drift is estimated on channel 0's frames, its channels reconstructed."""
    stack, truth = drifting
    offset = np.array([0.0, 0.0])
    hyper = np.stack([stack, _blinking_stack(truth + offset, seed=3, blink_seed=8)], axis=1)
    viewer.add_image(hyper.copy(), name="hyperstack")
    select_input(dock, "hyperstack")
    assert _registration(dock).native.isVisibleTo(dock)
    dock.set_param("magnification", 2)
    dock.set_param("drift_time_averaging", 20)
    dock.drift.set_mode("estimate")
    assert dock.drift.estimate()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    trace = dock.drift.trace
    assert trace.shifts.shape == (len(stack), 2)  # the frames, along axis 0
    error = trace.shifts - (truth - truth[0])
    assert math.sqrt(np.mean(error**2)) < 0.15
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    names = sorted(ly.name for ly in viewer.layers if ly.name.startswith("eSRRF · hyperstack"))
    assert len(names) == 2 and names[0].startswith("eSRRF · hyperstack ch0")
    facts = viewer.layers[names[0]].metadata[PROVENANCE_KEY]["result"]
    assert facts["channel_axis"] == 1 and facts["n_channels"] == 2
    np.testing.assert_array_equal(viewer.layers["hyperstack"].data, hyper)


def test_the_sweep_of_channels_tunes_on_channel_0_with_its_drift(viewer, qtbot, dock, drifting):
    stack, truth = drifting
    channels = np.stack([stack, _blinking_stack(truth, seed=3, blink_seed=8)])  # (C, T, Y, X)
    viewer.add_image(channels, name="two colours")
    select_input(dock, "two colours")
    dock.set_param("magnification", 2)
    dock.set_param("drift_time_averaging", 20)
    dock.drift.set_mode("estimate")
    panel = dock.sweep
    panel.radii_edit.setText("1, 2")
    panel.sensitivities_edit.setText("1")
    assert panel.run(), panel.status.text()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=120_000)
    result = panel.result
    assert np.isfinite(result.rsp).all() and result.drift is not None
    assert result.drift.shifts.shape[0] == result.frames  # channel 0's frames, once
    assert result.params.drift_correction  # "Use best" keeps it on


def test_other_layers_of_the_inputs_shape_are_reconstructed_as_its_channels(viewer, qtbot, dock):
    """napari opens a multi-channel file as one layer per channel: 'More channels' lists the
    layers of the input's shape, and the checked ones are registered to the input."""
    from skimage.registration import phase_cross_correlation

    offset = np.array([1.5, -2.0])
    still = np.zeros((60, 2))
    first = _blinking_stack(still, seed=3)
    second = np.random.default_rng(11).permutation(_blinking_stack(still + offset, seed=3))
    viewer.add_image(first.copy(), name="cells [0]")
    viewer.add_image(second.copy(), name="cells [1]")
    viewer.add_image(np.zeros((60, 16, 16), np.float32), name="other shape")
    select_input(dock, "cells [0]")
    listed = dock.channel_layers
    assert [ly.name for ly in listed._layers] == ["cells [1]"]
    assert not _registration(dock).native.isVisibleTo(dock)
    listed.select([viewer.layers["cells [1]"]])
    assert _registration(dock).native.isVisibleTo(dock)
    dock.set_param("magnification", 2)
    _registration(dock).value = "translation"
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    results = [viewer.layers[f"eSRRF · cells [{c}] [M2 R1.5 S1]"] for c in (0, 1)]
    facts = results[0].metadata[PROVENANCE_KEY]["result"]
    assert facts["channel_names"] == ["cells [0]", "cells [1]"]
    assert np.abs(np.array(facts["registration"]["shifts"][1]) - offset).max() < 0.1
    left, _, _ = phase_cross_correlation(results[0].data[0], results[1].data[0], upsample_factor=20)
    assert np.hypot(*left) < 0.3, left
    np.testing.assert_array_equal(viewer.layers["cells [1]"].data, second)
    listed.select([])
    assert not _registration(dock).native.isVisibleTo(dock)


def test_a_trace_stays_with_its_stack_and_the_provenance_says_where_it_came_from(
    viewer, qtbot, dock, drifting, tmp_path
):
    """Issue 26 item 10: after Estimate drift on 'a', choosing 'b' (the same frame count) kept
    a's trace; the run on b was corrected with a's 3.7 px drift and its provenance did not
    say where the trace came from."""
    stack, _ = drifting
    viewer.add_image(stack.copy(), name="a")
    still = np.random.default_rng(5).poisson(40, stack.shape).astype(np.float32)
    viewer.add_image(still, name="b")
    select_input(dock, "a")
    dock.set_param("magnification", 2)
    dock.set_param("drift_time_averaging", 20)
    dock.drift.set_mode("estimate")
    assert dock.drift.estimate()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    assert dock.drift.current_mode == "trace" and dock.drift.trace is not None
    path = dock.drift.save(tmp_path / "a.csv")

    select_input(dock, "b")
    assert dock.drift.trace is None and dock.drift.current_mode == "estimate"
    assert "dropped: the input is now 'b'" in dock.drift.info.text()
    assert dock.params().drift_correction  # still on: the run on b estimates b's drift

    assert dock.drift.load(path)  # loaded for b by the user: used, and named as such
    assert dock.drift.trace_layer is not None and dock.drift.current_mode == "trace"
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=120_000)
    qtbot.waitUntil(
        lambda: "drift_trace" in dock.last_result_layer.metadata[PROVENANCE_KEY], timeout=5_000
    )
    record = dock.last_result_layer.metadata[PROVENANCE_KEY]
    assert record["input"] == "b" and record["drift_trace"] == "loaded from a.csv"
    np.testing.assert_array_equal(viewer.layers["a"].data, stack)
