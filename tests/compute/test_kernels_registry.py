"""The op registry: every kernel of every .cu file belongs to a registered op, found without
importing the methods first and without touching CUDA; throw-away ops stay out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from napari_gpuscope.compute.kernels import (
    FusedOp,
    HostBackend,
    KernelSource,
    host_emulation_available,
    kernel_files,
    kernels_named_in,
    op_modules,
    registered_ops,
)
from napari_gpuscope.compute.kernels import axpby as axpby_module

needs_gxx = pytest.mark.skipif(not host_emulation_available(), reason="g++ not on PATH")

# Independent of KernelSource's parser: every `__global__ void NAME(` outside comments.
_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)\s*\(")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _globals_in(path: Path) -> set[str]:
    return set(_GLOBAL.findall(_COMMENT.sub("", path.read_text(encoding="utf-8"))))


def test_every_kernel_of_every_cu_file_is_run_by_a_registered_op():
    ops = registered_ops()
    declared = {name: op.name for op in ops for name in op.kernel_names}
    files = kernel_files()
    assert len(files) >= 5  # axpby, TV, eSRRF, flat-field, phase
    for path in files:
        kernels = _globals_in(path)
        assert kernels, path
        missing = sorted(kernels - declared.keys())
        assert not missing, f"{path.name}: no registered op launches {missing}"
    every = set().union(*(_globals_in(path) for path in files))
    for op in ops:
        assert op.kernel_names, f"{op.name} names no kernel"
        assert set(op.kernel_names) <= every, op.name


def test_op_names_are_unique_and_every_op_module_is_in_the_compute_package():
    ops = registered_ops()
    names = [op.name for op in ops]
    assert len(names) == len(set(names)), names
    assert {op.module for op in ops} == set(op_modules())
    assert all(m.startswith("napari_gpuscope.compute.") for m in op_modules())


class _RecordingBackend(HostBackend):
    """Host emulation that notes which kernels a launcher fetches."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched: list[str] = []

    def on_current_stream(self) -> _RecordingBackend:
        return self

    def function(self, source: KernelSource, name: str):
        self.fetched.append(name)
        return super().function(source, name)


@needs_gxx
@pytest.mark.parametrize("op", registered_ops(), ids=lambda op: op.name)
def test_each_op_launches_only_the_kernels_it_names(op):
    """The self-test's example through the g++ emulation: the kernels fetched are the op's own
    (so the names read from a launcher are real), and they match the twin."""
    backend = _RecordingBackend()
    ok, detail = op.self_test(backend, torch.device("cpu"))
    assert backend.fetched, f"{op.name} launched nothing"
    assert set(backend.fetched) <= set(op.kernel_names), (backend.fetched, op.kernel_names)
    assert ok, detail


_FRESH = """
import json, sys, torch
from napari_gpuscope.compute.kernels import FusedOp, registered_ops
from napari_gpuscope.compute.kernels import axpby as m
def throw_away():
    return FusedOp("throw-away", m._launch, m.axpby_twin, m._example, outputs=(2,))
kept = throw_away()
plugin = FusedOp("plugin-op", m._launch, m.axpby_twin, m._example, outputs=(2,), register=True)
before = sorted(k for k in sys.modules if k.startswith("napari_gpuscope.compute."))
ops = registered_ops()
print(json.dumps({
    "names": [op.name for op in ops],
    "kernels": sorted({k for op in ops for k in op.kernel_names}),
    "before": before,
    "cuda_initialized": torch.cuda.is_initialized(),
    "cupy_imported": "cupy" in sys.modules,
    "heavy": sorted(k for k in sys.modules if k.split(".")[0] in
                    ("dask", "distributed", "yaml", "zarr", "napari")),
}))
"""


def test_registered_ops_finds_every_method_from_a_fresh_interpreter():
    result = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=300, check=True
    )
    state = json.loads(result.stdout.strip().splitlines()[-1])
    # Nothing of the methods was imported before the call...
    assert not any(".esrrf" in m or ".phase" in m or ".flatfield" in m for m in state["before"])
    # ...and every method's ops are there: every kernel of every .cu file.
    assert set().union(*(_globals_in(path) for path in kernel_files())) <= set(state["kernels"])
    assert "plugin-op" in state["names"] and "throw-away" not in state["names"]
    assert not state["cuda_initialized"] and not state["cupy_imported"]
    assert state["heavy"] == []  # the GPU machine has none of these


def test_kernel_names_are_read_from_the_launcher_or_declared(tmp_path):
    path = tmp_path / "family.cu"
    path.write_text(
        'extern "C" __global__ void fam_a_1(float* x) {}\n'
        'extern "C" __global__ void fam_a_2(float* x) {}\n'
        'extern "C" __global__ void fam_b(float* x) {}\n'
        '// extern "C" __global__ void fam_commented(float* x) {}\n'
    )
    source = KernelSource(path)

    def by_prefix(backend, x, variant):
        backend.function(source, f"fam_a_{variant}")

    def by_name(backend, x):
        def inner():
            return backend.function(source, "fam_b")

        inner()

    assert kernels_named_in(by_prefix) == ("fam_a_1", "fam_a_2")
    assert kernels_named_in(by_name) == ("fam_b",)
    assert kernels_named_in(lambda backend, x: None) == ()
    declared = FusedOp(
        "declared",
        by_name,
        axpby_module.axpby_twin,
        axpby_module._example,
        outputs=(2,),
        kernels=("fam_a_2",),
    )
    assert declared.kernel_names == ("fam_a_2",)
    assert declared not in registered_ops()  # built in a test: not one of the package's ops


def test_an_op_knows_its_module_and_kernels():
    assert axpby_module.axpby.kernel_names == ("axpby",)
    assert axpby_module.axpby.module == "napari_gpuscope.compute.kernels.axpby"
