"""``tv.resolve_weight``: the weight, noise level and camera a job uses, known before solving.

Oracles: the job's own result on the plugin's samples (the docks show what the job will use),
Immerkaer's estimator on the raw data, the simulated camera, and analytic facts (Poisson mode's
weight is the strength; an absolute weight is used as given).
"""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.noise import estimate_noise_sigma
from napari_gpuscope.sample_data import DEFAULT_CAMERA, noisy_cells_2d, noisy_cells_3d


@pytest.fixture(scope="module")
def samples():
    return {"2d": noisy_cells_2d()[0][0], "3d": noisy_cells_3d()[0][0]}


def job_result(image, params):
    # One iteration: the weight, noise level and camera are settled before the first one.
    return run_job(tv.iter_denoise(image, params.replace(max_iterations=1), device="cpu"))


@pytest.mark.parametrize("sample", ["2d", "3d"])
@pytest.mark.parametrize(
    "params",
    [
        tv.TVParams(strength=1.3),
        tv.TVParams(weight=40.0),
        tv.TVParams(noise_model="poisson", strength=0.9),
        tv.TVParams(noise_model="poisson", weight=1.2, gain=2.0, offset=100.0, read_noise=3.0),
    ],
    ids=["gaussian-strength", "gaussian-weight", "poisson-estimated", "poisson-given"],
)
def test_resolved_weight_is_the_one_the_job_uses(samples, sample, params):
    image = samples[sample]
    resolved = tv.resolve_weight(image, params)
    result = job_result(image, params)
    assert (resolved.weight, resolved.noise_sigma, resolved.camera) == (
        result.weight,
        result.noise_sigma,
        result.camera,
    )


def test_resolved_weight_follows_the_noise_model(samples):
    image = samples["2d"]
    gaussian = tv.resolve_weight(image, tv.TVParams(strength=1.5))
    # The uint16 sample is scaled by 2^-16 for the estimate, which changes no bit of it.
    assert gaussian.noise_sigma == pytest.approx(estimate_noise_sigma(image), rel=1e-6)
    assert gaussian.weight == pytest.approx(1.5 * gaussian.noise_sigma, rel=1e-12)
    assert gaussian.camera is None
    poisson = tv.resolve_weight(image, tv.TVParams(noise_model="poisson", strength=0.9))
    assert poisson.weight == 0.9 and poisson.noise_sigma is None  # Anscombe units
    assert poisson.camera.gain == pytest.approx(DEFAULT_CAMERA.gain, rel=0.3)


def test_resolve_weight_refuses_what_the_job_refuses():
    flat = np.full((32, 32), 5.0, np.float32)
    with pytest.raises(InvalidInputError, match="noise-free"):
        tv.resolve_weight(flat, tv.TVParams())
    assert tv.resolve_weight(flat, tv.TVParams(weight=0.5)).weight == 0.5
    broken = np.zeros((32, 32), np.float32)
    broken[3, 4] = np.nan
    with pytest.raises(InvalidInputError, match=r"1 non-finite.*\(3, 4\)"):
        tv.resolve_weight(broken, tv.TVParams())
    with pytest.raises(ValueError, match="spacing"):
        tv.resolve_weight(flat, tv.TVParams(spacing=(1.0, 1.0, 1.0)))
