"""The sweep's decorrelation-resolution map (issue 19): what it holds, and that it leaves the
FRC, RSP and QnR maps as they were."""

from __future__ import annotations

import json

import numpy as np
import pytest

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf._decorr import decorrelation_resolution
from napari_gpuscope.compute.esrrf._sweep import SWEEP_OUTPUTS, SweepResult
from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

PIXEL = 0.1


@pytest.fixture(scope="module")
def swept():
    stack, _ = blinking_filaments_stack(40, (48, 48))
    params = esrrf.EsrrfParams(magnification=2)
    updates = []
    job = esrrf.iter_parameter_sweep(
        stack, (1.0, 2.0), (1.0,), params=params, pixel_size=PIXEL, device="cpu"
    )
    while True:
        try:
            updates.append(next(job))
        except StopIteration as done:
            return stack, params, updates, done.value


def test_each_cell_is_the_decorrelation_of_its_whole_stack_image(swept):
    stack, params, _, result = swept
    assert result.decorr_resolution.shape == (1, 2)
    assert np.isfinite(result.decorr_resolution).all()
    for j, radius in enumerate((1.0, 2.0)):
        whole = esrrf.esrrf(stack, params=params.replace(radius=radius), device="cpu")[0]
        cut = int(radius * 2) + 2
        inner = (slice(cut, -cut), slice(cut, -cut))
        expected = decorrelation_resolution(whole[inner], device="cpu").resolution * PIXEL / 2
        assert result.decorr_resolution[0, j] == pytest.approx(expected, rel=0.05)


def test_esrrf_resolves_finer_than_the_widefield_mean(swept):
    """Independent sanity check: the reconstruction's decorrelation resolution (physical
    units) is finer than the widefield mean's."""
    stack, _, _, result = swept
    widefield = decorrelation_resolution(
        stack.astype(np.float32).mean(0), pixel_size=PIXEL, device="cpu"
    )
    assert np.nanmax(result.decorr_resolution) < widefield.resolution_physical


def test_the_map_streams_cell_by_cell(swept):
    *_, updates, _result = swept
    assert SWEEP_OUTPUTS[-1] == "decorr_resolution" and SWEEP_OUTPUTS[:3] == (
        "frc_resolution",
        "rsp",
        "qnr",
    )
    cells = [u.outputs["decorr_resolution"] for u in updates if u.outputs]
    assert len(cells) == 2
    assert all(c.shape == (1, 2) and c.array().shape == (1, 1) for c in cells)
    assert "decorrelation" in next(u for u in updates if u.outputs).message


def test_layers_summary_and_describe_carry_the_map(swept):
    *_, result = swept
    layers = {kwargs["name"]: (data, kwargs) for data, kwargs, _ in result.layers("cells")}
    (data, kwargs), *_ = [v for k, v in layers.items() if k.startswith("Decorrelation")]
    np.testing.assert_array_equal(data, result.decorr_resolution.astype(np.float32))
    assert kwargs["metadata"]["intensity_unit"] == "input pixels x 0.1, lower is better"
    assert kwargs["visible"] is False
    facts = json.loads(json.dumps(result.summary()))
    assert facts["decorr_resolution"][0] == pytest.approx(list(result.decorr_resolution[0]))
    assert "decorrelation" in result.describe()


def test_a_result_made_without_the_map_has_nan_there():
    grid = np.ones((1, 2))
    result = SweepResult(
        radii=(1.0, 2.0),
        sensitivities=(1.0,),
        frc_resolution=grid,
        rsp=grid,
        qnr=grid,
        params=esrrf.EsrrfParams(),
        frames=10,
    )
    assert result.decorr_resolution.shape == (1, 2) and np.isnan(result.decorr_resolution).all()
    assert "decorrelation" not in result.describe()
