"""A batch run with drift correction writes each position's drift trace as ``drift.csv`` beside
its images (issue 19: "write the drift trace beside each position's result").

Two positions of a simulated drifting blinking acquisition (100 frames of 64 x 64, 150
emitters, 0.1 um pixels; tests/compute/esrrf_drift_sim.py) are run through the batch runner on
the CPU. The oracles: the simulator's true drift, the drift estimate called directly on the
position's file, and the group's provenance (the trace the images were corrected with). The
file must be inside the group's completion checksum (``--resume`` skips the complete store and
recomputes a position whose CSV was edited), open as the drift Tracks layer in the napari
reader, and load where the dock's "Load trace..." loads it (``load_drift_trace``).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import tifffile
import zarr

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.reader import get_reader, read_position
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf import DriftResult, load_drift_trace
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.results import image_layer

PIXEL_UM = 0.1
PARAMS = esrrf.EsrrfParams(magnification=2, drift_correction=True, drift_time_averaging=20)


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


@pytest.fixture(scope="module")
def drifting(tmp_path_factory):
    """Two ImageJ TIFFs (TYX, 0.1 um pixels) and their true drifts."""
    from esrrf_drift_sim_batch import drifting_positions

    folder = tmp_path_factory.mktemp("drift_csv")
    stacks, truths = drifting_positions()
    for index, stack in enumerate(stacks):
        tifffile.imwrite(
            folder / f"fov{index}.tif",
            stack,
            imagej=True,
            resolution=(1 / PIXEL_UM, 1 / PIXEL_UM),
            metadata={"unit": "um", "axes": "TYX"},
        )
    return folder, stacks, truths


@pytest.fixture(scope="module")
def store(tmp_path_factory, client, drifting):
    """The batch output of PARAMS on both positions (read-only for the tests: a test that
    changes it works on a copy)."""
    folder, _, _ = drifting
    out = tmp_path_factory.mktemp("drift_csv_out") / "out.zarr"
    report = run_batch(Recipe.from_params(PARAMS), discover(str(folder / "*.tif")), out, client)
    assert report.failed == {} and report.done == ["fov0", "fov1"]
    return out


def _attrs(out, position):
    return zarr.open_group(str(out / position), mode="r").attrs[ATTRIBUTE]


def _copy(out, destination):
    """The store and its markers, copied (a marker's key names the input, not the store)."""
    copy = destination / out.name
    shutil.copytree(out, copy)
    shutil.copytree(BatchStore(out).markers, BatchStore(copy).markers)
    return copy


def rms(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def test_each_position_has_its_drift_csv_equal_to_its_trace(store, drifting):
    _, stacks, truths = drifting
    for index, (stack, truth) in enumerate(zip(stacks, truths, strict=True)):
        name = f"fov{index}"
        path = store / name / "drift.csv"
        assert path.is_file()
        attrs = _attrs(store, name)
        assert attrs["files"] == ["drift.csv"]
        # The Tracks layer is not reported as lost: its data is the CSV.
        assert attrs["layers_in_files"] == {f"drift · {name} (tracks)": "drift.csv"}
        assert "layers_not_written" not in attrs
        assert BatchStore(store).done_record(name)["files"] == [f"{name}/drift.csv"]

        loaded = load_drift_trace(path)  # what the dock's "Load trace..." reads
        assert loaded.shape == (len(stack), 2)
        provenance = DriftResult.from_summary(attrs["provenance"]["result"]["drift"]).shifts
        np.testing.assert_array_equal(loaded, provenance)  # repr() floats: exact round trip
        direct = esrrf.estimate_drift(stack, params=PARAMS.drift_params(), device="cpu")
        np.testing.assert_allclose(loaded, direct.shifts, atol=1e-12)
        # The simulated truth: 0.12-0.16 px RMS on these two seeds (as the trace's end rule
        # changed), 0.08-0.22 px over seeds 7-14: the block noise of 20 frames of 64 x 64.
        assert rms(loaded, truth) < 0.2, (name, rms(loaded, truth))
        text = path.read_text(encoding="utf-8")
        assert "# unit: px (input pixels)" in text
        # An ImageJ TIFF's time axis has no unit; its pixels' micrometres are kept all the same
        assert "frame,dy_px,dx_px,dy_um,dx_um" in text.splitlines()
        assert f"# pixel_size: {PIXEL_UM!r} um" in text.splitlines()


def test_the_trace_in_the_csv_reproduces_the_positions_result(store, drifting):
    """Reusing the file (as the dock's loaded trace or a recipe's input): eSRRF corrected with
    the CSV's trace is the image the batch wrote."""
    _, stacks, _ = drifting
    trace = load_drift_trace(store / "fov1" / "drift.csv")
    again = run_job(esrrf.iter_esrrf(stacks[1], PARAMS, drift_shifts=trace, device="cpu"))
    np.testing.assert_allclose(
        BatchStore(store).read_position("fov1"), again.image, rtol=1e-6, atol=1e-6
    )


def test_resume_verifies_the_csv_with_the_checksum(store, drifting, client, tmp_path):
    folder, _, _ = drifting
    positions = discover(str(folder / "*.tif"))
    recipe = Recipe.from_params(PARAMS)
    copy = _copy(store, tmp_path)
    report = run_batch(recipe, positions, copy, client, resume=True)
    assert report.done == [] and report.skipped == ["fov0", "fov1"]

    # An edited trace is not the result that was marked complete: recomputed, and rewritten.
    path = copy / "fov0" / "drift.csv"
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines(keepends=True)
    lines[-1] = lines[-1].replace(",", ",1", 1)  # one value off
    path.write_text("".join(lines), encoding="utf-8")
    key = BatchStore(copy).done_record("fov0")["key"]
    assert not BatchStore(copy).is_complete("fov0", key)

    report = run_batch(recipe, positions, copy, client, resume=True)
    assert report.done == ["fov0"] and report.skipped == ["fov1"]
    assert path.read_text(encoding="utf-8") == original
    assert BatchStore(copy).is_complete("fov0", key)


def test_the_reader_opens_the_trace_as_the_drift_track_over_the_widefield(store, drifting):
    _, stacks, _ = drifting
    folder = store / "fov0"
    assert get_reader(str(folder)) is read_position
    layers = read_position(str(folder))
    kinds = [kind for _, _, kind in layers]
    assert kinds == ["image", "image", "tracks"]
    data, kwargs, _ = layers[-1]
    assert kwargs["name"] == "drift · fov0"
    assert kwargs["color_by"] == "frame"
    assert kwargs["metadata"]["quantity"] == "drift"
    assert kwargs["metadata"][ATTRIBUTE]["method"] == "esrrf"

    # The path of frame 0's centre pixel: centre (31.5, 31.5) moved by the CSV's trace.
    shifts = load_drift_trace(folder / "drift.csv")
    assert data.shape == (len(stacks[0]), 4)
    np.testing.assert_array_equal(data[:, 0], 0)
    np.testing.assert_array_equal(data[:, 1], np.arange(len(stacks[0])))
    np.testing.assert_allclose(data[:, 2:], 31.5 + shifts)
    # At the input's scale, as the widefield image (the same pixel grid: y and x agree).
    assert kwargs["scale"] == pytest.approx((1.0, PIXEL_UM, PIXEL_UM))
    widefield = next(k for _, k, _ in layers if k["name"].startswith("widefield mean"))
    assert widefield["scale"][-2:] == pytest.approx(kwargs["scale"][-2:])
    np.testing.assert_array_equal(np.shape(layers[1][0])[-2:], stacks[0].shape[-2:])


def test_a_damaged_csv_still_opens_the_images_with_a_warning(store, tmp_path):
    copy = _copy(store, tmp_path)
    (copy / "fov0" / "drift.csv").write_text("frame,dy_px\n0,0\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="not opened as a drift track"):
        layers = read_position(str(copy / "fov0"))
    assert [kind for _, _, kind in layers] == ["image", "image"]


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ("0,0,0\ninf,0.1,0.2\n", ""),  # a frame that is no integer (OverflowError before)
        ("0,0,0\n1,0.1\n", ""),  # a short row (TypeError before)
        ("".join(f"{k},0,0\n" for k in range(6)), "6 frames where the position's input"),
    ],
    ids=["frame inf", "short row", "too few frames"],
)
def test_a_wrong_csv_is_named_in_a_warning_and_the_images_open(store, tmp_path, rows, reason):
    """Issue 26 items 4 and 14: these hid the position's images, or opened silently."""
    copy = _copy(store, tmp_path)
    (copy / "fov0" / "drift.csv").write_text("frame,dy_px,dx_px\n" + rows, encoding="utf-8")
    with pytest.warns(UserWarning, match="drift.csv not opened as a drift track") as caught:
        layers = read_position(str(copy / "fov0"))
    assert reason in str(caught[0].message)
    assert [kind for _, _, kind in layers] == ["image", "image"]


def test_without_drift_correction_no_csv_is_written(drifting, client, tmp_path):
    folder, _, _ = drifting
    params = esrrf.EsrrfParams(magnification=2)
    out = tmp_path / "out.zarr"
    report = run_batch(Recipe.from_params(params), discover(str(folder / "fov0.tif")), out, client)
    assert report.done == ["fov0"]
    assert sorted(p.name for p in (out / "fov0").iterdir()) == ["0", "extra", "zarr.json"]
    attrs = _attrs(out, "fov0")
    assert "files" not in attrs and "layers_in_files" not in attrs
    assert BatchStore(out).done_record("fov0")["files"] == []
    assert [kind for _, _, kind in read_position(str(out / "fov0"))] == ["image", "image"]


def test_channels_write_channel_0s_trace_and_the_reader_draws_it(client, tmp_path):
    """A (C, T, Y, X) position: drift.csv is channel 0's trace (the one the dock draws), and
    the reader puts the track on one channel's (t, y, x) axes, under the name the run gave it."""
    from esrrf_drift_sim_batch import drifting_positions

    stacks, truths = drifting_positions(drifts=((1.0, 7), (1.0, 9)))  # drift together
    tifffile.imwrite(
        tmp_path / "cells.tif",
        np.stack(stacks),
        resolution=(1 / PIXEL_UM, 1 / PIXEL_UM),
        metadata={"axes": "CTYX"},
    )
    out = tmp_path / "out.zarr"
    report = run_batch(Recipe.from_params(PARAMS), discover(str(tmp_path / "*.tif")), out, client)
    assert report.done == ["cells"], report.failed
    attrs = _attrs(out, "cells")
    assert attrs["files"] == ["drift.csv"]
    assert attrs["layers_in_files"] == {"drift · cells ch0 (tracks)": "drift.csv"}
    loaded = load_drift_trace(out / "cells" / "drift.csv")
    channel0 = attrs["provenance"]["result"]["channels"][0]["drift"]
    np.testing.assert_array_equal(loaded, DriftResult.from_summary(channel0).shifts)
    assert rms(loaded, truths[0]) < 0.2

    track = read_position(str(out / "cells"))[-1]
    assert track[2] == "tracks" and track[1]["name"] == "drift · cells ch0"
    assert track[1]["scale"] == pytest.approx((1.0, PIXEL_UM, PIXEL_UM))
    assert track[1]["axis_labels"] == ("t", "y", "x")
    np.testing.assert_allclose(track[0][:, 2:], 31.5 + loaded)


def test_an_input_with_physical_units_gets_them_in_the_csv(client, drifting, tmp_path):
    """An OME-Zarr position with units on every axis: the CSV has the shifts in micrometres
    too (px times the pixel size) and the reader's track keeps the units. (An ImageJ TIFF's
    time axis has no unit, and its pixels' unit is kept: the tests above.)"""
    from ome_zarr.format import FormatV05
    from ome_zarr.writer import write_image

    _, stacks, _ = drifting
    group = zarr.open_group(str(tmp_path / "fov.zarr"), mode="w", zarr_format=3)
    write_image(
        stacks[0],
        group,
        scale_factors=None,
        fmt=FormatV05(),
        axes=["t", "y", "x"],
        axes_units={"t": "second", "y": "micrometer", "x": "micrometer"},
        scale={"t": 0.05, "y": PIXEL_UM, "x": PIXEL_UM},
    )
    positions = discover(str(tmp_path / "fov.zarr"))
    out = tmp_path / "out.zarr"
    report = run_batch(Recipe.from_params(PARAMS), positions, out, client)
    assert report.done == [positions[0].name], report.failed
    path = out / positions[0].name / "drift.csv"
    text = path.read_text(encoding="utf-8")
    assert "# pixel_size: 0.1 micrometer" in text.splitlines()
    rows = [line.split(",") for line in text.splitlines() if not line.startswith("#")]
    assert rows[0] == ["frame", "dy_px", "dx_px", "dy_micrometer", "dx_micrometer"]
    values = np.array(rows[1:], dtype=float)
    np.testing.assert_allclose(values[:, 3:], values[:, 1:3] * PIXEL_UM, rtol=1e-12)
    np.testing.assert_array_equal(load_drift_trace(path), values[:, 1:3])

    track = read_position(str(path.parent))[-1][1]
    assert track["units"] == ("second", "micrometer", "micrometer")
    assert track["scale"] == pytest.approx((0.05, PIXEL_UM, PIXEL_UM))


# ------------------------------------------------------------------ file names


def _image():
    return [image_layer(np.ones((8, 8), np.float32), "result · A01")]


@pytest.mark.parametrize(
    "bad",
    ["../drift.csv", "sub/drift.csv", "a\\b.csv", "..", ".hidden", "", "zarr.json", "ZARR.JSON",
     "extra", "0", "drift csv", "drïft.csv"],
)  # fmt: skip
def test_a_file_name_that_is_not_a_plain_name_is_refused_and_nothing_written(tmp_path, bad):
    store = BatchStore(tmp_path / "out.zarr")
    with pytest.raises(ValueError, match=r"file name .* is not valid: a file name is letters"):
        store.write_position("A01", _image(), {"provenance": {}}, {bad: "x\n"})
    assert not (store.out / "A01").exists()
    assert not list(store.out.glob(".writing-*"))  # no staging folder left behind


def test_file_content_must_be_text(tmp_path):
    store = BatchStore(tmp_path / "out.zarr")
    with pytest.raises(ValueError, match=r"'drift\.csv' is bytes, not text"):
        store.write_position("A01", _image(), {"provenance": {}}, {"drift.csv": b"0,0\n"})
    assert not (store.out / "A01").exists()


def test_files_are_written_byte_for_byte_and_checksummed(tmp_path):
    store = BatchStore(tmp_path / "out.zarr")
    text = "# µm\r\nframe,dy_px\n0,0.0\n"  # the text's own line ends and UTF-8
    store.write_position("A01", _image(), {"provenance": {}}, {"notes.txt": text})
    assert (store.out / "A01" / "notes.txt").read_bytes() == text.encode("utf-8")
    before = store.checksum("A01")
    (store.out / "A01" / "notes.txt").write_text("changed", encoding="utf-8")
    assert store.checksum("A01") != before


def test_a_result_file_with_a_bad_name_fails_its_position_naming_it(
    drifting, client, tmp_path, monkeypatch
):
    from napari_gpuscope.compute.esrrf._stream import EsrrfResult

    folder, _, _ = drifting
    monkeypatch.setattr(EsrrfResult, "files", lambda self, geometry=None: {"../out.csv": ""})
    out = tmp_path / "out.zarr"
    report = run_batch(
        Recipe.from_params(esrrf.EsrrfParams(magnification=2)),
        discover(str(folder / "fov0.tif")),
        out,
        client,
    )
    assert list(report.failed) == ["fov0"]
    assert (
        "writing" in report.failed["fov0"] and "'../out.csv' is not valid" in report.failed["fov0"]
    )
    assert not (out / "fov0").exists() and not (out.parent / "out.csv").exists()


def test_an_imagej_input_keeps_its_pixel_unit_without_a_time_unit(store):
    """ImageJ calibrates the pixels (0.1 um) but not the frames: the output's y and x axes are
    in micrometres, its time axis has no unit (napari's "pixel" is not written)."""
    attrs = zarr.open_group(str(store / "fov0"), mode="r").attrs.asdict()
    axes = (attrs.get("ome", attrs))["multiscales"][0]["axes"]
    assert [(a["name"], a.get("unit")) for a in axes] == [
        ("t", None),
        ("y", "micrometer"),
        ("x", "micrometer"),
    ]
    layer = read_position(str(store / "fov0"))[0][1]
    assert layer["units"] == ("pixel", "µm", "µm")
