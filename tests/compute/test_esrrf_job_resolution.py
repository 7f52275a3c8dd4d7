"""The eSRRF job measures its own decorrelation resolution and its result does not depend on
its frame chunks (issue 25 item 2: the dock is the job, a recipe does exactly what the dock
did)."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf._resolution import PIXEL_LIMIT_PX
from napari_gpuscope.compute.jobs import run_job


@pytest.fixture(scope="module")
def stack():
    """Blinking emitters (Gaussian PSF, ~30 % on), drawn drifting, Poisson noise; uint16."""
    rng = np.random.default_rng(4)
    points = rng.uniform(6, 34, size=(40, 2))
    y, x = np.mgrid[:40, :40].astype(np.float64)
    frames = np.empty((40, 40, 40), np.uint16)
    for k in range(40):
        image = np.zeros((40, 40))
        for py, px in points[rng.random(len(points)) < 0.3] + (0.03 * k, -0.02 * k):
            image += 300 * np.exp(-((y - py) ** 2 + (x - px) ** 2) / (2 * 1.3**2))
        frames[k] = rng.poisson(image + 20)
    return frames


def _without(facts, *keys):
    return {key: value for key, value in facts.items() if key not in keys}


def test_the_option_is_added_later_and_off_by_default():
    assert esrrf.EsrrfParams().measure_resolution is False
    assert "measure_resolution" not in esrrf.EsrrfParams().to_dict()  # old recipes' hash
    assert esrrf.EsrrfParams(measure_resolution=True).to_dict()["measure_resolution"] is True


def test_the_job_measures_the_first_time_point_and_its_widefield_mean(stack):
    params = esrrf.EsrrfParams(magnification=2, frames_per_timepoint=20, measure_resolution=True)
    result = run_job(esrrf.iter_esrrf(stack, params=params, device="cpu"))
    facts = result.summary()["decorrelation"]
    expected = esrrf.decorrelation_resolution(result.image[0], device="cpu")
    widefield = esrrf.decorrelation_resolution(result.widefield[0], device="cpu")
    assert facts["esrrf"] == expected.summary()
    assert facts["widefield"] == widefield.summary()
    assert facts["unit"] == "px" and facts["region"] == "whole image" and facts["note"] == ""
    # 20 frames per time point: the FRC of its even and odd frames is measured too, and the
    # status names each measure (the decorrelation's at the pixel grid's limit says so)
    assert facts["frc_px"] is not None or facts["headline"] is None
    assert "decorrelation" in result.describe()
    if expected.resolution < PIXEL_LIMIT_PX:
        assert "limited by the pixel grid" in result.describe()
    else:
        assert f"{expected.resolution:.3g} output px" in result.describe()
    plain = run_job(
        esrrf.iter_esrrf(stack, params=params.replace(measure_resolution=False), device="cpu")
    )
    assert "decorrelation" not in plain.summary()
    assert plain.image.tobytes() == result.image.tobytes()


def test_the_result_does_not_depend_on_the_frame_chunks(stack):
    """A dock's small streaming chunks, the CPU default (4) and whole time points give the same
    bytes and measurements: the statistics and the widefield sum run frame by frame (the
    widefield's float32 partial sums per chunk did not, for drift-corrected frames)."""
    shifts = np.stack([0.03 * np.arange(40), -0.02 * np.arange(40)], axis=1)
    params = esrrf.EsrrfParams(
        magnification=2, temporal="TAC2", frames_per_timepoint=15, measure_resolution=True
    )
    results = [
        run_job(
            esrrf.iter_esrrf(
                stack, params=params, drift_shifts=shifts, frames_per_chunk=chunk, device="cpu"
            )
        )
        for chunk in (None, 1, 3, 15)
    ]
    first = results[0]
    for other in results[1:]:
        assert other.image.tobytes() == first.image.tobytes()
        assert other.widefield.tobytes() == first.widefield.tobytes()
        assert _without(other.summary(), "chunks") == _without(first.summary(), "chunks")


def test_an_estimate_given_as_a_drift_result_records_what_an_estimate_in_the_run_does(stack):
    params = esrrf.EsrrfParams(
        magnification=2, drift_correction=True, drift_time_averaging=10, measure_resolution=True
    )
    in_run = run_job(esrrf.iter_esrrf(stack, params=params, device="cpu"))
    estimate = esrrf.estimate_drift(stack, params=params.drift_params(), device="cpu")
    given = run_job(
        esrrf.iter_esrrf(
            stack, params=params, drift_shifts=estimate, frames_per_chunk=2, device="cpu"
        )
    )
    assert given.image.tobytes() == in_run.image.tobytes()
    assert given.widefield.tobytes() == in_run.widefield.tobytes()
    assert _without(given.summary(), "chunks") == _without(in_run.summary(), "chunks")
    assert given.summary()["drift"]["params"] == params.drift_params().to_dict()
    # a bare trace: the same frames, the trace without its estimate's facts
    bare = run_job(
        esrrf.iter_esrrf(stack, params=params, drift_shifts=estimate.shifts, device="cpu")
    )
    assert bare.image.tobytes() == in_run.image.tobytes()
    assert bare.summary()["drift"]["params"] is None
    # a trace read from a file does not know its frames' shape: the run's does
    loaded = esrrf.DriftResult.from_shifts(estimate.shifts)
    assert loaded.frame_shape is None
    given_loaded = run_job(
        esrrf.iter_esrrf(stack, params=params, drift_shifts=loaded, device="cpu")
    )
    assert given_loaded.drift.frame_shape == stack.shape[1:]
    assert given_loaded.image.tobytes() == in_run.image.tobytes()


def test_each_channel_is_measured(stack):
    params = esrrf.EsrrfParams(magnification=2, measure_resolution=True)
    channels = np.stack([stack, stack[::-1]])
    result = run_job(esrrf.iter_esrrf(channels, params=params, device="cpu"))
    for c, facts in enumerate(result.summary()["channels"]):
        expected = esrrf.decorrelation_resolution(result.image[c, 0], device="cpu")
        assert facts["decorrelation"]["esrrf"] == expected.summary()


def test_the_sweep_measures_no_cell_twice(stack, monkeypatch):
    """The sweep's cells are eSRRF runs: the sweep measures each cell's resolution itself, so
    its own measure_resolution (inherited from the eSRRF model) adds no measurement."""
    from napari_gpuscope.compute.esrrf import _stream

    calls = []
    original = _stream.measure_resolution
    monkeypatch.setattr(
        _stream, "measure_resolution", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    sweep = esrrf.SweepParams(
        radii=(1.0, 1.5), sensitivities=(1.0,), magnification=2, measure_resolution=True
    )
    result = run_job(esrrf.iter_sweep(stack, params=sweep, device="cpu"))
    assert calls == []
    assert result.params.measure_resolution is True  # "Use best" (best_params) keeps it
    run_job(esrrf.iter_esrrf(stack, params=sweep.base(), device="cpu"))
    assert calls == [1]  # the patch counts


def test_a_strip_says_the_region_the_analysis_read():
    """A long eSRRF image is analysed on its central region (at most 1024 px a side and 2:1):
    the measurement names the region the analysis read."""
    rng = np.random.default_rng(1)
    stack = rng.poisson(50, (4, 16, 160)).astype(np.uint16)
    params = esrrf.EsrrfParams(magnification=2, measure_resolution=True)
    result = run_job(esrrf.iter_esrrf(stack, params=params, device="cpu"))
    facts = result.summary()["decorrelation"]
    rows, cols = facts["esrrf"]["analysed_shape"]
    assert (rows, cols) != (32, 320) and cols <= 2 * rows
    assert facts["region"] == f"central {rows} x {cols} px"
