"""The TV dock's noise estimate on a worker thread outlives a dock that napari deleted."""

from __future__ import annotations

import numpy as np
from qtpy.QtCore import QObject

from napari_gpuscope.compute.tv import TVParams, WholeImageWeights
from napari_gpuscope.widgets.tv.noise import NoiseEstimate


def test_an_estimate_returning_after_its_dock_was_deleted_says_nothing(qtbot):
    """Seen in CI: 'wrapped C/C++ object of type NoiseEstimate has been deleted' when the
    viewer closed while the estimate ran."""
    from qtpy import sip  # the binding's own deletion, as napari's closing does

    parent = QObject()
    estimate = NoiseEstimate(parent, WholeImageWeights())
    image = np.random.default_rng(0).normal(100, 5, (512, 512)).astype(np.float32)
    done = []
    estimate.found.connect(lambda *_: done.append(True))
    assert estimate.start(image, TVParams())
    sip.delete(parent)  # deletes the estimate too, before its worker returns
    qtbot.waitUntil(lambda: estimate.running is None, timeout=60_000)
    assert done == [] and estimate.released
