"""The live flat-field fit (issue 28 item 2): a BaSiC profile refitted as a grid scan's tiles
arrive, against the offline fit job over the same tiles (byte for byte on the CPU) and against
the true flatfield of a simulation written here (not the plugin's sample data).

Every wait is on an event (a fit's end, the session's end); nothing sleeps to pace a thread.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
pytest.importorskip("useq")

from scipy import ndimage

from napari_gpuscope import live
from napari_gpuscope.compute.flatfield import BasicParams, ShadingProfile
from napari_gpuscope.live._live_fit import MIN_TILES

from .camera import make_core, time_series
from .test_live import offline

DEVICE = "cpu"
WAIT = 300  # seconds: a bound on a hung session, never a pacing
# Few passes and iterations: the CPU fits of these tests take about a second each. Exactness
# and the improvement with the tiles do not depend on the tolerances.
PARAMS = BasicParams(max_reweight_iterations=5, max_iterations=200)


def scan(tiles: int, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A grid scan's tiles under a known vignetting: each tile a different patch of textured
    sample (smooth log-normal texture, its own brightness), times the flatfield, with Poisson
    noise. Returns the uint16 tiles and the true flatfield (mean 1)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] / (size - 1) - 0.5
    flat = 1.0 - 1.2 * ((yy - 0.05) ** 2 + (xx + 0.1) ** 2)  # off-centre, 0.6-1.2
    flat /= flat.mean()
    out = np.empty((tiles, size, size), np.uint16)
    for i in range(tiles):
        texture = ndimage.gaussian_filter(rng.standard_normal((size, size)), 2.0, mode="wrap")
        sample = rng.uniform(200, 400) * np.exp(0.45 * texture / texture.std())
        out[i] = rng.poisson(sample * flat)
    return out, flat


def flat_error(profile: ShadingProfile, truth: np.ndarray) -> float:
    """RMS relative error of the flatfield (both normalised to mean 1)."""
    flat = profile.flatfield / profile.flatfield.mean()
    return float(np.sqrt(np.mean((flat - truth) ** 2)))


def assert_same_profile(live_profile: ShadingProfile, expected: ShadingProfile) -> None:
    for name in ("flatfield", "darkfield", "baseline"):
        assert getattr(live_profile, name).tobytes() == getattr(expected, name).tobytes(), name
    assert live_profile.summary() == expected.summary()


def test_live_fit_over_an_mda_equals_the_offline_fit_over_the_same_tiles():
    tiles, _ = scan(MIN_TILES + 4)
    core, camera = make_core(tiles)
    session = live.attach(core, "flatfield", PARAMS, job="fit", device=DEVICE)
    core.mda.run(time_series(len(tiles)))
    assert session.wait(WAIT)
    assert camera.index == len(tiles)
    assert session.frames_received == session.frames_processed == len(tiles)
    assert session.frames_dropped == session.frames_pending == 0
    result = session.result()
    assert isinstance(result, ShadingProfile)
    assert_same_profile(result, offline("flatfield", "fit", tiles, PARAMS))
    latest, covered = session.latest_with_count()
    assert covered == len(tiles) and latest.tobytes() == result.flatfield.tobytes()
    session.detach()


def test_the_profile_improves_as_tiles_arrive():
    """The first fit (MIN_TILES tiles) against the last (40): the flatfield's error against
    the truth falls as the sample's structure averages out, about as 1 / sqrt(tiles), i.e. to
    sqrt(10 / 40) = 0.5 of the first's; asserted below 0.75 of it (halfway to no change)."""
    last = 40
    tiles, truth = scan(last, seed=1)
    feed = live.FrameFeed()
    session = live.attach(feed, "flatfield", PARAMS, job="fit", device=DEVICE)
    for tile in tiles[: MIN_TILES - 1]:
        feed.push(tile)
    assert session.latest() is None  # no fit below MIN_TILES tiles (the stop test checks it)
    feed.push(tiles[MIN_TILES - 1])
    assert session.wait_for_frames(MIN_TILES, WAIT)
    first = session.result()  # the latest complete fit, while the session runs
    assert session.frames_processed == MIN_TILES
    for tile in tiles[MIN_TILES:]:
        feed.push(tile)
    feed.end()
    assert session.wait(WAIT)
    final = session.result()
    assert session.frames_processed == last and session.method.fits >= 2
    assert_same_profile(first, offline("flatfield", "fit", tiles[:MIN_TILES], PARAMS))
    assert_same_profile(final, offline("flatfield", "fit", tiles, PARAMS))
    uncorrected = float(np.sqrt(np.mean((truth - 1) ** 2)))
    assert flat_error(first, truth) < uncorrected  # MIN_TILES is worth fitting
    assert flat_error(final, truth) < 0.75 * flat_error(first, truth)


def test_tiles_beyond_the_limit_are_refused_and_the_fit_covers_those_kept():
    tiles, _ = scan(MIN_TILES + 5, seed=2)
    feed = live.FrameFeed()
    keep = MIN_TILES + 2
    session = live.attach(feed, "flatfield", PARAMS, job="fit", device=DEVICE, max_frames=keep)
    for tile in tiles:
        feed.push(tile)
    feed.end()
    assert session.wait(WAIT)
    assert session.refused is not None
    assert f"at most {keep} tiles" in session.refused and "max_frames" in session.refused
    assert session.frames_processed == keep
    assert session.method.tiles_kept == keep
    assert session.frames_received == len(tiles)
    assert_same_profile(session.result(), offline("flatfield", "fit", tiles[:keep], PARAMS))


def test_the_memory_limit_is_said_in_bytes(monkeypatch):
    from napari_gpuscope.live import _live_fit

    tiles, _ = scan(4, seed=3)
    monkeypatch.setattr(_live_fit, "TILE_BYTES_LIMIT", 3 * tiles[0].nbytes)
    feed = live.FrameFeed()
    session = live.attach(feed, "flatfield", PARAMS, job="fit", device=DEVICE)
    for tile in tiles:
        feed.push(tile)
    feed.end()
    assert session.wait(WAIT)
    assert "at most 3 tiles" in session.refused and "GiB of host memory" in session.refused
    # The 4th tile is refused, whether it came after the refusal or was already kept (then
    # it was counted as pending, as if it would still be fitted).
    assert (session.frames_refused, session.frames_pending) == (1, 0)
    assert session.method.tiles_kept == session.frames_processed == 3
    # The end fits the 3 tiles kept (the job's minimum is 2), as the offline job would.
    assert_same_profile(session.result(), offline("flatfield", "fit", tiles[:3], PARAMS))


def test_stop_mid_fit_is_prompt_and_keeps_the_last_complete_fit():
    tiles, _ = scan(MIN_TILES + 5, seed=4)
    feed = live.FrameFeed()
    session = live.attach(feed, "flatfield", PARAMS, job="fit", device=DEVICE)
    held = {0: threading.Event(), 1: threading.Event()}  # a fit's index: at its first update
    resume = {0: threading.Event(), 1: threading.Event()}
    second_fit_yields: list[int] = []
    fitted: list[int] = []
    original = session.method.function

    def gated(images, *args, **kwargs):
        """The registry's fit job, its first two fits held at their first update."""
        index = len(fitted)
        fitted.append(images.shape[0])
        inner = original(images, *args, **kwargs)
        first = True
        try:
            while True:
                try:
                    update = next(inner)
                except StopIteration as end:
                    return end.value
                if index == 1:
                    second_fit_yields.append(1)
                if first and index in held:
                    first = False
                    held[index].set()
                    resume[index].wait(WAIT)
                yield update
        finally:
            inner.close()

    session.method.function = gated  # before any tile: the worker waits for the first
    for tile in tiles[:MIN_TILES]:
        feed.push(tile)
    assert held[0].wait(WAIT)
    for tile in tiles[MIN_TILES:]:  # while the first fit runs: the next covers them all
        feed.push(tile)
    resume[0].set()
    assert held[1].wait(WAIT)
    session.stop()  # Stop & keep while the second fit runs
    resume[1].set()
    assert session.wait(WAIT)
    assert fitted == [MIN_TILES, len(tiles)]
    assert second_fit_yields == [1]  # closed at its next update: no further pass was run
    assert session.frames_processed == MIN_TILES and session.frames_pending == 5
    result = session.result()
    assert not result.stopped_early  # a complete fit, over the first MIN_TILES tiles
    assert_same_profile(result, offline("flatfield", "fit", tiles[:MIN_TILES], PARAMS))
    session.detach()


def test_the_live_fit_refuses_what_it_cannot_take():
    with pytest.raises(ValueError, match="z-stacks"):
        live.attach(
            live.FrameFeed(), "flatfield", PARAMS, job="fit", device=DEVICE, frames_per_stack=4
        )
    with pytest.raises(TypeError, match="profile"):
        profile = ShadingProfile.from_arrays(np.ones((4, 4)))
        live.attach(
            live.FrameFeed(), "flatfield", PARAMS, job="fit", device=DEVICE, profile=profile
        )


def test_the_fits_optional_inputs_are_taken_as_offline():
    """A measured dark frame and a (Y, X) background mask, as the offline fit takes them."""
    tiles, _ = scan(MIN_TILES + 2, seed=7)
    tiles = tiles + np.uint16(100)  # the camera's offset, measured as the dark frame
    dark = np.full(tiles.shape[1:], 100.0, np.float32)
    mask = np.ones(tiles.shape[1:], np.uint8)
    mask[:4] = 0  # a strip the fit leaves out
    feed = live.FrameFeed()
    session = live.attach(
        feed, "flatfield", PARAMS, job="fit", device=DEVICE, dark_frame=dark, fitting_weight=mask
    )
    for tile in tiles:
        feed.push(tile)
    feed.end()
    assert session.wait(WAIT)
    weight = np.broadcast_to(mask, tiles.shape)
    expected = offline("flatfield", "fit", tiles, PARAMS, dark_frame=dark, fitting_weight=weight)
    assert expected.darkfield_source == "frame"
    assert_same_profile(session.result(), expected)


@pytest.mark.parametrize("name", ["dark_frame", "fitting_weight"])
def test_an_input_not_of_the_tiles_shape_ends_the_session_at_the_first_tile(name):
    """Said at the first tile, naming the input and both shapes, not ten tiles later by the
    first fit."""
    tiles, _ = scan(MIN_TILES, seed=8)
    feed = live.FrameFeed()
    wrong = np.ones((tiles.shape[1] + 2, tiles.shape[2]), np.float32)
    session = live.attach(feed, "flatfield", PARAMS, job="fit", device=DEVICE, **{name: wrong})
    feed.push(tiles[0])
    assert session.wait(WAIT)  # ended by itself, with one tile: no fit ran
    said = rf"live Fit profile failed: .*{name} has shape \(34, 32\); the tiles are \(32, 32\)"
    with pytest.raises(RuntimeError, match=said):
        session.result()
    session.detach()


@pytest.mark.parametrize(
    ("params", "said"),
    [
        (BasicParams(get_darkfield=True), "get_darkfield=True"),
        (BasicParams(camera_offset=100), "camera_offset=100"),
    ],
)
def test_a_dark_frame_with_another_darkfield_is_refused_at_attach(params, said):
    """Found in review: the conflict was said by the first fit, ten tiles into the scan."""
    dark = np.full((32, 32), 100.0, np.float32)
    with pytest.raises(ValueError, match=f"dark_frame cannot be combined with {said}"):
        live.attach(
            live.FrameFeed(), "flatfield", params, job="fit", device=DEVICE, dark_frame=dark
        )
