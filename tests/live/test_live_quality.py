"""A live eSRRF's quality track and "acquire until good enough" (issue 28 items 2 and 5).

The track's numbers are checked against the analyses run independently on the offline job's
reconstruction of the same first frames and on NumPy's mean of those frames; the session's
result stays byte-equal to the offline job (the measurement only reads the reconstruction).
The plateau rule is checked against the error of the reconstruction against the truth of
simulated stacks written here (filaments, blinking emitters, a Gaussian PSF, Poisson noise).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from napari_gpuscope import live
from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf._qnr import error_map

from .camera import make_core, time_series
from .test_live import WAIT, blinking, offline

DEVICE = "cpu"


def _feed(stack: np.ndarray, params, **options) -> live.LiveSession:
    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", params, device=DEVICE, capacity=len(stack), **options)
    session.quality.max_share = None  # every measurement due, whatever this CPU's load
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT)
    return session


@pytest.mark.parametrize("frames_per_timepoint", [0, 10])
def test_the_track_measures_the_running_reconstruction_and_leaves_it_unchanged(
    frames_per_timepoint,
):
    stack = blinking(20, size=32)
    params = esrrf.EsrrfParams(magnification=2, frames_per_timepoint=frames_per_timepoint)
    session = _feed(stack, params, measure_every=5)
    expected = offline("esrrf", None, stack, params)
    assert session.result().image.tobytes() == expected.image.tobytes()
    points = session.track()
    if frames_per_timepoint:  # each time point's reconstruction, its frames counted anew
        assert [(p.timepoint, p.frames) for p in points] == [(0, 5), (0, 10), (1, 5), (1, 10)]
    else:
        assert [(p.timepoint, p.frames) for p in points] == [(0, 5), (0, 10), (0, 15), (0, 20)]
    cumulative = esrrf.EsrrfParams(magnification=2)
    for point in points:
        first = point.timepoint * frames_per_timepoint
        frames = stack[first : first + point.frames]
        image = offline("esrrf", None, frames, cumulative).image[0]
        decorrelation = esrrf.decorrelation_resolution(image, device=DEVICE).resolution
        assert point.resolution_px == pytest.approx(decorrelation, rel=1e-6)
        # On an eSRRF image the decorrelation sees the pixel grid: said, never a resolution.
        assert point.finding == "limited by the pixel grid" and decorrelation < 2.5
        assert point.resolution(0.1, 2) is None
        widefield = frames.astype(np.float64).mean(axis=0)
        rsp = error_map(image, widefield, 2).rsp
        assert point.rsp_error == pytest.approx(1 - rsp, rel=1e-4, abs=1e-6)
        assert point.seconds > 0
    facts = session.quality_facts()["quality"]
    assert facts["measure_every"] == 5 and len(facts["track"]) == len(points)
    assert facts["good_enough"] is None and facts["good_enough_rule"] is None


def test_good_enough_calls_back_once_and_a_script_stops_the_mda():
    stack = blinking(60, size=32)
    core, camera = make_core(stack, exposure_ms=50.0)  # 3 s of acquisition
    rule = live.PlateauRule(change=0.99, window=1)  # fires at the second measurement
    session = live.attach(core, "esrrf", {"magnification": 2}, device=DEVICE, good_enough=rule)
    session.quality.max_share = None  # every measurement due, whatever this CPU's load
    fired = []
    session.on_good_enough(fired.append)
    session.on_good_enough(lambda _: core.mda.cancel())
    core.mda.run(time_series(len(stack)))  # returns once cancelled
    assert session.wait(WAIT)
    assert len(fired) == 1 and fired[0] is session.good_enough
    assert session.good_enough.frames == 20
    assert camera.index < len(stack), "the callback stopped the acquisition"
    n = session.frames_processed
    assert 20 <= n < len(stack)
    expected = offline("esrrf", None, stack[:n], esrrf.EsrrfParams(magnification=2))
    assert session.result().image.tobytes() == expected.image.tobytes()
    facts = session.quality_facts()["quality"]
    assert facts["good_enough"]["frames"] == 20
    assert facts["good_enough_rule"]["words"] == rule.describe()
    late = []
    session.on_good_enough(late.append)  # a callback added after it fired is called at once
    assert late == [session.good_enough]


def test_stop_when_good_enough_stops_the_session_not_the_acquisition():
    stack = blinking(40, size=32)
    rule = live.PlateauRule(change=0.99, window=1)
    session = _feed(stack, {"magnification": 2}, good_enough=rule, stop_when_good_enough=True)
    assert session.good_enough.frames == 20
    assert session.frames_processed == 20 and session.result().stopped_early


def test_measurements_beyond_their_share_of_the_worker_time_are_skipped_and_counted():
    stack = blinking(20, size=32)
    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", {"magnification": 2}, device=DEVICE, measure_every=5)
    assert session.quality.max_share == live.MAX_SHARE
    session.quality.max_share = 1e-12  # the first measurement already took more
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT)
    assert [p.frames for p in session.track()] == [5]
    assert session.quality.skipped == 3 and session.quality_facts()["quality"]["skipped"] == 3


def test_a_resolution_in_the_inputs_unit_only_when_there_is_one():
    valid = live.QualityPoint(10, 0, 3.0, "", 0.05, 0.1)
    limited = live.QualityPoint(10, 0, 2.1, "limited by the pixel grid", 0.05, 0.1)
    assert valid.resolution(0.1, 2) == pytest.approx(0.15)  # 3 output px of 0.05 µm
    assert valid.resolution(None, 2) is None and limited.resolution(0.1, 2) is None
    stack = blinking(10, size=32)
    feed = live.FrameFeed()
    session = live.attach(feed, "esrrf", {"magnification": 2}, device=DEVICE, measure_every=10)
    assert session.pixel_size is None  # a feed says no pixel size
    session.set_scale(0.1, "µm")
    for frame in stack:
        feed.push(frame)
    feed.end()
    assert session.wait(WAIT)
    (row,) = session.track_table()
    assert (row["frames"], row["unit"], row["resolution"]) == (10, "µm", None)
    assert row["finding"] == "limited by the pixel grid"


def test_bad_options_are_said():
    with pytest.raises(ValueError, match="for a live eSRRF"):
        live.attach(live.FrameFeed(), "tv", {"weight": 1.0}, device=DEVICE, good_enough=True)
    with pytest.raises(ValueError, match="needs a rule"):
        live.attach(live.FrameFeed(), "esrrf", {}, device=DEVICE, stop_when_good_enough=True)
    with pytest.raises(ValueError, match="measure_every must be > 0"):
        live.attach(live.FrameFeed(), "esrrf", {}, device=DEVICE, measure_every=0, good_enough=True)
    with pytest.raises(TypeError, match="good_enough must be"):
        live.attach(live.FrameFeed(), "esrrf", {}, device=DEVICE, good_enough=0.05)
    with pytest.raises(ValueError, match="change is a fraction"):
        live.PlateauRule(change=5)


# -- acquire until good enough, against the truth ----------------------------------------------


def _pixel_integrated(centres: np.ndarray, size: int, sigma: float) -> np.ndarray:
    """``(emitters, size)``: each emitter's Gaussian integrated over each pixel (one axis)."""
    from scipy.special import erf

    edges = np.arange(size + 1) - 0.5
    cdf = 0.5 * (1 + erf((edges[None, :] - centres[:, None]) / (math.sqrt(2) * sigma)))
    return np.diff(cdf, axis=1)


def simulate(frames, *, size, density, on, photons, background, seed, sigma=1.3):
    """Blinking emitters on four smooth filaments: the stack and the emitters (input px)."""
    rng = np.random.default_rng(seed)
    emitters = []
    for _ in range(4):
        x = np.linspace(4, size - 4, 2000)
        y = rng.uniform(0.25, 0.75) * size + rng.uniform(-0.5, 0.5) * (x - size / 2)
        y += rng.uniform(2, 5) * np.sin(x / rng.uniform(20, 40) * 2 * np.pi + rng.uniform(0, 6))
        if rng.random() < 0.5:
            x, y = y, x
        keep = (y > 4) & (y < size - 4)
        path = np.stack([y[keep], x[keep]], axis=1)
        arc = np.r_[0, np.cumsum(np.hypot(*np.diff(path, axis=0).T))]
        s = rng.uniform(0, arc[-1], rng.poisson(density * arc[-1]))
        emitters.append(np.stack([np.interp(s, arc, path[:, 0]), np.interp(s, arc, path[:, 1])], 1))
    points = np.concatenate(emitters)
    rows = _pixel_integrated(points[:, 0], size, sigma)
    cols = _pixel_integrated(points[:, 1], size, sigma)
    # Two-state blinking with a stationary on-fraction `on` (mean on-time 2 frames).
    off_rate = 0.5
    on_rate = off_rate * on / (1 - on)
    lit = rng.random(len(points)) < on
    stack = np.empty((frames, size, size), np.uint16)
    for t in range(frames):
        flip = rng.random(len(points))
        lit = np.where(lit, flip > off_rate, flip < on_rate)
        mean = background + photons * np.einsum("ky,kx->yx", rows[lit], cols[lit])
        stack[t] = rng.poisson(mean)
    return stack, points


def true_error(image: np.ndarray, points: np.ndarray, magnification: int) -> float:
    """1 - Pearson correlation of a reconstruction with the emitters drawn on its grid and
    blurred to 1.5 output px (sigma): the resolution eSRRF reaches at best here (the PSF's
    sigma, 1.3 input px, halved), the pixel grid's half-pixel offset (NanoPyx's geometry)
    within it."""
    from scipy import ndimage

    truth = np.zeros(image.shape)
    index = np.clip(((points + 0.5) * magnification).astype(int), 0, image.shape[0] - 1)
    np.add.at(truth, (index[:, 0], index[:, 1]), 1.0)
    truth = ndimage.gaussian_filter(truth, 1.5)
    return 1.0 - float(np.corrcoef(image.ravel(), truth.ravel())[0, 1])


STACKS = {
    "sparse, bright": {"density": 2.0, "on": 0.1, "photons": 300, "background": 50, "seed": 1},
    "dense, dim": {"density": 4.0, "on": 0.05, "photons": 150, "background": 80, "seed": 2},
}
TRUTH_RULE = live.PlateauRule(change=0.05, window=3)
"""Where the error against the truth stops improving: < 5 % over the last 3 measurements."""


@pytest.mark.parametrize(
    "name",
    [
        "sparse, bright",
        pytest.param(
            "dense, dim",
            marks=pytest.mark.xfail(
                strict=True,
                reason=(
                    "not met (issue 28 item 5 open): the RSP error keeps improving after the "
                    "true error has levelled off; measured: live stop 90 frames, truth 60"
                ),
            ),
        ),
    ],
)
def test_the_live_stop_frame_is_where_the_error_against_the_truth_stops_improving(
    name, monkeypatch
):
    """The session's rule (the default, on its RSP error) fires within 10 % of the frame where
    the same kind of rule (:data:`TRUTH_RULE`), applied at the same frames to the error of the
    same reconstructions against the truth, fires."""
    from napari_gpuscope.live import _live_esrrf

    stack, points = simulate(150, size=64, **STACKS[name])
    images: dict[int, np.ndarray] = {}
    measure = _live_esrrf.measure_quality

    def keep_image(image, *args, **kwargs):  # the very reconstructions the track measured
        images[kwargs["frames"]] = np.array(image)
        return measure(image, *args, **kwargs)

    monkeypatch.setattr(_live_esrrf, "measure_quality", keep_image)
    session = _feed(stack, esrrf.EsrrfParams(magnification=2), good_enough=True)
    track = session.track()
    errors = [true_error(images[p.frames], points, 2) for p in track]
    truth_stop = next(
        (p.frames for i, p in enumerate(track) if TRUTH_RULE.fires(errors[: i + 1])), None
    )
    fired = session.good_enough
    print(name, "true errors", [round(e, 4) for e in errors])
    print(name, "RSP errors", [round(p.rsp_error, 4) for p in track])
    print(name, "live stop", None if fired is None else fired.frames, "truth stop", truth_stop)
    assert truth_stop is not None and fired is not None
    assert abs(fired.frames - truth_stop) <= 0.1 * truth_stop


def test_the_rule_is_applied_in_the_worker_and_a_new_rule_forgets_the_old_firing():
    """Found in review: ticking "Say when..." mid-session ran a script's callbacks (an MDA's
    cancel) on the GUI thread; unticking after the rule fired left "good enough" recorded
    under no rule; an error that doubled was said to have "changed < 8 %"."""
    import threading

    from napari_gpuscope.live import PlateauRule, QualityPoint, QualityTrack

    track = QualityTrack(every=10)
    called_in = []
    track.on_good_enough(lambda fired: called_in.append(threading.current_thread().name))

    def add(frames, error):
        worker = threading.Thread(
            target=track.add, args=(QualityPoint(frames, 0, 2.0, "", error, 0.0),), name="worker"
        )
        worker.start()
        worker.join()

    for frames, error in [(10, 0.05), (20, 0.06), (30, 0.08), (40, 0.10)]:
        add(frames, error)
    track.watch(PlateauRule())  # the points so far satisfy it: nothing runs in this thread
    assert called_in == [] and track.good_enough is None
    add(50, 0.12)
    assert called_in == ["worker"]
    assert "rose by 100 %" in track.good_enough.describe()  # 0.06 -> 0.12, never "< 8 %"
    track.watch(None)
    assert track.good_enough is None and track.summary()["good_enough"] is None
