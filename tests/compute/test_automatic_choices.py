"""One protocol for the values a run chose from the data (issue 27 item 4).

Each result that can choose exposes ``automatic_choices() -> dict[str, str]``, puts the same
mapping in its ``summary()["automatic"]``, and ``build_provenance`` records it under the
record's top-level ``"automatic"`` (eSRRF's nested drift summary included). The values are
checked against the simulations' own numbers (the noise level, the camera's gain) and the
blocks the drift estimate used.
"""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack, true_drift

from napari_gpuscope.compute import esrrf, tv
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.noise import estimate_noise_sigma
from napari_gpuscope.provenance import (
    AUTOMATIC_KEY,
    AutomaticChoices,
    automatic_choices,
    build_provenance,
)
from napari_gpuscope.sample_data import DEFAULT_CAMERA, noisy_cells_2d


def _record(result) -> dict:
    return build_provenance(
        "m", {}, device="cpu", input_name="x", elapsed_seconds=0.0, result=result.summary()
    )


def _noisy(sigma: float = 0.05, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:96, :96]
    clean = 0.5 + 0.3 * ((yy - 48) ** 2 + (xx - 40) ** 2 < 600)
    return (clean + sigma * rng.standard_normal(clean.shape)).astype(np.float32)


def test_tv_names_the_weight_it_derived_from_the_measured_noise():
    image = _noisy(0.05)
    result = run_job(tv.iter_denoise(image, tv.TVParams(strength=1.5), device="cpu"))
    assert isinstance(result, AutomaticChoices)
    sigma = estimate_noise_sigma(image)
    assert sigma == pytest.approx(0.05, rel=0.1)  # the simulated noise
    choices = result.automatic_choices()
    assert list(choices) == ["TV weight"]
    assert choices["TV weight"] == (
        f"{1.5 * result.noise_sigma:.4g} = strength 1.5 × noise σ {result.noise_sigma:.4g}"
    )
    assert result.noise_sigma == pytest.approx(sigma, rel=1e-3)
    assert result.summary()[AUTOMATIC_KEY] == choices
    assert _record(result)[AUTOMATIC_KEY] == choices
    # An absolute weight is not an automatic choice.
    fixed = run_job(tv.iter_denoise(image, tv.TVParams(weight=0.07), device="cpu"))
    assert fixed.automatic_choices() == {} and _record(fixed)[AUTOMATIC_KEY] == {}


def test_tv_poisson_names_the_camera_model_it_estimated_not_one_given():
    adu = np.asarray(noisy_cells_2d()[0][0], np.float32)[
        :256, :256
    ]  # simulated with DEFAULT_CAMERA
    estimated = run_job(tv.iter_denoise(adu, tv.TVParams(noise_model="poisson"), device="cpu"))
    camera = estimated.automatic_choices()["camera model"]
    assert camera.startswith(f"gain {estimated.camera.gain:.4g}, offset ")
    assert camera.endswith("(estimated)")
    assert estimated.camera.gain == pytest.approx(DEFAULT_CAMERA.gain, rel=0.3)  # simulated
    given = tv.TVParams(noise_model="poisson", gain=2.0, offset=100.0, read_noise=3.0)
    assert run_job(tv.iter_denoise(adu, given, device="cpu")).automatic_choices() == {}


def test_drift_names_the_block_length_it_chose_and_esrrf_provenance_finds_it():
    stack, _ = blinking_drifting_stack(true_drift(120), shape=(32, 32), n_emitters=40, seed=2)
    result = esrrf.estimate_drift(stack, time_averaging="auto", device="cpu")
    assert isinstance(result, AutomaticChoices)
    chosen = result.time_averaging_chosen
    assert result.automatic_choices() == {"drift block length": f"{chosen} frames"}
    assert result.block_frames[0] == (0, chosen)  # the blocks have that length
    assert _record(result)[AUTOMATIC_KEY] == {"drift block length": f"{chosen} frames"}
    # eSRRF's summary nests the drift's under "drift": the record still names the choice.
    nested = {"iterations": 1, "drift": result.summary()}
    assert automatic_choices(nested) == {"drift block length": f"{chosen} frames"}
    fixed = esrrf.estimate_drift(stack, time_averaging=30, device="cpu")
    assert fixed.automatic_choices() == {} and _record(fixed)[AUTOMATIC_KEY] == {}


def test_an_explicit_mapping_wins_and_values_become_text():
    record = build_provenance(
        "m", {}, device="cpu", input_name=None, elapsed_seconds=0.0,
        result={"automatic": {"a": "1"}}, automatic={"b": 2},
    )  # fmt: skip
    assert record[AUTOMATIC_KEY] == {"b": "2"}
    outer = {"automatic": {"x": "outer"}, "sub": {"automatic": {"x": "inner", "y": "2"}}}
    assert automatic_choices(outer) == {"x": "outer", "y": "2"}


def test_tv_describe_names_the_camera_it_estimated():
    adu = np.asarray(noisy_cells_2d()[0][0], np.float32)[:256, :256]
    params = tv.TVParams(noise_model="poisson", max_iterations=2)
    result = run_job(tv.iter_denoise(adu, params, device="cpu"))
    assert f"camera gain {result.camera.gain:.3g} estimated" in result.describe()
    given = params.replace(gain=2.0, offset=100.0, read_noise=3.0)
    assert "estimated" not in run_job(tv.iter_denoise(adu, given, device="cpu")).describe()


def test_flatfield_names_the_automatic_smoothness_and_only_when_automatic() -> None:
    """BaSiCPy's rule, recomputed with scipy's orthonormal DCT: sum |DCT(mean / its mean)| /
    800 of the images fitted; a smoothness the user set is no automatic choice."""
    from scipy.fft import dctn

    from napari_gpuscope.compute.flatfield import BasicParams, fit_basic

    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[:64, :64] / 64 - 0.5
    shading = 1.2 - 0.8 * (yy**2 + xx**2)
    images = (rng.uniform(50, 150, (12, 1, 1)) * shading * rng.gamma(4, 0.25, (12, 64, 64)))
    images = images.astype(np.float32)
    profile = fit_basic(images, device="cpu")
    mean = images.astype(np.float64).mean(axis=0)
    expected = np.abs(dctn(mean / mean.mean(), norm="ortho")).sum() / 800
    (value,) = profile.smoothness_flatfield
    assert value == pytest.approx(expected, rel=1e-4)
    assert profile.automatic_choices() == {"flatfield smoothness": f"{value:.3g}"}
    assert _record(profile)[AUTOMATIC_KEY] == profile.automatic_choices()
    fixed = fit_basic(images, BasicParams(smoothness_flatfield=value), device="cpu")
    assert fixed.automatic_choices() == {}


def test_esrrf_status_names_an_automatic_drift_block_length():
    """eSRRF's status line (its describe(), which the dock shows) says the block length the
    drift chose, and says nothing of the kind for a length given."""
    import dataclasses

    stack, _ = blinking_drifting_stack(true_drift(120), shape=(32, 32), n_emitters=40, seed=2)
    drift = esrrf.estimate_drift(stack, time_averaging="auto", device="cpu")
    params = esrrf.EsrrfParams(magnification=2)
    result = run_job(esrrf.iter_esrrf(stack, params=params, device="cpu"))
    chosen = drift.time_averaging_chosen
    text = dataclasses.replace(result, drift=drift).describe()
    assert f"blocks of {chosen} frames, chosen automatically" in text
    fixed = esrrf.estimate_drift(stack, time_averaging=30, device="cpu")
    assert "chosen automatically" not in dataclasses.replace(result, drift=fixed).describe()
