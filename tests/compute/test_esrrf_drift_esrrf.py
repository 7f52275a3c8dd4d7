"""eSRRF with drift correction: closer to the undrifted reconstruction than without, the
trace in the result, a loaded trace used as given, and no change at all when off."""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack, true_drift

from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf import (
    EsrrfParams,
    correct_drift,
    esrrf,
    estimate_drift,
    iter_esrrf,
)
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.compute.results import Geometry

SHAPE = (64, 64)
N_FRAMES = 300


@pytest.fixture(scope="module")
def stacks():
    """The same blinking emitters (same random stream: same blinking, same noise draws) with
    and without a ~6 px smooth drift."""
    truth = 1.5 * true_drift(N_FRAMES)
    drifting, _ = blinking_drifting_stack(truth, shape=SHAPE, n_emitters=60, seed=4)
    still, _ = blinking_drifting_stack(np.zeros_like(truth), shape=SHAPE, n_emitters=60, seed=4)
    return drifting, still, truth


def pearson(a, b, margin):
    inner = (slice(margin, -margin), slice(margin, -margin))
    return float(np.corrcoef(a[inner].ravel(), b[inner].ravel())[0, 1])


def test_the_corrected_reconstruction_is_closer_to_the_undrifted_one(stacks):
    drifting, still, truth = stacks
    kwargs = {"magnification": 2, "radius": 1.5, "device": "cpu"}
    reference = esrrf(still, **kwargs)[0]
    plain = esrrf(drifting, **kwargs)[0]
    result = run_job(iter_esrrf(drifting, drift_correction=True, **kwargs))  # automatic
    corrected = result.image[0]
    assert corrected.shape == plain.shape == reference.shape
    margin = 2 * 2 * 6  # the drift's edge band, at M = 2
    r_plain, r_corrected = (pearson(x, reference, margin) for x in (plain, corrected))
    assert r_corrected > r_plain + 0.1, (r_plain, r_corrected)
    assert r_corrected > 0.8
    # The trace is the one estimate_drift gives, and close to the truth.
    direct = estimate_drift(drifting, device="cpu")
    np.testing.assert_allclose(result.drift.shifts, direct.shifts, atol=1e-9)
    assert result.drift.time_averaging_chosen == direct.time_averaging_chosen
    assert np.sqrt(np.mean((result.drift.shifts - truth) ** 2)) < 0.15
    assert "drift-corrected" in result.describe()
    assert len(result.summary()["drift"]["shifts_px"]) == N_FRAMES
    layers = result.layers("blinks", Geometry(scale=(1.0, 0.1, 0.1)))
    assert [kind for _, _, kind in layers] == ["image", "image", "tracks"]


def test_time_points_are_split_after_estimating_over_the_whole_stack(stacks):
    drifting, _, _ = stacks
    kwargs = {"magnification": 2, "frames_per_timepoint": 100, "device": "cpu"}
    plain = run_job(iter_esrrf(drifting, **kwargs))
    corrected = run_job(iter_esrrf(drifting, drift_correction=True, **kwargs))
    assert corrected.image.shape == plain.image.shape == (3, 128, 128)
    assert corrected.time_points == plain.time_points
    # One trace for the whole stack: each time point corrected with its own frames' shifts,
    # exactly as eSRRF of the corrected stack.
    aligned = correct_drift(drifting, corrected.drift.shifts, device="cpu")
    expected = esrrf(aligned, **kwargs)
    np.testing.assert_allclose(corrected.image, expected, rtol=1e-5, atol=1e-6)


def test_a_given_trace_is_used_as_it_is_and_chunks_do_not_matter(stacks):
    drifting, _, truth = stacks
    small = drifting[:60]
    kwargs = {"magnification": 2, "device": "cpu"}
    one = run_job(iter_esrrf(small, drift_shifts=truth[:60], frames_per_chunk=1, **kwargs))
    many = run_job(iter_esrrf(small, drift_shifts=truth[:60], frames_per_chunk=7, **kwargs))
    np.testing.assert_array_equal(one.drift.shifts, truth[:60])
    np.testing.assert_allclose(one.image, many.image, rtol=1e-6, atol=1e-7)
    aligned = correct_drift(small, truth[:60], device="cpu")
    np.testing.assert_allclose(one.image, esrrf(aligned, **kwargs), rtol=1e-5, atol=1e-6)
    with pytest.raises(ParameterError, match="drift_shifts holds 59 frame"):
        esrrf(small, drift_shifts=truth[:59], **kwargs)


def test_off_by_default_and_nothing_changes(stacks):
    drifting, _, _ = stacks
    small = drifting[:20]
    params = EsrrfParams(magnification=2)
    assert params.drift_correction is False
    result = run_job(iter_esrrf(small, params=params, device="cpu"))
    assert result.drift is None and "drift" not in result.summary()
    assert [kind for _, _, kind in result.layers("x")] == ["image", "image"]
    # The drift fields are written only when set, but for the automatic block length, whose
    # absence means the 50 frames of older recipes.
    written = [key for key in params.to_dict() if key.startswith("drift") or key == "max_drift"]
    assert written == ["drift_time_averaging"] and params.to_dict()[written[0]] is None
    changed = params.replace(drift_correction=True, drift_time_averaging=20, max_drift=4.0)
    assert EsrrfParams.from_dict(changed.to_dict()) == changed
    assert changed.drift_params().time_averaging == 20


def test_a_stack_too_short_for_the_drift_blocks_says_so(stacks):
    drifting, _, _ = stacks
    with pytest.raises(InvalidInputError, match="needs at least 100 frames"):
        esrrf(
            drifting[:80], drift_correction=True, drift_time_averaging=50, magnification=2,
            device="cpu",
        )  # fmt: skip
    with pytest.raises(InvalidInputError, match="at least 2 frames"):  # automatic
        esrrf(drifting[:1], drift_correction=True, magnification=2, device="cpu")
