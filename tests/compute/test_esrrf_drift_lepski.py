"""The selection rule of the automatic drift block length (Goldenshluger-Lepski, issue 27
item 3), on traces whose noise and bias are known by construction.

Oracle: a trace per candidate length made here as the block means of one white-noise
sequence (frames of standard deviation ``sigma``), so its noise variance is ``sigma^2 / L``
and two nested candidates differ by noise of variance ``sigma^2 (1/L' - 1/L)`` exactly
(dyadic blocks: each coarse block is the mean of whole finer ones), plus a known bias.
"""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute.esrrf._drift_lepski import (
    KAPPA,
    consistent_lengths,
    goldenshluger_lepski,
)

N = 1024
LENGTHS = (4, 8, 16, 32, 64)
SIGMA = 0.5  # px per frame: noise 0.125 px RMS at 16 frames


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


@pytest.mark.parametrize("seed", range(10))
def test_without_bias_the_longest_length_is_chosen(seed):
    parts = goldenshluger_lepski(nested_traces(seed), SIGMA**2)
    assert chosen(parts) == 64
    for length, (noise, _) in parts.items():
        assert noise == pytest.approx(SIGMA / np.sqrt(length))


@pytest.mark.parametrize("seed", range(10))
def test_the_choice_stops_before_a_biased_length(seed):
    """Lengths of 32 and 64 frames carry a bias (an offset, as frame 0's extrapolation over
    half a long block makes) of 0.3 px: 3.4 standard deviations of their difference from
    the 16-frame trace, and far above the 0.03 px of noise that 32 frames would save. The
    rule must stop at 16 and see at least the bias beyond ``KAPPA`` deviations."""
    traces = nested_traces(seed)
    bias = 0.3
    for length in (32, 64):
        traces[length] = traces[length] + bias
    parts = goldenshluger_lepski(traces, SIGMA**2)
    assert chosen(parts) == 16
    noise_16_32 = SIGMA * np.sqrt(1 / 16 - 1 / 32)
    assert parts[32][1] >= np.sqrt(
        max(0.0, (bias - 2 * noise_16_32) ** 2 - (KAPPA * noise_16_32) ** 2)
    )
    assert parts[32][1] <= bias * 1.5


def test_a_wrong_peak_at_the_finest_length_is_left_out():
    """A candidate that caught a wrong correlation peak (a 3 px jump over half its frames)
    would make every longer one look biased; it is left out and the longest is chosen."""
    traces = nested_traces(0)
    traces[4] = traces[4] + np.where(np.arange(N) < N // 2, 0.0, 3.0)[:, None]
    kept = consistent_lengths(traces, SIGMA**2)
    assert kept == [8, 16, 32, 64]
    assert chosen(goldenshluger_lepski({k: traces[k] for k in kept}, SIGMA**2)) == 64
    assert chosen(goldenshluger_lepski(traces, SIGMA**2)) == 4  # what it would do otherwise


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
    rng = np.random.default_rng(0)
    image = ndimage.gaussian_filter(rng.random((48, 48)), 2) * 1000 + 100
    stack = np.repeat(image[None].astype(np.float32), 200, axis=0)
    result = estimate_drift(stack, time_averaging="auto", device="cpu")
    assert result.time_averaging_chosen in range(2, 201)
    assert np.abs(result.shifts).max() == 0
