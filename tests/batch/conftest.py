"""Fixtures of the batch tests: one local Dask cluster of 2 worker processes shared by a
module's tests (starting one costs seconds)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of 2 spawned worker processes, one thread each (as ``--device cpu``)."""
    from napari_gpuscope.batch.cluster import ClusterChoice, open_client

    with open_client(ClusterChoice(device="cpu", workers=2, dashboard="")) as dask_client:
        dask_client.wait_for_workers(2)
        yield dask_client
