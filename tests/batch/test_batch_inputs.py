"""Batch inputs written by the reference OME-Zarr library: an image, an HCS plate, a group of
images (an earlier batch output), NGFF 0.4 and 0.5; identities follow the files."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

from napari_gpuscope.batch.inputs import InputError, discover


def _image(group, data, fmt) -> None:
    write_image(
        data,
        group,
        scale_factors=None,
        fmt=fmt,
        axes=["y", "x"],
        axes_units={"y": "micrometer", "x": "micrometer"},
        scale={"y": 0.2, "x": 0.1},
    )


@pytest.mark.parametrize("fmt", [FormatV05(), FormatV04()], ids=["ngff-0.5", "ngff-0.4"])
def test_hcs_plate_fields_are_positions(tmp_path, fmt):
    root = zarr.open_group(str(tmp_path / "plate.zarr"), mode="w", zarr_format=fmt.zarr_format)
    wells = ["A/1", "B/3"]
    write_plate_metadata(root, ["A", "B"], ["1", "3"], wells, fmt=fmt)
    expected = {}
    for well in wells:
        group = root.require_group(well)
        write_well_metadata(group, ["0", "1"], fmt=fmt)
        for field in ("0", "1"):
            data = np.random.default_rng(len(expected)).integers(0, 4000, (24, 32), np.uint16)
            _image(group.require_group(field), data, fmt)
            expected[f"{well.replace('/', '')}-{field}"] = data

    positions = discover(tmp_path / "plate.zarr")

    assert [p.name for p in positions] == list(expected)
    for position in positions:
        np.testing.assert_array_equal(position.read(), expected[position.name])
        info = position.info()
        assert info.shape == (24, 32) and info.dtype == "uint16" and info.axes == ("y", "x")
        assert info.pixel_size == (0.2, 0.1) and info.units == ("micrometer", "micrometer")


def test_single_image_group_of_images_and_identity(tmp_path):
    data = np.arange(12 * 16, dtype=np.float32).reshape(12, 16)
    _image(zarr.open_group(str(tmp_path / "cells.zarr"), mode="w"), data, FormatV05())
    [position] = discover(tmp_path / "cells.zarr")
    assert position.name == "cells" and np.array_equal(position.read(), data)
    identity = position.identity()
    assert identity == position.identity()

    outputs = zarr.open_group(str(tmp_path / "out.zarr"), mode="w")
    for name in ("b", "a"):
        _image(outputs.create_group(name), data, FormatV05())
    assert [p.name for p in discover(tmp_path / "out.zarr")] == ["a", "b"]

    # A replaced file has another identity (its position is then recomputed on --resume).
    tiff = tmp_path / "t.tif"
    import tifffile

    tifffile.imwrite(tiff, data)
    [first] = discover(str(tiff))
    before = first.identity()
    tifffile.imwrite(tiff, data + 1)
    os.utime(tiff, ns=(1, 1))
    assert first.identity() != before


def test_inputs_that_name_nothing_usable(tmp_path):
    with pytest.raises(InputError, match="matches no TIFF"):
        discover(str(tmp_path / "*.tif"))
    with pytest.raises(InputError, match="give a glob"):
        discover(tmp_path)
    zarr.open_group(str(tmp_path / "empty.zarr"), mode="w")
    with pytest.raises(InputError, match="neither an OME-Zarr image"):
        discover(tmp_path / "empty.zarr")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a b.tif").write_bytes(b"")
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "a_b.tif").write_bytes(b"")
    with pytest.raises(InputError, match="two inputs map to the position name 'a_b'"):
        discover(str(tmp_path / "*" / "*.tif"))


def test_a_plate_field_runs_lazily_and_equals_the_direct_call(tmp_path):

    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.batch.store import BatchStore
    from napari_gpuscope.batch.task_spec import TaskSpec
    from napari_gpuscope.batch.tasks import run_position
    from napari_gpuscope.compute import tv

    root = zarr.open_group(str(tmp_path / "plate.zarr"), mode="w")
    write_plate_metadata(root, ["A"], ["1"], ["A/1"])
    well = root.require_group("A/1")
    write_well_metadata(well, ["0"])
    noisy = np.random.default_rng(0).poisson(40.0, (48, 64)).astype(np.uint16)
    _image(well.require_group("0"), noisy, FormatV05())
    [position] = discover(tmp_path / "plate.zarr")
    assert isinstance(position.open(), zarr.Array)  # read by the method, not loaded first
    recipe = Recipe.from_defaults("tv")
    spec = TaskSpec(recipe.model_dump(mode="json"), recipe.hash(), str(tmp_path / "out.zarr"))
    store = BatchStore(spec.out)
    store.prepare({})

    summary = run_position(spec, position, "key")

    assert summary["status"] == "done", summary
    expected = tv.denoise(noisy, params=recipe.params_model(), device="cpu")
    assert store.read_position("A1-0").tobytes() == expected.tobytes()
