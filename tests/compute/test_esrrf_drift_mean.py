"""``reference="mean"`` measures each block against the mean of the *other* blocks, aligned
by their shifts (issue 26): a mean that holds the block itself pulled large drifts towards 0.
Oracles: the simulator's true drift (an independent forward model), the uncertainty
``reference="first"`` reports on the same stack, and the linear model of a mean reference
solved by hand."""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack
from job_helpers import stop_after

from napari_gpuscope.compute.esrrf import (
    DriftParams,
    _drift_mean,
    estimate_drift,
    iter_estimate_drift,
)
from napari_gpuscope.compute.esrrf._drift_mean import _mean_positions, _MeanReference, _Pass

FRAMES, BLOCK, DRIFT = 240, 30, 8.0


@pytest.fixture(scope="module")
def linear():
    """8 px of linear drift (dy 4.8, dx -6.4) over 8 blocks of 30 frames."""
    t = np.arange(FRAMES) / (FRAMES - 1)
    truth = np.column_stack([0.6 * DRIFT * t, -0.8 * DRIFT * t])
    stack, _ = blinking_drifting_stack(truth, shape=(96, 96), n_emitters=200, seed=3)
    return stack, truth


def block_errors(result, truth):
    """Each block's error against the true mean drift of its frames, less the errors' mean:
    a common offset (frame 0's extrapolated position, which every block is relative to) is
    no error of the trace's shape, which is what a mean reference measures."""
    blocks = np.array([truth[a:b].mean(0) for a, b in result.block_frames])
    errors = result.block_shifts - blocks
    return errors - errors.mean(0)


def test_a_large_drift_is_measured_against_the_mean_as_against_the_first_block(linear):
    """The blocks' errors are the size of their measurement noise: RMS within 3 times the
    per-block uncertainty ``sigma`` that ``reference="first"`` reports on the same stack (1
    sigma, from the blocks' halves; the RMS of 16 such errors exceeds 1.6 sigma with
    probability < 1 %, and 3 leaves room for the uncertainty's calibration, within 1.4 of
    the actual errors' RMS, test_the_block_uncertainty_covers_the_actual_errors). And no
    shrinking: the least-squares gain of the measured block shifts on the true ones is 1
    within 3 of its standard errors (``sigma / sqrt(sum (b - mean b)^2)``, times 1.4).

    The mean that held each block failed both: 0.28 px RMS off (11 times sigma, 0.025 px)
    and gains of 0.84 and 0.86, 25 and 29 standard errors short of 1."""
    stack, truth = linear
    first = estimate_drift(stack, reference="first", time_averaging=BLOCK, device="cpu")
    mean = estimate_drift(stack, reference="mean", time_averaging=BLOCK, device="cpu")
    sigma = first.rms_uncertainty
    assert np.isfinite(sigma) and sigma > 0
    errors = block_errors(mean, truth)
    assert float(np.sqrt(np.mean(errors**2))) < 3 * sigma
    blocks = np.array([truth[a:b].mean(0) for a, b in mean.block_frames])
    spread = blocks - blocks.mean(0)
    gain = (spread * (mean.block_shifts - mean.block_shifts.mean(0))).sum(0) / (spread**2).sum(0)
    standard_error = sigma / np.sqrt((spread**2).sum(0))
    assert np.all(np.abs(gain - 1) < 3 * 1.4 * standard_error), (gain, standard_error)
    refinement = mean.mean_refinement
    assert refinement["converged"] and 2 <= refinement["passes"] <= refinement["most_passes"]
    assert mean.summary()["mean_refinement"] == refinement
    assert first.mean_refinement is None and first.summary()["mean_refinement"] is None
    assert mean.shifts[0].tolist() == [0.0, 0.0]


def test_a_refinement_cut_short_by_its_cap_says_so(linear, monkeypatch):
    """One refinement cannot settle this drift (the plain mean's ridge puts the first pass
    about a pixel off): the result says that the cap was reached, and describe() tells."""
    stack, _ = linear
    monkeypatch.setattr(_drift_mean, "MEAN_REFINEMENTS", 1)
    result = estimate_drift(stack, reference="mean", time_averaging=BLOCK, device="cpu")
    refinement = result.mean_refinement
    assert refinement["passes"] == refinement["most_passes"] == 2
    assert not refinement["converged"] and refinement["largest_change_px"] > 0.1
    assert "had not settled after 2 passes" in result.describe()


@pytest.mark.parametrize("blocks", [2, 3, 7])
def test_shifts_against_the_others_mean_are_solved_for_the_positions(blocks):
    """Against the plain mean of the other blocks (all at their own place), block k measures
    ``x_k - mean_j!=k x_j``: a linear drift stretched by B / (B - 1). Solving the linear model
    gives the positions back, up to a common offset; with blocks entered at known offsets
    ``s_j``, block k measures ``x_k - mean_j!=k (x_j - s_j)``, solved as well."""
    rng = np.random.default_rng(blocks)
    edges = [(30 * k, 30 * (k + 1)) for k in range(blocks)]
    x = rng.normal(0.0, 3.0, (blocks, 2))
    for shifts in (np.zeros((blocks, 2)), rng.normal(0.0, 2.0, (blocks, 2))):
        measured = np.array(
            [x[k] - np.mean([x[j] - shifts[j] for j in range(blocks) if j != k], 0)
             for k in range(blocks)]
        )  # fmt: skip
        state = _Pass(measured, np.ones(blocks, bool), None, None, None, 0, blocks)
        reference = _MeanReference(None, 30 * blocks, 30 * blocks, shifts, np.ones(blocks, bool))
        positions = _mean_positions(state, reference, edges)
        offset = (positions - x).mean(0)
        np.testing.assert_allclose(positions - offset, x, atol=1e-9)
        # The offset chosen keeps the measured shifts' mean (the aligned mean's coordinates).
        np.testing.assert_allclose(positions.mean(0), measured.mean(0), atol=1e-9)


def test_a_stop_during_a_refinement_keeps_the_whole_trace_of_the_pass_before(linear):
    """Stop & keep while the blocks are measured again against the aligned mean: the estimate
    ends at once (within a block) and returns the trace of the last complete pass, every
    frame of it, not the two blocks a stop in the first pass keeps."""
    stack, truth = linear
    params = DriftParams(reference="mean", time_averaging=BLOCK)
    chunks = FRAMES // 10  # frames_per_chunk=10: one update a chunk, one more a block
    first_two_passes = chunks + (chunks + FRAMES // BLOCK)
    job = iter_estimate_drift(stack, params=params, frames_per_chunk=10, device="cpu")
    result, after = stop_after(job, first_two_passes + 5)
    assert after <= BLOCK // 10 + 2  # the block being read, then the result
    assert not result.stopped_early and result.shifts.shape == (FRAMES, 2)
    refinement = result.mean_refinement
    assert refinement["stopped"] and refinement["passes"] == 1 and not refinement["converged"]
    # The first pass's positions: the plain mean's ridge leaves them about a pixel off at
    # most, far closer than the 8 px drift they follow.
    errors = block_errors(result, truth)
    assert float(np.abs(errors).max()) < 1.5
