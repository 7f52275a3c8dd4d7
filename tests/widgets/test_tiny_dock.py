"""The dock of a method added at run time (tests/tiny_method.py): a MethodDock subclass that
only names its method finds everything else in the registry entry. The dock of the tests' method
package (tests/fake_method_pkg) runs in that package's own pytest run
(tests/test_adding_a_method.py), where its entry is registered before collection."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fake_method_pkg import ENV as PACKAGE_ENV
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


@pytest.mark.skipif(
    os.environ.get(PACKAGE_ENV) != "1",
    reason="runs in the method package's own pytest run (tests/test_adding_a_method.py)",
)
def test_the_method_package_runs_from_its_dock(viewer, qtbot, cpu_device):
    from fake_method_pkg.compute import ClipParams
    from fake_method_pkg.samples import gradient

    spec = methods.method("clip")
    data, kwargs, _ = gradient()[0]
    layer = viewer.add_image(data, **kwargs)
    dock = spec.dock_class()(viewer)
    qtbot.addWidget(dock)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    assert dock.title == spec.title and dock.input_layer.name == layer.name == "gradient"
    assert dock.params() == ClipParams()  # the form comes from the params model
    dock.set_param("high", 50.0)

    assert dock.run() is True
    qtbot.waitUntil(lambda: dock.last_result_layer is not None, timeout=10_000)
    result = dock.last_result_layer
    assert result.name == "clipped · gradient [0-50]"
    np.testing.assert_array_equal(result.data, np.clip(data.astype(np.float32), 0, 50))
    np.testing.assert_allclose(result.scale, layer.scale)
    assert result.metadata[PROVENANCE_KEY]["method"] == "clip"
