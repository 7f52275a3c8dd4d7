"""The flat-field apply job against independent oracles: ``(tile - dark) / flat`` in NumPy, a
per-frame constant for the timelapse baseline, clipping, and the documented type conversions
(round half to even, saturate at the type's range); its options as parameters, and a batch run
that gives exactly what the job gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.flatfield import (
    APPLY_FIELDS,
    OUTPUT_DTYPES,
    BasicParams,
    CorrectionResult,
    ShadingProfile,
    apply_profile,
    batch_hooks,
    iter_apply_profile,
    shading_stats,
)
from napari_gpuscope.compute.flatfield._correct import integer_bounds
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.compute.results import Geometry, MethodResult
from napari_gpuscope.sample_data._shading import make_darkfield, make_flatfield

SHAPE = (24, 40)


@pytest.fixture(scope="module")
def profile() -> ShadingProfile:
    return ShadingProfile.from_arrays(make_flatfield(SHAPE), make_darkfield(SHAPE, 100.0))


def oracle(tiles: np.ndarray, profile: ShadingProfile) -> np.ndarray:
    """``(tile - dark) / flat`` in NumPy float32 (IEEE subtract and divide, as the job)."""
    return (tiles.astype(np.float32) - profile.darkfield) / profile.flatfield


def tiles_around_offset(seed: int = 0, frames: int = 5) -> np.ndarray:
    """uint16 tiles whose corrected values cross 0 (some pixels below the darkfield)."""
    rng = np.random.default_rng(seed)
    light = rng.uniform(-20.0, 400.0, (frames, *SHAPE)) * make_flatfield(SHAPE)
    return np.clip(np.round(make_darkfield(SHAPE, 100.0) + light), 0, 65535).astype(np.uint16)


def test_default_is_the_float32_correction(profile):
    tiles = tiles_around_offset()
    result = apply_profile(tiles, profile, device="cpu")
    expected = oracle(tiles, profile)
    assert result.image.dtype == np.float32 and (expected < 0).any()
    np.testing.assert_array_equal(result.image, expected)


@pytest.mark.parametrize("output_dtype", OUTPUT_DTYPES)
@pytest.mark.parametrize("clip_negative", [False, True])
def test_clip_and_output_type(profile, output_dtype, clip_negative):
    tiles = tiles_around_offset(seed=1)
    params = BasicParams(output_dtype=output_dtype, clip_negative=clip_negative)
    result = apply_profile(tiles, profile, params, device="cpu")
    expected = oracle(tiles, profile)
    if clip_negative:
        expected = np.maximum(expected, 0)
    if output_dtype != "float32":  # uint16, and "same" for a uint16 input
        expected = np.clip(np.round(expected), 0, 65535).astype(np.uint16)
    assert result.image.dtype == expected.dtype
    np.testing.assert_array_equal(result.image, expected)


def test_integer_outputs_round_half_to_even_and_saturate():
    flat = ShadingProfile.from_arrays(np.ones((2, 4)))
    halves = np.array([[[0.5, 1.5, 2.5, -0.5], [65535.4, 65535.6, 7e4, -3.0]]], np.float32)
    got = apply_profile(halves, flat, output_dtype="uint16", device="cpu").image
    assert got.tolist() == [[[0, 2, 2, 0], [65535, 65535, 65535, 0]]]
    # "same": the input's integer type, rounded and saturated at *its* range.
    signed = np.array([[[-20000, -1, 3, 20000]]], np.int16)
    half = ShadingProfile.from_arrays(np.array([[0.25, 1.0, 1.75, 1.0]]), normalize=False)
    got = apply_profile(signed, half, output_dtype="same", device="cpu").image
    assert got.dtype == np.int16 and got.tolist() == [[[-32768, -1, 2, 20000]]]
    small = np.array([[[10, 200, 255, 0]]], np.uint8)
    got = apply_profile(small, half, output_dtype="same", device="cpu").image
    assert got.dtype == np.uint8 and got.tolist() == [[[40, 200, 146, 0]]]
    wide = np.array([[[4_000_000_000, 7, 0, 1]]], np.uint32)
    got = apply_profile(wide, half, output_dtype="same", device="cpu").image
    assert got.dtype == np.uint32 and got.tolist() == [[[4294967040, 7, 0, 1]]]  # never wraps


def test_same_keeps_a_float_input_type(profile):
    tiles = tiles_around_offset(seed=2).astype(np.float64)
    got = apply_profile(tiles, profile, output_dtype="same", device="cpu").image
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, oracle(tiles, profile).astype(np.float64))


@pytest.mark.parametrize(
    ("dtype", "bounds"),
    [
        (np.uint8, (0.0, 255.0)),
        (np.int16, (-32768.0, 32767.0)),
        (np.uint16, (0.0, 65535.0)),
        (np.int32, (-2147483648.0, 2147483520.0)),
        (np.uint32, (0.0, 4294967040.0)),
        (np.int64, (-(2.0**63), 2.0**63 - 2.0**39)),
        (np.float32, None),
        (np.float64, None),
    ],
)
def test_integer_bounds_are_float32_values_inside_the_type(dtype, bounds):
    assert integer_bounds(dtype) == bounds
    if bounds is not None:  # both convert exactly (no wrap, no overflow)
        values = np.array(bounds, np.float32)
        assert values.astype(dtype).astype(np.float64).tolist() == list(bounds)


def test_timelapse_subtracts_one_baseline_per_frame():
    # A drifting background b_t * flat + dark plus a few bright spots: the timelapse output is
    # the plain correction minus one constant per frame, and that constant follows b_t.
    rng = np.random.default_rng(3)
    flat = make_flatfield((48, 48))
    dark = make_darkfield((48, 48), 100.0)
    profile = ShadingProfile.from_arrays(flat, dark)
    levels = np.linspace(300.0, 150.0, 16)
    spots = np.zeros((16, 48, 48), np.float32)
    for t in range(16):
        yx = rng.integers(0, 48, (12, 2))
        spots[t, yx[:, 0], yx[:, 1]] = rng.uniform(500.0, 2000.0, 12)
    movie = (levels[:, None, None] * flat + dark + spots * flat).astype(np.float32)
    plain = apply_profile(movie, profile, device="cpu").image
    result = apply_profile(movie, profile, timelapse_baseline=True, device="cpu")
    removed = plain.astype(np.float64) - result.image
    per_frame = removed.mean(axis=(1, 2))
    np.testing.assert_allclose(removed, per_frame[:, None, None] * np.ones((1, 48, 48)), atol=1e-3)
    # The constant follows the drift (how close the fitted level comes to b_t is BaSiCPy's
    # baseline fit, tested in test_flatfield.py::test_timelapse_removes_drift).
    assert np.all(np.diff(per_frame) < 0) and np.corrcoef(per_frame, levels)[0, 1] > 0.999
    np.testing.assert_allclose(per_frame, levels, rtol=0.15)
    # The output's frame means (the baseline plot) lost most of the drift; the shading is
    # measured on the plain correction.
    np.testing.assert_allclose(result.after.frame_means, result.image.mean(axis=(1, 2)), rtol=1e-6)
    assert np.ptp(result.after.frame_means) < 0.2 * np.ptp(result.before.frame_means)
    assert result.after.cv == pytest.approx(shading_stats(plain).cv, rel=1e-6)
    assert "baseline removed" in result.describe()


def test_shading_before_and_after_against_numpy(profile):
    rng = np.random.default_rng(4)
    levels = rng.uniform(100.0, 300.0, (3, 1, 1))
    light = levels * make_flatfield(SHAPE) * rng.lognormal(0.0, 0.05, (3, *SHAPE))
    tiles = (make_darkfield(SHAPE, 100.0) + light).astype(np.float32)
    result = apply_profile(tiles, profile, device="cpu")
    raw = tiles.astype(np.float64) - profile.darkfield.astype(np.float64)
    flat = raw / profile.flatfield.astype(np.float64)
    for stats, stack in ((result.before, raw), (result.after, flat)):
        mean = stack.mean(axis=0)
        assert stats.cv == pytest.approx(mean.std() / abs(mean.mean()), rel=1e-12)
        centre_row = (mean / mean.mean())[SHAPE[0] // 2]  # a band of 24 // 20 = 1 row
        np.testing.assert_allclose(stats.row, centre_row, rtol=1e-12)
        assert stats.column.size == SHAPE[0]
    assert result.after.cv < 0.2 * result.before.cv
    np.testing.assert_allclose(result.after.frame_means, result.image.mean(axis=(1, 2)), rtol=1e-6)


def test_result_protocol(profile):
    tiles = tiles_around_offset(seed=5, frames=2)
    result = apply_profile(tiles, profile, clip_negative=True, device="cpu")
    assert isinstance(result, MethodResult) and not result.stopped_early
    summary = result.summary()
    json.dumps(summary)
    assert {k: summary[k] for k in APPLY_FIELDS} == result.options
    assert summary["dtype"] == "float32" and summary["profile"] == profile.summary()
    assert summary["corrected_range"][0] == 0.0
    assert summary["shading_cv_after"] < summary["shading_cv_before"]
    assert result.describe().startswith("corrected 2 images: shading of the mean image (CV)")
    [(data, kwargs, kind)] = result.layers("tiles", Geometry(scale=(1.0, 0.5, 0.5)), {"k": 1})
    assert data is result.image and kind == "image"
    assert kwargs["name"] == "flat-field corrected · tiles"
    assert kwargs["scale"] == (1.0, 0.5, 0.5) and kwargs["metadata"] == {"k": 1}


def test_inputs_are_checked_when_the_job_is_made(profile):
    with pytest.raises(InvalidInputError, match="stack of frames"):
        iter_apply_profile(np.zeros(SHAPE), profile, timelapse_baseline=True, device="cpu")
    with pytest.raises(InvalidInputError, match="same size"):
        iter_apply_profile(np.zeros((2, 8, 8)), profile, device="cpu")
    with pytest.raises(TypeError, match="apply fields"):
        iter_apply_profile(np.zeros((2, *SHAPE)), profile, working_size=64, device="cpu")
    with pytest.raises(ParameterError, match="output_dtype"):
        iter_apply_profile(np.zeros((2, *SHAPE)), profile, output_dtype="int8", device="cpu")
    # A single image is corrected as one.
    one = apply_profile(tiles_around_offset(seed=6, frames=1)[0], profile, device="cpu")
    assert one.image.shape == SHAPE and one.describe().startswith("corrected 1 image:")


def test_apply_fields_are_validated_parameters_with_todays_defaults():
    params = BasicParams()
    assert (params.output_dtype, params.clip_negative, params.timelapse_baseline) == (
        "float32",
        False,
        False,
    )
    assert tuple(BasicParams.info("output_dtype").choices) == OUTPUT_DTYPES
    for name in APPLY_FIELDS:
        assert BasicParams.info(name).help.startswith("Apply:")
    with pytest.raises(ParameterError, match="clip_negative must be True or False"):
        BasicParams(clip_negative="yes")
    with pytest.raises(ParameterError, match="timelapse_baseline"):
        BasicParams(timelapse_baseline=1)
    # Saved before the fields existed: the defaults.
    old = {name: value for name, value in params.to_dict().items() if name not in APPLY_FIELDS}
    assert BasicParams.from_dict(old) == params
    assert BasicParams.from_json(params.replace(clip_negative=True).to_json()).clip_negative


def test_a_profile_saved_before_the_fields_existed_loads(profile, tmp_path):
    path = profile.save(tmp_path / "scope")
    facts = json.loads((tmp_path / "scope.json").read_text())
    for name in APPLY_FIELDS:
        del facts["params"][name]
    (tmp_path / "scope.json").write_text(json.dumps(facts))
    assert ShadingProfile.load(path).params == profile.params


@pytest.mark.parametrize(
    "changes",
    [{"output_dtype": "uint16", "clip_negative": True}, {"output_dtype": "same"}, {}],
)
def test_the_batch_job_gives_what_the_apply_job_gives(profile, changes):
    tiles = tiles_around_offset(seed=7)
    params = BasicParams(**changes)
    direct = apply_profile(tiles, profile, params, device="cpu")
    hooked = run_job(batch_hooks.job(tiles, params, prepared=profile, device="cpu", cache_key=""))
    assert isinstance(hooked, CorrectionResult)
    assert hooked.image.dtype == direct.image.dtype
    assert hooked.image.tobytes() == direct.image.tobytes()
    # The shading left is measured as the dock's Apply measures it: the same facts.
    assert hooked.before is not None and hooked.summary() == direct.summary()


def test_a_batch_run_honours_the_recipes_apply_fields(tmp_path, profile, inprocess_client):
    # The whole path: `napari-gpuscope recipe flatfield --set ...` with a saved profile, run on
    # an in-process cluster, OME-Zarr read back: byte for byte the apply job's uint16 image.
    import tifffile

    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.recipes import load_recipe
    from napari_gpuscope.batch.runner import run_batch
    from napari_gpuscope.batch.store import BatchStore
    from napari_gpuscope.cli import main

    tiles = tiles_around_offset(seed=8, frames=3)
    folder = tmp_path / "tiles"
    folder.mkdir()
    for index, tile in enumerate(tiles):
        tifffile.imwrite(folder / f"tile{index}.tif", tile)
    saved = profile.save(tmp_path / "scope")
    recipe_path = tmp_path / "flat.yaml"
    code = main(
        [
            "recipe",
            "flatfield",
            "--set",
            "output_dtype=uint16",
            "--set",
            "clip_negative=true",
            "--artifact",
            f"profile={saved}",
            "-o",
            str(recipe_path),
        ]
    )
    assert code == 0
    recipe = load_recipe(recipe_path)
    assert recipe.params["output_dtype"] == "uint16" and recipe.params["clip_negative"] is True
    client = inprocess_client
    report = run_batch(
        recipe,
        discover(str(folder / "*.tif")),
        tmp_path / "out.zarr",
        client,
        recipe_dir=recipe_path.parent,
    )
    assert report.failed == {} and len(report.done) == 3
    loaded = ShadingProfile.load(saved)
    store = BatchStore(tmp_path / "out.zarr")
    for index, tile in enumerate(tiles):
        expected = apply_profile(tile, loaded, recipe.params_model(), device="cpu").image
        written = np.asarray(store.read_position(f"tile{index}"))
        assert written.dtype == np.uint16 and written.tobytes() == expected.tobytes()
