"""A dock's set_param takes what the params model takes, and nothing else (issue 26 item 6).

Found by a hostile-user review: ``None`` on a choice or checkbox raised AttributeError, "yes"
on a checkbox a Qt TypeError, NaN became the control's maximum (max_drift 10,000), ``None``
its minimum and 2.5 became 2 on an integer field, without a word. The oracle is the params
model itself: every refused value is one ``EsrrfParams(...)`` refuses, with its message."""

from __future__ import annotations

import math

import pytest
from dock_helpers import open_dock

from napari_gpuscope.compute.esrrf import EsrrfParams
from napari_gpuscope.compute.params import ParameterError
from napari_gpuscope.widgets.esrrf.dock import EsrrfDock


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    return open_dock(EsrrfDock, viewer, qtbot)


BAD = [
    ("max_drift", math.nan),
    ("drift_smoothing", math.nan),
    ("magnification", 2.5),
    ("magnification", None),
    ("drift_correction", None),
    ("drift_correction", "yes"),
    ("radius", math.inf),
    ("magnification", 1000),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_a_value_the_model_refuses_is_refused_with_its_message(dock, name, value):
    with pytest.raises(ParameterError) as expected:
        EsrrfParams(**{name: value})
    before = dock.params()
    with pytest.raises(ParameterError) as refused:
        dock.set_param(name, value)
    assert str(refused.value) == str(expected.value) and name in str(refused.value)
    assert dock.params() == before  # the control still shows what it showed


def test_valid_values_are_shown_exactly(dock):
    dock.set_param("magnification", 3)
    dock.set_param("drift_smoothing", 2.5)
    dock.set_param("max_drift", None)  # "auto": the field has it
    params = dock.params()
    assert (params.magnification, params.drift_smoothing, params.max_drift) == (3, 2.5, None)
