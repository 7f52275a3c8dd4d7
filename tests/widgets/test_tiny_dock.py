"""The dock of a method added at run time (tests/tiny_method.py): a MethodDock subclass that
only names its method finds everything else in the registry entry."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope import methods
from napari_gpuscope.provenance import PROVENANCE_KEY
from tiny_method import SPEC, TinyParams, ramp


@pytest.fixture
def tiny():
    with methods.registered(SPEC) as spec:
        yield spec


def test_the_registered_method_runs_from_its_dock(viewer, qtbot, cpu_device, tiny):
    data, kwargs, _ = ramp()[0]
    layer = viewer.add_image(data, **kwargs)
    dock = tiny.dock_class()(viewer)
    qtbot.addWidget(dock)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    assert dock.title == SPEC.title
    assert dock.input_layer.name == layer.name == "ramp"
    assert dock.params() == TinyParams()  # the form comes from the params model

    assert dock.run() is True
    qtbot.waitUntil(lambda: dock.last_result_layer is not None, timeout=10_000)
    result = dock.last_result_layer
    assert result.name == "ramp [tiny x2]"
    np.testing.assert_array_equal(result.data, data.astype(np.float32) * 2)
    assert result.metadata[PROVENANCE_KEY]["method"] == "tiny"
