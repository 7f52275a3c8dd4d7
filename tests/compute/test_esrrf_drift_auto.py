"""The automatic drift block length (``time_averaging=None``, issue 27 item 3).

Oracle: the simulator's true drift (tests/compute/esrrf_drift_sim.py). For each kind of
drift the automatic choice is compared with every fixed length it could have chosen, each
scored against the truth. The full 100-2,000-frame sweep is benchmarks/drift_block_length.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack, true_drift
from job_helpers import stop_after

from napari_gpuscope.batch.recipes import Recipe, load_recipe
from napari_gpuscope.compute.esrrf import (
    DriftParams,
    DriftResult,
    EsrrfParams,
    estimate_drift,
    iter_estimate_drift,
)
from napari_gpuscope.compute.esrrf._drift_blocks import auto_lengths, drift_blocks

N_FRAMES = 200
SHAPE = (48, 48)
EMITTERS = 60  # ~15 on a frame: blocks of a few frames barely correlate


def drifts(n: int) -> dict[str, np.ndarray]:
    """The issue's four kinds of drift, ~3 px over the stack plus 0.03 px per-frame jitter
    (settling: 0.6 px in the first 10 % of the frames, as the issue's example)."""
    u = np.arange(n) / n
    jitter = {k: np.random.default_rng(k).normal(0.0, 0.03, (n, 2)) for k in range(4)}
    settle = (1 - np.exp(-2 * u)) / (1 - np.exp(-2))
    out = {
        "linear": np.column_stack([2.5 * u, -1.5 * u]) + jitter[0],
        "settling": 3.0 * settle[:, None] * np.array([0.8, -0.6]) + jitter[1],
        "oscillating": true_drift(n, seed=5),
        "still": jitter[3],
    }
    return {name: shifts - shifts[0] for name, shifts in out.items()}


def rms(result: DriftResult, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((result.shifts - truth) ** 2)))


SEEDS = (1, 2)
"""Two stacks a case (blinking and noise): the best *fixed* length is one length for the
case, scored by its mean RMS error over the stacks, as the automatic choice is."""

# Cases beyond the bound would be strict xfails (a reason per case), so a change that fixes
# them is noticed. None since the pooled bias (2026-11-30; auto / best fixed mean RMS, px,
# measured then): settling 0.103 / 0.112 (32 and 24 frames chosen; Goldenshluger-Lepski's
# 0.157 was a strict xfail), oscillating 0.098 / 0.096 (48 and 48; it was 0.133). Two stacks a
# case: over the 30-32 stacks a case of benchmarks/drift_block_length_rules.py's first five sets
# the 200-frame oscillating case was beyond 1.2x (1.24); with seeds 501-506, 36-38 a case, no
# case is, though each set alone has 2-5 (issue 27 item 3, open).
SHORT: dict[str, str | None] = dict.fromkeys(("linear", "settling", "oscillating", "still"))


def errors_of(kind: str) -> tuple[float, dict[int, float], list[int]]:
    """Mean RMS error of the automatic choice, of each fixed length, and the lengths chosen."""
    truth = drifts(N_FRAMES)[kind]
    auto, fixed, chosen = [], {}, []
    for seed in SEEDS:
        stack, _ = blinking_drifting_stack(truth, shape=SHAPE, n_emitters=EMITTERS, seed=seed)
        result = estimate_drift(stack, time_averaging=None, device="cpu")
        auto.append(rms(result, truth))
        chosen.append(result.time_averaging_chosen)
        for length in auto_lengths(N_FRAMES):
            try:
                error = rms(estimate_drift(stack, time_averaging=length, device="cpu"), truth)
            except ValueError:  # too few blocks with structure: a length auto cannot pick
                error = np.inf
            fixed.setdefault(length, []).append(error)
    return float(np.mean(auto)), {k: float(np.mean(v)) for k, v in fixed.items()}, chosen


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(k, marks=pytest.mark.xfail(reason=why, strict=True)) if why else k
        for k, why in SHORT.items()
    ],
)
def test_auto_is_within_1_2x_of_the_best_fixed_length(kind):
    error, fixed, chosen = errors_of(kind)
    best = min(fixed.values())
    print(kind, chosen, round(error, 3), {k: round(v, 3) for k, v in fixed.items()})
    if best <= 0.1:
        assert error <= 0.15, (kind, chosen, error, fixed)
    assert error <= 1.2 * best, (kind, chosen, error, fixed)


def test_the_result_says_the_length_it_chose_everywhere():
    truth = drifts(120)["linear"]
    stack, _ = blinking_drifting_stack(truth, shape=(32, 32), n_emitters=40, seed=2)
    result = estimate_drift(stack, time_averaging="auto", device="cpu")
    chosen = result.time_averaging_chosen
    assert result.params.time_averaging is None and result.automatic  # params stay "auto"
    assert chosen in auto_lengths(120)
    assert result.block_frames == drift_blocks(120, chosen)
    assert f"blocks of {chosen} frames (chosen automatically)" in result.describe()
    summary = result.summary()
    assert summary["time_averaging_chosen"] == chosen and summary["time_averaging_automatic"]
    choice = summary["block_length_choice"]
    assert choice["time_averaging"] == chosen and choice["rule"] == "pooled bias"
    assert [row[0] for row in choice["candidates"]] == auto_lengths(120)
    assert f"# frames per block (time_averaging): {chosen} (chosen automatically)" in (
        result.csv_text()
    )
    # The same blocks as the fixed estimate with that number: the choice changes nothing else.
    fixed = estimate_drift(stack, time_averaging=chosen, device="cpu")
    np.testing.assert_array_equal(result.shifts, fixed.shifts)
    assert fixed.time_averaging_chosen == chosen and not fixed.automatic
    assert fixed.summary()["block_length_choice"] is None


def test_auto_is_the_default_and_the_word_auto_reads_as_none():
    """Automatic since 2026-11-30 (benchmarks/runs/2026-11-30-cpu-drift-auto-default.md); a
    number is still a number."""
    assert DriftParams().time_averaging is None
    assert DriftParams(time_averaging="auto") == DriftParams()
    assert EsrrfParams().drift_params().time_averaging is None
    assert EsrrfParams(drift_time_averaging="auto").drift_time_averaging is None
    assert EsrrfParams(drift_time_averaging=50).drift_params().time_averaging == 50
    with pytest.raises(ValueError, match="time_averaging"):
        DriftParams(time_averaging="often")


def test_a_stack_too_short_for_candidates_gets_two_blocks():
    assert auto_lengths(9) == [4] and auto_lengths(3) == [1]
    assert drift_blocks(9, None) == [(0, 4), (4, 9)]
    with pytest.raises(ValueError, match="at least 2 frames"):
        drift_blocks(1, None)
    y, x = np.mgrid[:32, :32]
    blob = 1000 * np.exp(-((y - 15) ** 2 + (x - 16) ** 2) / 8)
    stack = np.random.default_rng(0).poisson(100 + np.stack([blob] * 8)).astype(np.uint16)
    result = estimate_drift(stack, time_averaging=None, device="cpu")
    assert result.time_averaging_chosen == 4 and result.shifts.shape == (8, 2)


def test_recipes_keep_their_number_and_their_hash(tmp_path):
    """A recipe stores its params dict, so an explicit number stays, with its hash: the drift
    job's recipes always wrote ``time_averaging``, eSRRF's wrote ``drift_time_averaging``
    when it was not the default (50)."""
    old_drift = {"reference": "first", "time_averaging": 50, "max_drift": None, "smoothing": 0.0}
    saved = Recipe.from_data(
        {"schema_version": 1, "method": "esrrf", "job": "drift", "params": old_drift}
    )
    loaded = load_recipe(saved.save(tmp_path / "drift.yaml"))
    assert loaded.hash() == saved.hash() and loaded.params_model().time_averaging == 50
    assert loaded.params == old_drift
    old_esrrf = {**OLD_ESRRF, "drift_correction": True, "drift_time_averaging": 20}
    recipe = Recipe.from_data({"schema_version": 1, "method": "esrrf", "params": old_esrrf})
    loaded = load_recipe(recipe.save(tmp_path / "esrrf.yaml"))
    assert loaded.hash() == recipe.hash() and loaded.params == old_esrrf
    assert loaded.params_model().drift_time_averaging == 20
    # New recipes are automatic and say so (null); a fixed 50 is written as eSRRF's recipes
    # always wrote it: left out.
    auto = Recipe.from_params(DriftParams())
    assert auto.params["time_averaging"] is None and auto.params_model().time_averaging is None
    esrrf_auto = Recipe.from_params(EsrrfParams())
    assert esrrf_auto.params["drift_time_averaging"] is None
    assert load_recipe(esrrf_auto.save(tmp_path / "auto.yaml")).params_model() == EsrrfParams()
    fifty = Recipe.from_params(EsrrfParams(drift_time_averaging=50))
    assert "drift_time_averaging" not in fifty.params
    assert fifty.params_model().drift_time_averaging == 50
    assert EsrrfParams.from_dict(EsrrfParams(drift_time_averaging=50).to_dict()) == (
        EsrrfParams(drift_time_averaging=50)
    )


# What the code before issue 27 wrote for EsrrfParams(drift_correction=True): drift fields at
# their defaults are not written (added_later), drift_time_averaging's default was 50.
OLD_ESRRF = {
    "magnification": 5, "radius": 1.5, "sensitivity": 1.0, "frames_per_timepoint": 0,
    "temporal": "AVG", "intensity_weighting": True, "macro_pixel_correction": True,
    "geometry": "nanopyx", "frame_gap": 0,
}  # fmt: skip


def test_an_old_esrrf_recipe_at_the_old_default_keeps_its_hash(tmp_path):
    recipe = Recipe.from_data(
        {"schema_version": 1, "method": "esrrf", "params": {**OLD_ESRRF, "drift_correction": True}}
    )
    loaded = load_recipe(recipe.save(tmp_path / "old.yaml"))
    assert loaded.hash() == recipe.hash()


def test_an_old_esrrf_recipe_at_the_old_default_runs_with_50_frames(tmp_path):
    recipe = Recipe.from_data(
        {"schema_version": 1, "method": "esrrf", "params": {**OLD_ESRRF, "drift_correction": True}}
    )
    assert load_recipe(recipe.save(tmp_path / "old.yaml")).params_model().drift_time_averaging == 50


def test_a_stop_during_the_pilot_chooses_from_the_frames_read_and_keeps_two_blocks():
    truth = drifts(160)["linear"]
    stack, _ = blinking_drifting_stack(truth, shape=(32, 32), n_emitters=40, seed=3)
    job = iter_estimate_drift(stack, time_averaging=None, frames_per_chunk=8, device="cpu")
    result, _ = stop_after(job, 12)  # 96 of 160 frames read by the pilot
    assert result.stopped_early and result.block_length_choice["stopped"]
    chosen = result.time_averaging_chosen
    assert len(result.block_frames) == 2 and result.shifts.shape == (2 * chosen, 2)
    error = result.shifts - (truth[: 2 * chosen] - truth[0])
    assert np.sqrt(np.mean(error**2)) < 0.3


@pytest.mark.parametrize("length", [8, 12, 16, 24, 32])
def test_the_bias_construction_matches_its_closed_form_on_a_quadratic_drift(length):
    """A candidate's construction (block means, spline, end slope, frame 0), which
    benchmarks/drift_block_length_rules.py applies to the true drift for the bias a perfect
    estimate would see. On a drift ``k t^2`` in equal blocks of
    ``L`` frames it has a closed form, derived here without the code: a block's mean is
    ``k (c^2 + (L^2 - 1) / 12)`` (``c`` its centre), a constant offset that the cubic spline
    and the end parabola (exact for a quadratic) carry; frame 0 is reached by the tangent at
    the first centre ``c0 = (L - 1) / 2``, so relative to frame 0 the trace is ``k c0^2`` too
    high between the centres, ``k t (2 c0 - t)`` before the first and ``k (c0^2 - (t -
    cl)^2)`` after the last centre ``cl``: the frame-0 offset of extrapolating half a block."""
    from napari_gpuscope.compute.esrrf._drift_auto import _trace

    n, k = 96, np.array([2e-4, -1e-4])  # 96 frames: whole blocks of every length here
    t = np.arange(n, dtype=np.float64)
    drift = k * t[:, None] ** 2
    blocks = drift_blocks(n, length)
    centres = np.array([(a + b - 1) / 2 for a, b in blocks])
    errors = np.full((len(blocks), 2), 1e-9)  # noiseless: the end rule sees the curvature
    means = np.array([drift[first:stop].mean(0) for first, stop in blocks])
    error = _trace(centres, means, n, 0.0, errors) - drift
    c0, cl = centres[0], centres[-1]
    closed = np.where(t < c0, t * (2 * c0 - t), np.where(t > cl, c0**2 - (t - cl) ** 2, c0**2))
    np.testing.assert_allclose(error, closed[:, None] * k, rtol=1e-7, atol=1e-12)
