"""What a TV result says about itself: ``describe()`` and ``summary()`` stay honest."""

from __future__ import annotations

import json

import numpy as np
import pytest

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.jobs import STOP, run_job
from napari_gpuscope.sample_data import fluorescence_phantom_2d


@pytest.fixture(scope="module")
def image():
    gt = fluorescence_phantom_2d((80, 80))
    return (gt + 0.1 * np.random.default_rng(0).standard_normal(gt.shape)).astype(np.float32)


def stopped_at_first_update(image, **kwargs) -> tv.TVResult:
    job = tv.iter_denoise(image, 0.1, device="cpu", **kwargs)
    next(job)
    try:
        job.send(STOP)
    except StopIteration as done:
        return done.value
    raise AssertionError("the job did not stop")


def test_fgp_converged_says_so_with_its_certificate(image):
    result = run_job(tv.iter_denoise(image, 0.1, device="cpu", tolerance=1e-3))
    assert result.converged and result.relative_gap <= 1e-3
    assert result.describe().startswith("converged in")
    assert "<= tolerance 1e-03" in result.describe()


def test_fgp_at_the_iteration_limit_is_not_converged(image):
    result = run_job(tv.iter_denoise(image, 0.1, device="cpu", tolerance=1e-6, max_iterations=20))
    assert not result.converged
    assert result.describe().startswith("stopped at the iteration limit (20)")
    assert "> tolerance" in result.describe()


@pytest.mark.parametrize("method", ["fgp", "chambolle"])
def test_stopped_early_is_never_converged(image, method):
    result = stopped_at_first_update(image, method=method, tolerance=1e-6, max_iterations=500)
    assert result.stopped_early and not result.converged
    assert result.iterations == 10 and result.unprocessed_fraction == 0
    assert result.describe().startswith("stopped early by request after 10 iterations")
    summary = result.summary()
    assert summary["stopped_early"] and not summary["converged"]


def test_chambolle_rule_is_not_called_convergence(image):
    result = run_job(tv.iter_denoise(image, 0.1, device="cpu", method="chambolle"))
    assert result.converged  # the rule fired; the gap says how far the result still is
    text = result.describe()
    assert text.startswith("stopped by scikit-image's energy-change rule")
    assert "converged" not in text
    limit = run_job(
        tv.iter_denoise(image, 0.1, device="cpu", method="chambolle", tolerance=0, max_iterations=5)
    )
    assert not limit.converged
    assert limit.describe().startswith("stopped at the iteration limit (5) before scikit-image")


def test_summary_is_json_and_complete(image):
    result = run_job(tv.iter_denoise(image, None, device="cpu"))
    summary = json.loads(json.dumps(result.summary()))
    assert summary["params"]["weight"] is None and summary["weight"] == pytest.approx(result.weight)
    assert summary["noise_sigma"] == pytest.approx(result.noise_sigma)
    assert {"iterations", "relative_gap", "converged", "chunks", "unprocessed_fraction"} <= set(
        summary
    )
