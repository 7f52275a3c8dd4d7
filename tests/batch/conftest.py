"""Fixtures shared by the batch tests."""

from __future__ import annotations

import pytest
from batch_helpers import FlatHooks

from napari_gpuscope import methods


@pytest.fixture
def flat_method(monkeypatch):
    """The toy two-phase method of ``batch_helpers`` (a flat-field stand-in), registered for
    one test, its hook counters reset."""
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
