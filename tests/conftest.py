"""Shared test fixtures."""

from __future__ import annotations

import pytest


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
