"""The caption counts the frames a result used, not the frames its input holds (a run stopped
early, a live session's result, time points that leave frames over)."""

from __future__ import annotations

from types import SimpleNamespace as Layer

import numpy as np
import pytest

from napari_gpuscope.export._caption import result_sentence

STACK = Layer(name="cells", ndim=3, data=np.zeros((100, 4, 4)), axis_labels=("t", "y", "x"))


def _result(name, ndim, facts):
    record = {"method": "esrrf", "input": "cells", "result": facts}
    data = np.zeros((4,) * ndim)
    return Layer(name=name, ndim=ndim, data=data, metadata={"napari_gpuscope": record})


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"frames_analysed": 100}, "eSRRF of 100 frames (mag=5)"),
        ({"frames_analysed": 40, "stopped_early": True}, "eSRRF of 40 of 100 frames (mag=5)"),
        ({}, "eSRRF of 100 frames (mag=5)"),  # a record without the fact: the input's count
    ],
)
def test_the_caption_counts_the_frames_used(facts, expected):
    result = _result("eSRRF · cells [mag=5]", 2, facts)
    assert result_sentence(result, [STACK, result]) == expected


def test_time_points_and_a_missing_input():
    kept = _result("eSRRF · cells [mag=5]", 3, {"frames_analysed": 96})
    assert (
        result_sentence(kept, [STACK, kept]) == "eSRRF of 96 of 100 frames in 4 time points (mag=5)"
    )
    live = _result("eSRRF · cells [mag=5]", 2, {"frames_analysed": 1})
    assert result_sentence(live, [live]) == "eSRRF of 1 frame (mag=5)"  # input layer gone
