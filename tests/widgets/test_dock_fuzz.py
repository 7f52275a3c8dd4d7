"""A fuzz table for the docks (issue 26): bad parameter values through ``set_param`` and bad
input layers (blank, non-finite, extreme shapes) for every registered method's dock.

Each answer is a clear one: a ``ValueError`` (``KeyError`` for a field the dock has no control
for) naming the field and leaving the controls as they were; or, for a run, a refusal or a
failure said in the status line, a finished result with finite values -- never an exception
escaping into Qt (pytest-qt fails the test on one), never a changed input layer. The methods come
from the registry, so a new method is fuzzed without an edit here.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from dock_helpers import open_dock, select_input

from napari_gpuscope.methods import METHODS

DOCKS = sorted(METHODS)


def _dock(method_id, viewer, qtbot):
    return open_dock(METHODS[method_id].dock_class(), viewer, qtbot)


def _bad_values(info) -> list[object]:
    """Values the field's model must refuse, from its kind and bounds."""
    if info.kind == "bool":
        return ["no", 2, 0.5, "yes"]
    if info.kind == "str":
        return ["not-a-choice", 3, True]
    if info.kind in ("float", "int"):
        bad: list[object] = [math.nan, math.inf, -math.inf, "1.0", True, [1.0]]
        if info.minimum is not None:
            bad.append(info.minimum - max(1.0, abs(info.minimum)))
        if info.maximum is not None:
            bad.append(info.maximum + max(1.0, abs(info.maximum)))
        if info.kind == "int":
            bad.append(2.5)
        if not info.optional:
            bad.append(None)
        return bad
    return [math.nan, "text", {"a": 1}]


@pytest.mark.parametrize("method_id", DOCKS)
def test_bad_values_through_set_param_are_refused_naming_the_field(
    viewer, qtbot, cpu_device, method_id
):
    """Every refused value raises a ValueError that names the field; the dock's parameters are
    unchanged afterwards (nothing clamped, nothing half-set)."""
    dock = _dock(method_id, viewer, qtbot)
    before = dock.params()
    infos = {info.name: info for info in dock.params_class.param_info()}
    shown = [name for name in dock.form.widgets if name in infos]
    cases = [(name, value) for name in shown for value in _bad_values(infos[name])]
    random.Random(26).shuffle(cases)
    for name, value in cases:
        with pytest.raises(ValueError) as refused:
            dock.set_param(name, value)
        assert name in str(refused.value), (name, value, str(refused.value))
        assert dock.params() == before, (name, value)


def _layers(ndim: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs of the classes the issue names, with ``ndim`` axes (frames or planes first)."""
    lead = (6,) * (ndim - 2)
    noisy = rng.normal(100.0, 5.0, (*lead, 48, 48)).astype(np.float32)
    with_nan = noisy.copy()
    with_nan[(0,) * (ndim - 2) + (3, 4)] = np.nan
    with_inf = noisy.copy()
    with_inf[(0,) * (ndim - 2) + (5, 6)] = np.inf
    return {
        "blank": np.zeros((*lead, 48, 48), np.float32),
        "constant": np.full((*lead, 48, 48), 7.0, np.float32),
        "nan": with_nan,
        "inf": with_inf,
        "one row": rng.normal(100.0, 5.0, (*lead, 1, 64)).astype(np.float32),
        "tiny": rng.normal(100.0, 5.0, (*lead, 2, 2)).astype(np.float32),
        "strip": rng.normal(100.0, 5.0, (*lead, 4, 200)).astype(np.float32),
    }


@pytest.mark.parametrize("method_id", DOCKS)
def test_bad_inputs_get_a_clear_answer_and_stay_untouched(viewer, qtbot, cpu_device, method_id):
    """Each bad layer is refused in words, fails in words or gives a finite result; its data
    is never changed and the dock is ready for the next input."""
    dock = _dock(method_id, viewer, qtbot)
    rng = np.random.default_rng(26)
    for name, data in _layers(dock.input_dims[0] if dock.input_dims[0] > 2 else 2, rng).items():
        layer = viewer.add_image(data, name=name)
        kept = np.array(data, copy=True)
        select_input(dock, name)
        before = list(viewer.layers)
        started = dock.run()
        qtbot.waitUntil(lambda: not dock.is_running(), timeout=180_000)
        status = dock.panel.status.text()
        assert status, name
        assert np.array_equal(layer.data, kept, equal_nan=True), f"{name}: input changed"
        added = [added for added in viewer.layers if added not in before]
        if not started or not added:
            # refused or failed: said in words, and nothing of the attempt is left behind
            assert added == [], name
            assert not status.startswith(("Running", "Previewing")), (name, status)
            continue
        for result in added:
            values = np.asarray(result.data)
            if values.dtype.kind == "f":
                assert np.isfinite(values).all(), f"{name}: non-finite values in {result.name}"
        for result in added:
            viewer.layers.remove(result)
        viewer.layers.remove(layer)
