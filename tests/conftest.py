"""Shared test fixtures."""

from __future__ import annotations

import pytest
import torch

# CI machines have 2 cores shared with Xvfb and the Qt event loop; torch's intra-op thread pool
# then spends more time contending than computing (measured 12x slower on the TV tests).
torch.set_num_threads(1)


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
