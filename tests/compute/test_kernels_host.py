"""Kernels compiled with g++ through host_shim.h and compared with independent references."""

from __future__ import annotations

import importlib.resources

import numpy as np
import pytest
import torch

from napari_gpuscope.compute.kernels import (
    HostBackend,
    KernelCompileError,
    KernelSource,
    grid_size,
    host_emulation_available,
    kernel_files,
)
from napari_gpuscope.compute.kernels.axpby import SOURCE, axpby, axpby_twin

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not on PATH")

KERNEL_FILES = kernel_files()


def _numpy_axpby(x: torch.Tensor, y: torch.Tensor, a: float, b: float) -> np.ndarray:
    # Independent oracle: float32 NumPy arithmetic, not our twin.
    return np.float32(a) * x.numpy() + np.float32(b) * y.numpy()


@pytest.mark.parametrize("n", [1, 255, 256, 1000, 4099])
def test_host_axpby_matches_twin_and_numpy(n: int) -> None:
    generator = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=generator)
    y = torch.randn(n, generator=generator)
    x_before, y_before = x.clone(), y.clone()
    out_kernel = torch.full((n,), float("nan"))
    out_twin = torch.full((n,), float("nan"))

    axpby.run_on(HostBackend(), x, y, out_kernel, 0.75, -2.5)
    axpby_twin(x, y, out_twin, 0.75, -2.5)

    torch.testing.assert_close(out_kernel, out_twin, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out_kernel.numpy(), _numpy_axpby(x, y, 0.75, -2.5), rtol=1e-6)
    assert torch.equal(x, x_before) and torch.equal(y, y_before)  # inputs untouched


def test_grid_stride_loop_covers_more_elements_than_threads() -> None:
    backend = HostBackend(max_blocks=3)
    n = 10 * 3 * backend.block + 17
    assert grid_size(n, backend.block, backend.max_blocks) * backend.block < n
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(n, generator=generator), torch.randn(n, generator=generator)
    out = torch.full((n,), float("nan"))
    axpby.run_on(backend, x, y, out, 2.0, 3.0)
    np.testing.assert_allclose(out.numpy(), _numpy_axpby(x, y, 2.0, 3.0), rtol=1e-6)


def test_multidimensional_tensors_are_flat_views() -> None:
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(3, 5, 7, generator=generator), torch.randn(3, 5, 7, generator=generator)
    out = torch.empty(3, 5, 7)
    axpby.run_on(HostBackend(), x, y, out, 1.0, 1.0)
    np.testing.assert_allclose(out.numpy(), x.numpy() + y.numpy(), rtol=1e-6)


def test_empty_input_launches_nothing() -> None:
    out = torch.empty(0)
    axpby.run_on(HostBackend(), torch.empty(0), torch.empty(0), out, 1.0, 1.0)
    assert out.numel() == 0


def test_signature_is_read_from_the_compiled_kernel() -> None:
    function = HostBackend().function(SOURCE, "axpby")
    assert function.signature == ("f32*", "f32*", "f32*", "f32", "f32", "i64")


def test_argument_types_must_match_the_c_signature() -> None:
    backend = HostBackend()
    function = backend.function(SOURCE, "axpby")
    x = backend.array(torch.zeros(4))
    good = [x, x, x, np.float32(1), np.float32(1), np.int64(4)]
    backend.launch(function, 4, good)
    with pytest.raises(TypeError, match="argument 5"):
        backend.launch(function, 4, [*good[:5], np.int32(4)])  # int32 where C has long long
    with pytest.raises(TypeError, match="argument 3"):
        backend.launch(function, 4, [x, x, x, 1.0, np.float32(1), np.int64(4)])  # Python float
    with pytest.raises(TypeError, match="argument 0"):
        backend.launch(function, 4, [np.zeros(4), *good[1:]])  # float64 array
    with pytest.raises(TypeError, match="takes 6 arguments"):
        backend.launch(function, 4, good[:5])


def test_host_backend_rejects_non_contiguous_tensors() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        HostBackend().array(torch.zeros(4, 4).T)


def test_reverse_thread_order_exposes_races(tmp_path) -> None:
    # Each thread reads its neighbour's output: a race on a GPU, order-dependent on the host.
    path = tmp_path / "racy.cu"
    path.write_text(
        'extern "C" __global__ void racy(float* v, const long long n) {\n'
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i + 1 < n) v[i] = v[i] + v[i + 1];\n"
        "}\n"
    )
    racy = KernelSource(path)

    def run(backend: HostBackend, values: torch.Tensor) -> torch.Tensor:
        v = values.clone()
        backend.launch(backend.function(racy, "racy"), 600, [backend.array(v), np.int64(600)])
        return v

    values = torch.arange(600, dtype=torch.float32)
    assert not torch.equal(run(HostBackend(), values), run(HostBackend(reverse=True), values))

    # axpby has no such dependency: both orders agree exactly.
    x, y = torch.randn(600), torch.randn(600)
    forward, backward = torch.empty(600), torch.empty(600)
    axpby.run_on(HostBackend(), x, y, forward, 2.0, 1.0)
    axpby.run_on(HostBackend(reverse=True), x, y, backward, 2.0, 1.0)
    assert torch.equal(forward, backward)


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_every_kernel_file_host_compiles(path) -> None:
    source = KernelSource(path)
    assert source.kernel_names, f'{path.name} declares no extern "C" __global__ kernel'
    assert not source.includes, f"NVRTC has no standard headers: {source.includes}"
    backend = HostBackend()
    for name in source.kernel_names:
        function = backend.function(source, name)
        assert function.signature, f"{name} takes no parameters"


@pytest.mark.parametrize(
    "body",
    [
        "__shared__ float tile[256]; v[0] = tile[0];",
        "atomicAdd(v, 1.0f);",
        "__syncthreads();",
    ],
    ids=["shared-memory", "atomics", "syncthreads"],
)
def test_shim_rejects_forbidden_cuda_features(tmp_path, body: str) -> None:
    path = tmp_path / "forbidden.cu"
    path.write_text(f'extern "C" __global__ void forbidden(float* v) {{ {body} }}\n')
    with pytest.raises(KernelCompileError, match=r"forbidden\.cu"):
        HostBackend().function(KernelSource(path), "forbidden")


def test_kernel_names_ignore_comments_and_accept_launch_bounds(tmp_path) -> None:
    path = tmp_path / "names.cu"
    path.write_text(
        '// extern "C" __global__ void commented_out(float* v) {}\n'
        '/* extern "C" __global__ void also_commented(float* v) {} */\n'
        'extern "C" __global__ void first(float* v) {}\n'
        'extern "C" __global__ void __launch_bounds__(256) second(float* v, int n) {}\n'
        "__device__ float helper(float x) { return x; }\n"
    )
    assert KernelSource(path).kernel_names == ("first", "second")


def test_kernel_sources_are_package_data() -> None:
    folder = importlib.resources.files("napari_gpuscope.compute.kernels")
    names = {entry.name for entry in folder.iterdir()}
    assert {"axpby.cu", "host_shim.h"} <= names
    assert "axpby" in (folder / "axpby.cu").read_text()
    # Each method keeps its .cu files beside its torch twins, in its own package.
    tv_folder = importlib.resources.files("napari_gpuscope.compute.tv")
    assert "tv_fgp.cu" in {entry.name for entry in tv_folder.iterdir()}
    found = {p.name for p in KERNEL_FILES}
    assert {"axpby.cu", "tv_fgp.cu"} <= found
