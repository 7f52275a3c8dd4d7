"""Shared test fixtures."""

from __future__ import annotations

import os
import tempfile

# napari's persistent settings live in the user's config folder; opening a store with this
# plugin records a reader preference there (napari_reader.prefer_store). Tests get a throwaway
# settings file instead, so a test run never changes how the tester's napari opens folders.
# Read by napari when napari.settings is first imported, hence before anything imports napari.
# Set in every process, never inherited: pytest-xdist's workers (scripts/test.sh runs two) inherit
# the controller's environment, and two workers writing one settings file would race.
os.environ["NAPARI_CONFIG"] = os.path.join(
    tempfile.mkdtemp(prefix="gpuscope-napari-"), "settings.yaml"
)
# The docks' saved settings (napari_gpuscope.dock.settings.CONFIG_DIR_ENV) likewise: a test that
# saves a dock's parameters never writes the tester's own, and each worker has its own folder.
os.environ["NAPARI_GPUSCOPE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="gpuscope-config-")

import pytest
import torch

# CI machines have 2 cores shared with Xvfb and the Qt event loop; torch's intra-op thread pool
# then spends more time contending than computing (measured 12x slower on the TV tests).
torch.set_num_threads(1)


def pytest_configure(config):
    """Register the tests' method package (``tests/fake_method_pkg``) before collection when
    ``NAPARI_GPUSCOPE_TEST_METHOD_PACKAGE=1`` (``fake_method_pkg.ENV``): what the registry lists
    at collection time (parametrizations, tables) then includes it, as it would include a
    method whose entry is in ``methods.py``. Only ``tests/test_adding_a_method.py`` sets it, for
    a pytest run of its own; other runs see the plugin's own methods."""
    from fake_method_pkg import ENV

    if os.environ.get(ENV) == "1":
        from fake_method_pkg.entry import SPEC
        from napari_gpuscope import methods

        if SPEC.id not in methods.METHODS:
            methods.register(SPEC)


@pytest.fixture
def cpu_device():
    """Offer ``"cpu"`` in the docks' device combo for this test only (no GPU on CI).

    This fixture is the only thing that may add an entry to the test-only device list;
    nothing in the UI can. Yields the device string.
    """
    from napari_gpuscope.widgets import _devices

    entry = ("cpu (test only)", "cpu")
    _devices._TEST_ONLY_DEVICES.append(entry)
    try:
        yield "cpu"
    finally:
        _devices._TEST_ONLY_DEVICES.remove(entry)


@pytest.fixture
def flat_method(monkeypatch):
    """The toy two-phase method of ``tests/batch/batch_helpers.py`` (a flat-field stand-in),
    registered for one test, its hook counters reset (here, not in a tests/batch conftest: the
    test folders are not packages, so a second ``conftest`` module would clash with this one)."""
    from batch_helpers import FlatHooks

    from napari_gpuscope import methods

    spec = methods.MethodSpec(
        id="flat",
        title="Toy flat-field",
        params="batch_helpers:FlatParams",
        job="batch_helpers:iter_flat",
        dock="batch_helpers:NoDock",
        samples=(),
        demo_params="batch_helpers:FlatParams",
        batch="batch_helpers:FlatHooks",
    )
    monkeypatch.setitem(methods.METHODS, "flat", spec)
    FlatHooks.reads, FlatHooks.built = 0, {}
    return spec


@pytest.fixture(scope="module")
def inprocess_client():
    """A Dask client on one in-process worker thread, shared by a test module: its tasks see
    what the test registered (a method added at run time) and no process is spawned."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client
