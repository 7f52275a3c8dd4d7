"""Batch runs on a local cluster of 2 worker processes: results equal direct calls byte for byte,
provenance, resume, changed recipes, failures recorded, a killed worker replaced, and every
registered method runnable."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import tifffile
import zarr
from batch_helpers import PIXEL_UM, direct, write_positions

from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import StoreExistsError, run_batch
from napari_gpuscope.batch.status import store_status
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.methods import METHODS


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of 2 spawned worker processes, one thread each (as ``--device cpu``),
    shared by this module's tests (starting one costs seconds)."""
    from napari_gpuscope.batch.cluster import ClusterChoice, open_client

    with open_client(ClusterChoice(device="cpu", workers=2, dashboard="")) as dask_client:
        dask_client.wait_for_workers(2)
        yield dask_client


def _assert_identical(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()


def test_twelve_positions_equal_direct_calls_and_resume_skips_them(tmp_path, client):
    paths = write_positions(tmp_path / "in", 12)
    recipe = Recipe.from_defaults("tv", strength=1.2, tolerance=2e-4)
    positions = discover(str(tmp_path / "in" / "*.tif"))
    out = tmp_path / "out.zarr"

    report = run_batch(recipe, positions, out, client, input_name="in/*.tif")

    names = [p.stem for p in paths]
    assert report.done == names and report.failed == {} and report.skipped == []
    assert report.exit_code == 0 and report.recipe_hash == recipe.hash()
    assert set(report.timings["position_seconds"]) == set(names)
    store = BatchStore(out)
    params = recipe.params_model()
    for path in paths:
        _assert_identical(store.read_position(path.stem), direct(path, params))
    # The OME-Zarr metadata, read back by the reference library, and the provenance.
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    node = next(iter(Reader(parse_url(str(out / "field03")))()))
    _assert_identical(np.asarray(node.data[0]), direct(paths[3], params))
    group = zarr.open_group(str(out / "field03"), mode="r")
    multiscales = group.attrs["ome"]["multiscales"][0]
    assert multiscales["datasets"][0]["path"] == "0"
    assert multiscales["datasets"][0]["coordinateTransformations"][0]["scale"] == pytest.approx(
        [PIXEL_UM, PIXEL_UM]
    )
    record = group.attrs[ATTRIBUTE]
    assert record["recipe_hash"] == recipe.hash()
    assert Recipe.from_data(record["recipe"]) == recipe
    provenance = record["provenance"]
    assert provenance["method"] == "tv" and provenance["parameters"] == recipe.params
    assert provenance["input"] == str(paths[3]) and provenance["software"]["torch"]
    assert provenance["result"]["iterations"] >= 1
    assert store_status(out).done == names

    with pytest.raises(StoreExistsError, match="--resume"):
        run_batch(recipe, positions, out, client)
    resumed = run_batch(recipe, positions, out, client, resume=True)
    assert resumed.done == [] and resumed.skipped == names

    # A changed recipe recomputes every position, even with --resume.
    changed = Recipe.from_defaults("tv", strength=0.8, tolerance=2e-4)
    again = run_batch(changed, positions, out, client, resume=True)
    assert again.done == names and again.skipped == []
    _assert_identical(store.read_position("field05"), direct(paths[5], changed.params_model()))
    assert store_status(out).recipe_hash == changed.hash()


def test_bad_inputs_are_recorded_as_failed_and_the_rest_finish(tmp_path, client):
    folder = tmp_path / "in"
    paths = write_positions(folder, 3, shape=(96, 96))
    (folder / "corrupt.tif").write_bytes(b"II*\x00 truncated by a failed copy")
    nan = np.ones((96, 96), np.float32)
    nan[10, 10] = np.nan
    tifffile.imwrite(folder / "nan.tif", nan)
    tifffile.imwrite(folder / "volume4d.tif", np.ones((2, 2, 2, 8, 8), np.float32))
    recipe = Recipe.from_defaults("tv")
    out = tmp_path / "out.zarr"

    report = run_batch(recipe, discover(str(folder / "*.tif")), out, client)

    assert report.done == [p.stem for p in paths]
    assert set(report.failed) == {"corrupt", "nan", "volume4d"}
    assert report.failed["corrupt"].startswith(f"reading {folder / 'corrupt.tif'}: ")
    assert report.failed["nan"].startswith("computing") and "NaN" in report.failed["nan"]
    assert "volume4d.tif" in report.failed["volume4d"]
    assert report.exit_code == 1
    status = store_status(out)
    assert status.failed == report.failed and sorted(status.done) == report.done
    assert not (out / "corrupt").exists()


def test_a_killed_worker_is_replaced_and_nothing_is_lost(tmp_path, client):
    paths = write_positions(tmp_path / "in", 8)
    recipe = Recipe.from_defaults("tv", tolerance=1e-6)  # long enough to be killed mid-way
    out = tmp_path / "out.zarr"
    pids = client.run(os.getpid)
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["report"] = run_batch(
                recipe, discover(str(tmp_path / "in" / "*.tif")), out, client
            )
        except Exception as exc:  # shown by the assertion below
            outcome["error"] = exc

    runner = threading.Thread(target=run)
    runner.start()
    victim = None
    deadline = time.monotonic() + 120
    while victim is None and time.monotonic() < deadline and runner.is_alive():
        busy = [address for address, keys in client.processing().items() if keys]
        if busy and (BatchStore(out).markers / "done").is_dir():  # one position is finished
            victim = pids[busy[0]]
        time.sleep(0.02)
    assert victim is not None, f"no position was running to kill: {outcome}"
    os.kill(victim, signal.SIGKILL)
    runner.join(timeout=300)

    assert "report" in outcome, outcome
    report = outcome["report"]
    assert report.failed == {} and report.done == [p.stem for p in paths]
    store = BatchStore(out)
    params = recipe.params_model()
    for path in paths:
        _assert_identical(store.read_position(path.stem), direct(path, params))
    client.wait_for_workers(2, timeout=60)  # the nanny started a new worker process
    assert victim not in client.run(os.getpid).values()


@pytest.mark.parametrize("method_id", list(METHODS))
def test_every_registered_method_runs_one_position(tmp_path, client, method_id):
    spec = METHODS[method_id]
    data, kwargs, _ = spec.samples[0].load()[0]
    if not kwargs.get("rgb"):  # a small position: the central 128 x 128 of each plane
        data = np.asarray(data)
        y, x = data.shape[-2:]
        data = data[..., (y - min(y, 128)) // 2 :, (x - min(x, 128)) // 2 :][..., :128, :128]
    params = spec.params_for_sample(kwargs)
    tifffile.imwrite(tmp_path / "sample.tif", np.asarray(data))
    out = tmp_path / "out.zarr"

    report = run_batch(
        Recipe.from_params(params), discover(str(tmp_path / "sample.tif")), out, client
    )

    assert report.failed == {} and report.done == ["sample"]
    written = BatchStore(out).read_position("sample")
    assert np.isfinite(written).all()
    if spec.batch is None:  # one-phase: the registry's job on the same data and parameters
        result = run_job(spec.job_function()(np.asarray(data), params=params, device="cpu"))
        _assert_identical(written, np.asarray(result.layers("sample")[0][0]))


def test_an_interrupt_returns_the_report_so_far_and_resume_finishes(tmp_path, client):
    paths = write_positions(tmp_path / "in", 6, shape=(128, 128))
    positions = discover(str(tmp_path / "in" / "*.tif"))
    recipe = Recipe.from_defaults("tv", tolerance=1e-5)
    out = tmp_path / "out.zarr"

    def interrupt(done: int, failed: int, total: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C after the first finished position

    report = run_batch(recipe, positions, out, client, on_update=interrupt)

    assert report.interrupted and report.exit_code == 130
    assert len(report.done) >= 1 and report.failed == {}
    assert any("INTERRUPTED" in line for line in report.lines())
    # A cancelled position may still be running on its worker (a thread cannot be stopped)
    # while the resumed run computes it too: each attempt renames its own complete group
    # into place, so the store stays consistent either way.
    resumed = run_batch(recipe, positions, out, client, resume=True)
    assert sorted(resumed.skipped + resumed.done) == [p.stem for p in paths]
    assert set(report.done) <= set(resumed.skipped)
    assert store_status(out).done == [p.stem for p in paths]
    for path in paths:
        _assert_identical(
            BatchStore(out).read_position(path.stem), direct(path, recipe.params_model())
        )
    assert not list(out.glob(".writing-*"))
