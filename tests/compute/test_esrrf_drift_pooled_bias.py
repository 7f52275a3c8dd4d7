"""The selection rule of the automatic drift block length (the pooled bias, issue 27 item
3), on traces whose noise and bias are known by construction.

Oracle: a trace per candidate length made here as the block means of one white-noise
sequence (frames of standard deviation ``sigma``), so its noise variance is ``sigma^2 / L``
and two nested candidates differ by noise of variance ``sigma^2 (1/L' - 1/L)`` exactly
(dyadic blocks: each coarse block is the mean of whole finer ones), plus a known bias.
"""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute.esrrf._drift_pooled_bias import consistent_lengths, pooled_bias

N = 1024
LENGTHS = (4, 8, 16, 32, 64)
SIGMA = 0.5  # px per frame: noise 0.125 px RMS at 16 frames
DRAWS = 200


def nested_traces(seed: int) -> dict[int, np.ndarray]:
    """Each length's block means of the same white noise, held over the block's frames."""
    frames = np.random.default_rng(seed).normal(0.0, SIGMA, (N, 2))
    return {
        length: np.repeat(frames.reshape(N // length, length, 2).mean(axis=1), length, axis=0)
        for length in LENGTHS
    }


def chosen(parts: dict[int, tuple[float, float]]) -> int:
    return min(sorted(parts), key=lambda length: parts[length][0] ** 2 + parts[length][1] ** 2)


def test_nested_traces_differ_by_the_noise_the_rule_assumes():
    """The rule's difference noise ``a (1/L' - 1/L)`` against the simulation's."""
    draws = [nested_traces(seed) for seed in range(40)]
    for short, long in [(4, 8), (8, 32), (16, 64)]:
        measured = np.mean([np.mean((t[long] - t[short]) ** 2) for t in draws])
        expected = SIGMA**2 * (1 / short - 1 / long)
        assert measured == pytest.approx(expected, rel=0.05)


def test_without_bias_the_estimated_bias_is_the_floor_of_noise_alone():
    """Without bias the fit's expectation is 0 (the difference's noise is subtracted), so
    the floored estimate is small against each length's own noise, ``sigma^2 / L``: its mean
    over draws at most a quarter of it, and its noise part is the law's exactly."""
    parts = [pooled_bias(nested_traces(seed), SIGMA**2) for seed in range(DRAWS)]
    for length in LENGTHS:
        assert all(p[length][0] == pytest.approx(SIGMA / np.sqrt(length)) for p in parts)
        mean_bias2 = np.mean([p[length][1] ** 2 for p in parts])
        assert mean_bias2 <= 0.25 * SIGMA**2 / length, length
    assert parts[0][4][1] == 0.0  # the shortest has nothing to be compared with


@pytest.mark.parametrize("seed", range(10))
def test_without_bias_the_longest_length_is_chosen(seed):
    assert chosen(pooled_bias(nested_traces(seed), SIGMA**2)) == 64


def test_a_bias_growing_as_l_squared_is_recovered_within_its_noise():
    """A bias ``c L^2`` (an offset, as frame 0's extrapolation over half a block makes; 0.2 px
    at 64 frames, 0.05 at 32) added to the nested traces is the model exactly: the mean over
    draws of the estimated squared bias is ``(c L^2)^2`` within three standard errors, and the
    length of least true error (32: noise 0.0078 + bias 0.0025 px^2, against 0.0103 + 0.0002
    at 16 and 0.0039 + 0.04 at 64) is chosen on most draws. (At 16 frames the bias, 0.0125
    px, is far below the fit's noise, and the floor at 0 dominates its mean: not tested.)"""
    c = 0.2 / 64**2
    parts = []
    for seed in range(DRAWS):
        traces = nested_traces(seed)
        parts.append(pooled_bias({L: t + c * L**2 for L, t in traces.items()}, SIGMA**2))
    for length in (32, 64):
        bias2 = np.array([p[length][1] ** 2 for p in parts])
        se = bias2.std(ddof=1) / np.sqrt(DRAWS)
        assert abs(bias2.mean() - (c * length**2) ** 2) <= 3 * se, length
    choices = [chosen(p) for p in parts]
    assert choices.count(32) >= 0.8 * DRAWS
    assert 64 not in choices


def test_a_wrong_peak_at_the_finest_length_is_left_out():
    """A candidate that caught a wrong correlation peak (a 3 px jump over half its frames)
    would make every longer one look biased; it is left out and the longest is chosen."""
    traces = nested_traces(0)
    traces[4] = traces[4] + np.where(np.arange(N) < N // 2, 0.0, 3.0)[:, None]
    kept = consistent_lengths(traces, SIGMA**2)
    assert kept == [8, 16, 32, 64]
    assert chosen(pooled_bias({k: traces[k] for k in kept}, SIGMA**2)) == 64
    assert chosen(pooled_bias(traces, SIGMA**2)) == 4  # what it would do otherwise


def test_agreeing_candidates_are_all_kept():
    for seed in range(5):
        assert consistent_lengths(nested_traces(seed), SIGMA**2) == list(LENGTHS)


def test_a_stack_without_noise_gets_a_length_not_a_division_by_zero():
    """Found in review: identical frames measure every block without error (``a`` 0), and the
    outlier cut divided by the difference's noise. The still stack's drift is 0 whatever the
    length chosen."""
    from scipy import ndimage

    from napari_gpuscope.compute.esrrf import estimate_drift

    traces = {length: np.zeros((N, 2)) for length in LENGTHS}
    assert consistent_lengths(traces, a=0.0) == list(LENGTHS)
    assert all(parts == (0.0, 0.0) for parts in pooled_bias(traces, a=0.0).values())
    rng = np.random.default_rng(0)
    image = ndimage.gaussian_filter(rng.random((48, 48)), 2) * 1000 + 100
    stack = np.repeat(image[None].astype(np.float32), 200, axis=0)
    result = estimate_drift(stack, time_averaging="auto", device="cpu")
    assert result.time_averaging_chosen in range(2, 201)
    assert np.abs(result.shifts).max() == 0
