"""A batch position whose tilt the data do not determine (issue 26: a faint sample fitted to
a third of its zenith, "converged") fails with the reason; the position beside it is done."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


@pytest.mark.slow
def test_a_tilt_the_data_do_not_determine_fails_its_position(tmp_path, client):
    from napari_gpuscope.compute import phase
    from napari_gpuscope.sample_data.phase import OPTICS, cell_phantom

    params = phase.PhaseParams(**OPTICS, optimizer="newton")
    ph, ab = cell_phantom((128, 128))
    rng = np.random.default_rng(3)
    for name, contrast in (("a_sample", 1.0), ("b_faint", 0.3)):
        clean = phase.simulate_stack(
            contrast * ph, contrast * ab, params, 11, tilt_zenith=0.2, tilt_azimuth=1.0
        )
        counts = rng.poisson(3000.0 * np.clip(clean, 0, None)).astype(np.float32)
        tifffile.imwrite(tmp_path / f"{name}.tif", counts)
    recipe = Recipe.from_params(params, job="estimate_tilt")

    report = run_batch(recipe, discover(str(tmp_path / "*.tif")), tmp_path / "out.zarr", client)

    assert report.done == ["a_sample"]
    assert list(report.failed) == ["b_faint"]
    assert "tilt not determined by the data" in report.failed["b_faint"]
