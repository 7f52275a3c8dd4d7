"""The GPU kit's flat-field module (benchmarks/kit_flatfield.py) on the CPU, through the g++
emulation of the kernels: its launch counting finds the counts the ALM tests assert, and
``exercise`` and ``profile`` launch every kernel of basic_alm.cu (what compute-sanitizer and
Nsight Compute will see on the GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from napari_gpuscope.compute.flatfield import _ops as ops
from napari_gpuscope.compute.kernels import HOST_KERNELS_ENV, host_emulation_available

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import kit_flatfield

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def host_kernels(monkeypatch):
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    for op in ops.OPS:
        assert op.prepare(CPU)  # self-tests outside the counts


@pytest.mark.parametrize(("dark", "launches"), [(False, 12), (True, 19)], ids=["no-dark", "dark"])
def test_iteration_profile_counts(dark, launches):
    row = kit_flatfield.iteration_profile(CPU, 20, dark, shape=(16, 16))
    assert row["launches_per_iteration"] == launches
    assert row["async_copies_per_iteration"] == 1
    expected = set(ops.KERNELS) - (set() if dark else {"basic_dark_shape", "basic_dark_finish"})
    assert set(row["kernels_per_iteration"]) == expected
    assert row["syncs_per_iteration"] is None  # measured on CUDA only


def _kernels_of(run) -> set[str]:
    counter = kit_flatfield._CountOps()
    with counter.counting(CPU):
        run()
    return set(counter.kernels)


def test_exercise_launches_every_kernel():
    assert _kernels_of(lambda: kit_flatfield.exercise(CPU)) == set(ops.KERNELS)


def test_profile_launches_every_kernel_once():
    counter = kit_flatfield._CountOps()
    with counter.counting(CPU):
        kit_flatfield.profile(CPU, t=12)
    assert set(counter.kernels) == set(ops.KERNELS)
    assert counter.kernels["basic_shrink"] == 2  # flatfield and darkfield
    assert all(n == 1 for k, n in counter.kernels.items() if k != "basic_shrink")


def test_byte_model_is_16_bytes_per_element_and_a_little():
    images = torch.empty(1, 1000, 128, 128)
    model = ops.step_bytes(images, True)
    for name in ("basic_sparse", "basic_dual"):
        assert 16 <= model[name] / images.numel() < 16 * 1.1, (name, model[name])
