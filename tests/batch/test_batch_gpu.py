"""Batch runs on the GPUs (skipped without one): pinned workers, results equal to direct calls on
the same GPU, the device in the provenance, device pools kept between positions (and bounded).

The GPU kit's ``batch`` step runs this file (``scripts/gpu-check.sh``): the GPU machine has no
dask, distributed, zarr, ome-zarr or pydantic, so the step installs them from the wheels that
``scripts/kit-wheels.sh`` downloaded into ``.kit-wheels/`` and that travel with the tree.
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
from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _pool() -> dict[str, int]:
    """The worker's torch pool: bytes reserved and allocated, cudaMalloc calls so far."""
    import torch

    stats = torch.cuda.memory_stats()
    return {
        "reserved": torch.cuda.memory_reserved(),
        "allocated": torch.cuda.memory_allocated(),
        "total": torch.cuda.get_device_properties(0).total_memory,
        "mallocs": stats.get("num_device_alloc", stats.get("segment.all.allocated", 0)),
    }


def test_gpu_batch_equals_direct_calls_and_reuses_the_pools(tmp_path):
    from napari_gpuscope.batch.pools import POOL_SLACK
    from napari_gpuscope.compute import tv

    count = len(gpu_indices("cuda"))
    paths = write_positions(tmp_path / "in", 4 * count, shape=(512, 512))
    recipe = Recipe.from_defaults("tv", strength=1.2)
    out = tmp_path / "out.zarr"
    device = ",".join(f"cuda:{i}" for i in range(count))
    with open_client(ClusterChoice(device=device, dashboard="")) as client:
        client.wait_for_workers(count)
        positions = discover(str(tmp_path / "in" / "*.tif"))
        report = run_batch(recipe, positions, out, client, device="cuda")
        first = client.run(_pool)
        again = run_batch(recipe, positions, tmp_path / "again.zarr", client, device="cuda")
        second = client.run(_pool)
    assert report.failed == {} and len(report.done) == len(paths)
    assert again.failed == {} and len(again.done) == len(paths)
    for worker, pool in second.items():
        # Kept between positions, never more than the slack unused...
        assert pool["reserved"] - pool["allocated"] <= POOL_SLACK * pool["total"], pool
        # ...and reused: the same positions again need (almost) no new cudaMalloc, where
        # emptying the pool after each one costs several per position.
        assert pool["mallocs"] - first[worker]["mallocs"] < len(paths), (first, second)
    stages = report.timings["position_stages"]
    assert sorted(stages) == report.done and all(s["compute"] > 0 for s in stages.values())
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
