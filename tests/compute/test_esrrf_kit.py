"""The eSRRF part of the GPU kit (benchmarks/kit_esrrf.py), run on the CPU through the
host-emulated kernels: ``exercise`` launches every kernel and statistic, ``profile`` exactly
the five launches Nsight Compute is told to expect, and the overlap arithmetic of the bench."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from napari_gpuscope.compute.esrrf import _kernels
from napari_gpuscope.compute.kernels import HOST_KERNELS_ENV, host_emulation_available

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import kit_esrrf

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")
OPS = (_kernels.half_gradients, _kernels.rgc, _kernels.rgc_accumulate)


@pytest.fixture
def launches(monkeypatch):
    """Launches per op during the test, through the host-emulated kernels."""
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    for op in OPS:
        assert op.prepare("cpu")
    before = {op.name: op.calls["host"] for op in OPS}
    return lambda: {op.name: op.calls["host"] - before[op.name] for op in OPS}


def test_exercise_launches_every_kernel_and_statistic(launches):
    cpu = torch.device("cpu")
    kit_esrrf.exercise(cpu)
    # per geometry (2): gradients, maps, 3 statistics x (fresh + continuing); then a job of
    # 7 frames in chunks of 3 (3 chunks, 2 launches each)
    assert launches() == {
        "esrrf_half_gradients": 2 + 3,
        "esrrf_rgc": 2,
        "esrrf_rgc_accumulate": 2 * 6 + 3,
    }


def test_profile_launches_each_kernel_as_ncu_expects(launches, monkeypatch):
    """Five launches in all (the plan lets ncu profile up to 3 per op): gradients, maps and
    the accumulating RGC with each statistic. (At 40 x 40 here; 512 x 512 on the GPU.)"""
    monkeypatch.setattr(kit_esrrf, "SIZE", 40)
    kit_esrrf.profile(torch.device("cpu"))
    assert launches() == {"esrrf_half_gradients": 1, "esrrf_rgc": 1, "esrrf_rgc_accumulate": 3}
    names = {name for op in OPS for name in op.kernel_names}
    assert names == set(_kernels.SOURCE.kernel_names)


def test_overlap_summary_counts_uploads_under_other_chunks_kernels():
    spans = [
        ("upload", 0.0, 2.0),
        ("compute", 2.0, 6.0),
        ("upload", 3.0, 5.0),  # under chunk 1's kernels
        ("compute", 6.0, 9.0),
        ("upload", 9.5, 10.5),  # after everything: not overlapped
        ("compute", 10.5, 12.0),
    ]
    summary = kit_esrrf.overlap_summary(spans)
    assert summary["chunks"] == 3 and summary["later_uploads"] == 2
    assert summary["later_uploads_under_kernels"] == 1
    assert summary["overlapped_fraction_of_upload"] == pytest.approx(2.0 / 3.0, abs=1e-3)
    assert summary["upload_ms"] == 5.0 and summary["compute_ms"] == 8.5
    assert summary["span_ms"] == 12.0
