"""Every job the registry declares runs from its JobSpec alone, as batch and the docks run it.

Oracles: the older direct entry points (``iter_parameter_sweep``, ``apply_profile``), the grid's
own tile centres for the tilt maps' placement, and the NaN rules recomputed from the arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope import methods
from napari_gpuscope.compute import esrrf, flatfield, phase
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.params import ParameterError, Params
from napari_gpuscope.compute.results import Geometry, image_layer
from napari_gpuscope.sample_data._shading import shaded_tiles
from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack
from napari_gpuscope.sample_data.phase import OPTICS, tilted_brightfield_stack

# What issue 15 asks each method to declare, main job first.
DECLARED = {
    "tv": ("denoise",),
    "esrrf": ("run", "sweep", "drift"),
    "flatfield": ("fit", "apply"),
    "phase": ("reconstruct", "estimate_tilt"),
}


def test_every_method_declares_its_jobs_main_job_first():
    for method_id, job_ids in DECLARED.items():
        spec = methods.method(method_id)
        assert spec.job_ids == job_ids
        main = spec.job_spec()
        assert (main.params, main.function, main.batch) == (spec.params, spec.job, spec.batch)
        for job in spec.jobs:
            assert issubclass(job.params_class(), Params)
            assert callable(job.job_function())
            if job.batch:
                hooks = methods.load(job.batch)
                assert hasattr(hooks, "prepare") or hasattr(hooks, "job")


def test_an_unknown_job_names_the_methods_jobs():
    with pytest.raises(KeyError, match=r"no job 'fit'.*\['run', 'sweep', 'drift'\]"):
        methods.method("esrrf").job_spec("fit")


def test_a_method_of_one_job_and_a_conflicting_shorthand():
    job = methods.JobSpec("copy", "Copy", "m:P", "m:f")
    one = methods.MethodSpec(
        id="one_job", title="One", dock="m:D", samples=(), demo_params="m:d", jobs=(job,)
    )
    assert (one.params, one.job, one.batch) == ("m:P", "m:f", None)
    short = methods.MethodSpec(
        id="short", title="S", dock="m:D", samples=(), demo_params="m:d", params="m:P", job="m:f"
    )
    assert short.job_ids == ("run",) and short.job_spec().function == "m:f"
    with pytest.raises(ValueError, match="differs from its first job"):
        methods.MethodSpec(
            id="both",
            title="B",
            dock="m:D",
            samples=(),
            demo_params="m:d",
            jobs=(job,),
            params="m:Other",
        )
    with pytest.raises(ValueError, match="repeat"):
        methods.MethodSpec(
            id="twice", title="T", dock="m:D", samples=(), demo_params="m:d", jobs=(job, job)
        )


def _run_from_spec(method_id: str, job_id: str, data, params, **needs):
    job = methods.method(method_id).job_spec(job_id)
    assert isinstance(params, job.params_class())
    assert set(needs) == set(job.needs)
    return run_job(job.job_function()(data, params=params, device="cpu", **needs))


def test_the_sweep_job_equals_the_direct_sweep_and_its_layers_hold_its_grids():
    stack, _ = blinking_filaments_stack(24, (48, 48))
    params = esrrf.SweepParams(radii=(1.0, 2.0), sensitivities=(1.0, 2.0), magnification=2)
    result = _run_from_spec("esrrf", "sweep", stack, params)
    direct = esrrf.parameter_sweep(
        stack, (1.0, 2.0), (1.0, 2.0), params=esrrf.EsrrfParams(magnification=2), device="cpu"
    )
    for name in ("qnr", "rsp", "frc_resolution"):
        np.testing.assert_array_equal(getattr(result, name), getattr(direct, name))
    layers = {kwargs["name"]: data for data, kwargs, _ in result.layers("cells")}
    assert set(layers) == {
        "QnR sweep · cells",
        "RSP sweep · cells",
        "FRC resolution sweep · cells",
        "Decorrelation resolution sweep · cells",
    }
    np.testing.assert_array_equal(layers["QnR sweep · cells"], result.qnr.astype(np.float32))
    assert layers["RSP sweep · cells"].shape == (2, 2)  # rows: sensitivities, columns: radii


def test_sweep_params_hold_the_fixed_esrrf_fields_and_refuse_a_bad_grid():
    params = esrrf.SweepParams(magnification=3, temporal="VAR", radii=(1.0,))
    assert params.base() == esrrf.EsrrfParams(magnification=3, temporal="VAR")
    with pytest.raises(ParameterError, match="duplicates"):
        esrrf.SweepParams(radii=(1.0, 1.0))
    with pytest.raises(ParameterError, match=r"radii\[1\]"):
        esrrf.SweepParams(radii=(1.0, 9.0))
    with pytest.raises(ParameterError, match="at least one"):
        esrrf.SweepParams(sensitivities=())


def test_the_apply_job_takes_the_profile_it_needs_and_equals_apply_profile():
    tiles = shaded_tiles(24, (96, 96), seed=3).images
    params = flatfield.BasicParams(output_dtype="same", clip_negative=True)
    profile = _run_from_spec("flatfield", "fit", tiles, params)
    result = _run_from_spec("flatfield", "apply", tiles, params, profile=profile)
    direct = flatfield.apply_profile(tiles, profile, params, device="cpu")
    np.testing.assert_array_equal(result.image, direct.image)
    assert result.image.dtype == tiles.dtype


def test_the_estimate_tilt_job_maps_sit_on_their_tile_centres():
    stack = tilted_brightfield_stack()[0][0][:, :128, :192]
    params = phase.PhaseParams(
        **OPTICS, tilt_mode="tiles", tiles_y=2, tiles_x=3, optimizer="newton", iterations=2
    )
    result = _run_from_spec("phase", "estimate_tilt", stack, params)
    geometry = Geometry(scale=(1.0, 0.325, 0.325), translate=(0.0, 5.0, 7.0))
    zenith, azimuth, arrows = result.layers("field", geometry)
    grid = result.tilt_map.grid
    data, kwargs, kind = zenith
    assert kind == "image" and data.shape == grid.tiles == (2, 3)
    np.testing.assert_allclose(data, result.tilt_map.zenith.reshape(2, 3), rtol=1e-6)
    # World position of map pixel (i, j) == world position of tile (i, j)'s centre.
    index = np.stack(np.meshgrid(range(2), range(3), indexing="ij"), -1).reshape(-1, 2)
    world = np.asarray(kwargs["translate"]) + index * np.asarray(kwargs["scale"])
    expected = np.array([5.0, 7.0]) + grid.centers() * 0.325
    np.testing.assert_allclose(world, expected, atol=0.325)  # tile starts are whole pixels
    assert azimuth[1]["visible"] is False and arrows[2] == "vectors"
    assert arrows[1]["scale"] == (0.325, 0.325)


def _write(tmp_path, data, **metadata):
    # Imported here: the GPU kit collects tests/compute where zarr and the batch package are
    # absent (tests/test_architecture.py).
    from napari_gpuscope.batch.store import BatchStore

    store = BatchStore(tmp_path / "out.zarr")
    layer = image_layer(data, "grid", metadata=metadata)
    return store, store.write_position("p0", [layer], {})


def test_the_store_writes_nan_only_where_the_layer_says_what_it_means(tmp_path):
    grid = np.array([[1.0, np.nan], [0.5, 0.25]], np.float32)
    with pytest.raises(ValueError, match="non-finite"):
        _write(tmp_path / "a", grid)
    with pytest.raises(ValueError, match="non-finite"):
        _write(tmp_path / "b", np.where(np.isnan(grid), np.inf, grid), nan="not measured")
    import zarr

    store, written = _write(tmp_path / "c", grid, nan="not measured")
    stored = zarr.open_array(str(store.out / written[0] / "0"), mode="r")[:]
    np.testing.assert_array_equal(np.isnan(stored), np.isnan(grid))
