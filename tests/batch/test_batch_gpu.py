"""Batch runs on the GPUs (skipped without one): pinned workers, results equal to direct calls on
the same GPU, the device in the provenance, device pools empty between positions.

Run on a GPU machine with ``pytest -m gpu tests/batch`` (not part of ``scripts/gpu-check.sh``,
whose kit runs without dask and pydantic).
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import torch
import zarr
from batch_helpers import write_positions

from napari_gpuscope.batch.cluster import ClusterChoice, gpu_indices, open_client
from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import ATTRIBUTE, BatchStore

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _reserved() -> int:
    import torch

    return torch.cuda.memory_reserved()


def test_gpu_batch_equals_direct_calls_and_frees_the_pools(tmp_path):
    from napari_gpuscope.compute import tv

    count = len(gpu_indices("cuda"))
    paths = write_positions(tmp_path / "in", 4 * count, shape=(512, 512))
    recipe = Recipe.from_defaults("tv", strength=1.2)
    out = tmp_path / "out.zarr"
    device = ",".join(f"cuda:{i}" for i in range(count))
    with open_client(ClusterChoice(device=device, dashboard="")) as client:
        client.wait_for_workers(count)
        report = run_batch(
            recipe, discover(str(tmp_path / "in" / "*.tif")), out, client, device="cuda"
        )
        reserved = client.run(_reserved)
    assert report.failed == {} and len(report.done) == len(paths)
    assert set(reserved.values()) == {0}, reserved  # torch's pool emptied after each position
    store = BatchStore(out)
    workers = set()
    for path in paths:
        expected = tv.denoise(tifffile.imread(path), params=recipe.params_model(), device="cuda:0")
        written = store.read_position(path.stem)
        np.testing.assert_allclose(written, expected, rtol=0, atol=1e-5 * float(expected.max()))
        record = zarr.open_group(str(out / path.stem), mode="r").attrs[ATTRIBUTE]
        assert record["provenance"]["device"].startswith("cuda:0 (")  # the worker's own GPU
        workers.add(store.done_record(path.stem)["worker"]["pid"])
    assert len(workers) == count  # every GPU worked
