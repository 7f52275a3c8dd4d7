"""Every shipped ``.cu`` file compiles to PTX with nvcc (skipped when nvcc is absent)."""

from __future__ import annotations

import pytest

from napari_gpuscope.compute.kernels import (
    KernelSource,
    kernel_files,
    nvcc_available,
    nvcc_compile_check,
)

pytestmark = pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")


@pytest.mark.parametrize("path", kernel_files(), ids=lambda p: p.name)
def test_every_kernel_file_compiles_with_nvcc(path) -> None:
    ok, log = nvcc_compile_check(KernelSource(path))
    assert ok, log


def test_nvcc_check_reports_errors(tmp_path) -> None:
    path = tmp_path / "broken.cu"
    path.write_text('extern "C" __global__ void broken(float* v) { v[0] = undefined_name; }\n')
    ok, log = nvcc_compile_check(KernelSource(path))
    assert not ok
    assert "undefined_name" in log
