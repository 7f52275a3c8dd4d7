"""Drift traces given by hand or read from a file: every wrong one is one ValueError naming
the file or ``drift_shifts`` and what is valid (issue 26 items 5 and 13).

Found by a hostile-user review: ``# pixel_size: inf`` gave an all-zero trace and ``-0.1``
flipped the signs, silently; frame ``inf``, short rows, huge fields and non-UTF-8 files raised
OverflowError, TypeError, csv.Error or UnicodeDecodeError without the file's name; 1e300 px,
True/False and complex traces (the imaginary part dropped) were accepted, a masked trace's
mask ignored, and string or ragged traces gave numpy's words."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf import DriftResult, load_drift_trace

GOOD = "frame,dy_px,dx_px\n0,0,0\n1,0.5,-0.25\n2,1.0,-0.5\n"


def test_a_good_trace_reads_as_written(tmp_path):
    path = tmp_path / "drift.csv"
    path.write_text(GOOD, encoding="utf-8")
    assert load_drift_trace(path).tolist() == [[0, 0], [0.5, -0.25], [1.0, -0.5]]


FILES = {
    "pixel size inf": ("# pixel_size: inf um\nframe,dy_um,dx_um\n0,0,0\n1,1,1\n", "pixel_size"),
    "pixel size negative": ("# pixel_size: -0.1 um\nframe,dy_um,dx_um\n0,0,0\n1,1,1\n", "posi"),
    "pixel size zero": ("# pixel_size: 0 um\nframe,dy_um,dx_um\n0,0,0\n1,1,1\n", "posi"),
    "frame inf": ("frame,dy_px,dx_px\n0,0,0\ninf,1,1\n", "frame"),
    "frame 1.5": ("frame,dy_px,dx_px\n0,0,0\n1.5,1,1\n", "frame"),
    "short row": ("frame,dy_px,dx_px\n0,0,0\n1,1\n", "row 2 has 2 fields"),
    "long row": ("frame,dy_px,dx_px\n0,0,0\n1,1,1,1\n", "row 2 has 4 fields"),
    "shift nan": ("frame,dy_px,dx_px\n0,0,0\n1,nan,1\n", "dy_px"),
    "shift a word": ("frame,dy_px,dx_px\n0,0,0\n1,left,1\n", "not a number"),
    "no columns": ("a,b\n0,0\n", "dy_px and dx_px"),
    "no rows": ("frame,dy_px,dx_px\n", "no drift trace rows"),
    "huge field": ("frame,dy_px,dx_px\n0,0," + "1" * 200_000 + "\n", "not a drift-trace CSV"),
}


@pytest.mark.parametrize("case", list(FILES))
def test_a_wrong_file_is_one_value_error_naming_it(tmp_path, case):
    text, words = FILES[case]
    path = tmp_path / "drift.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=words) as refused:
        load_drift_trace(path)
    assert str(path) in str(refused.value)


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "drift.csv"
    path.write_bytes(b"frame,dy_px,dx_px\n0,0,0\n1,\xff,0\n")
    with pytest.raises(ValueError, match="not UTF-8") as refused:
        DriftResult.from_csv(path)
    assert str(path) in str(refused.value)


TRACES = {
    "beyond the frame": (np.array([[0.0, 0.0], [1e300, 0.0], [0.0, 0.0]]), "frame size"),
    "a whole frame": (np.array([[0.0, 0.0], [0.0, 32.0], [0.0, 0.0]]), "frame size"),
    "True/False": (np.zeros((3, 2), bool), "True/False"),
    "complex": (np.zeros((3, 2), complex) + 1j, "complex"),
    "masked": (np.ma.masked_array(np.zeros((3, 2)), mask=[[0, 0], [1, 0], [0, 0]]), "masked"),
    "strings": (np.array([["a", "b"]] * 3), "real numbers"),
    "ragged": ([[0.0, 0.0], [1.0], [0.0, 0.0]], "drift_shifts"),
}


@pytest.mark.parametrize("case", list(TRACES))
def test_an_impossible_trace_is_refused_naming_drift_shifts(case):
    trace, words = TRACES[case]
    stack = np.random.default_rng(0).poisson(50, (3, 32, 32)).astype(np.float32)
    with pytest.raises(ValueError, match=words) as refused:
        esrrf.esrrf(stack, drift_shifts=trace, device="cpu")
    assert "drift_shifts" in str(refused.value)


def test_a_shift_within_the_frame_is_taken():
    stack = np.random.default_rng(0).poisson(50, (3, 32, 32)).astype(np.float32)
    trace = np.array([[0.0, 0.0], [0.0, 31.5], [-31.5, 0.0]])
    result = esrrf.esrrf(stack, drift_shifts=trace, device="cpu")
    assert np.isfinite(result).all()
