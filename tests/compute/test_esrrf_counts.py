"""What the fused eSRRF path costs, counted on the CPU through the host-emulated kernels
(issue 16, part 2): kernel launches per chunk, no per-frame maps, the bytes of temporal state
each launch moves, and host reads of device values per chunk. Times are the GPU kit's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.esrrf import _kernels
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.kernels import HOST_KERNELS_ENV, host_emulation_available

pytestmark = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")

FRAMES, HEIGHT, WIDTH, M = 12, 10, 14, 3
OUT = (HEIGHT * M, WIDTH * M)
OPS = (_kernels.half_gradients, _kernels.rgc, _kernels.rgc_accumulate)


class _Recorder(TorchDispatchMode):
    """Every tensor an operation returns, and every read of a tensor's value by the host
    (``bool(t)``, ``t.item()``, ``nonzero``: each a device synchronisation on a GPU)."""

    HOST_READS = ("aten._local_scalar_dense", "aten.nonzero", "aten.is_nonzero", "aten.equal")

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []
        self.host_reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func).startswith(self.HOST_READS):
            self.host_reads.append(str(func))
        for tensor in out if isinstance(out, tuple | list) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.shapes.append(tuple(tensor.shape))
        return out


@pytest.fixture
def host_kernels(monkeypatch):
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    for op in OPS:
        assert op.prepare("cpu")  # self-tests now, not inside the counted runs


def _run(stack, temporal="TAC2", chunk=4):
    job = esrrf.iter_esrrf(
        stack, device="cpu", magnification=M, radius=1.5, temporal=temporal, frames_per_chunk=chunk
    )
    return run_job(job)


def _stack(dtype=np.uint16):
    return np.random.default_rng(3).poisson(300, (FRAMES, HEIGHT, WIDTH)).astype(dtype)


@pytest.mark.parametrize("chunk", [2, 4, 6])
@pytest.mark.parametrize("temporal", ["AVG", "VAR", "TAC2"])
def test_two_launches_per_chunk_whatever_its_frames(host_kernels, temporal, chunk):
    """Gradients and the accumulating RGC, once each per chunk; the per-frame maps kernel never
    runs in a job (and no temporal work is left to torch: see the next test)."""
    before = {op.name: op.calls["host"] for op in OPS}
    result = _run(_stack(), temporal, chunk)
    launched = {op.name: op.calls["host"] - before[op.name] for op in OPS}
    chunks = -(-FRAMES // chunk)
    assert result.chunks == chunks
    assert launched == {
        "esrrf_half_gradients": chunks,
        "esrrf_rgc": 0,
        "esrrf_rgc_accumulate": chunks,
    }
    assert _kernels.FusedChain.LAUNCHES_PER_CHUNK == 2
    assert set(result.kernel_paths) == {"esrrf_half_gradients", "esrrf_rgc_accumulate"}


@pytest.mark.parametrize("temporal", ["AVG", "TAC2"])
def test_no_per_frame_maps_are_ever_allocated(host_kernels, temporal):
    """No tensor of one plane per frame of the output, ``(B, H M, W M)``, nor any float64 one
    with a frame axis, exists in a fused run; the largest per-chunk tensor is the gradient
    lattice, as the memory plan says."""
    with _Recorder() as recorder:
        _run(_stack(), temporal, chunk=4)
    per_frame_output = [s for s in recorder.shapes if len(s) == 3 and s[1:] == OUT and s[0] > 2]
    assert per_frame_output == []
    lattice = (4, 2 * HEIGHT + 1, 2 * WIDTH + 1, 2)
    assert lattice in recorder.shapes
    big = max(int(np.prod(s)) for s in recorder.shapes if s and s[0] == 4)
    assert big == int(np.prod(lattice))


def test_each_launch_moves_the_temporal_state_once(host_kernels, monkeypatch):
    """Bytes of temporal state per output pixel per launch, from the tensors handed to the
    kernel: float64 sums (1 plane for AVG, 2 for VAR and TAC2) and float32 first/last values,
    read once and written once, whatever the chunk's frames -- so per frame they fall with the
    chunk (2 B at AVG and 16 frames, where folding per-frame maps with torch moved 36-68 B per
    pixel per frame). No launch argument is a per-frame output."""
    seen: list[list[torch.Tensor]] = []
    real = _kernels.rgc_accumulate.launch

    def launch(backend, *args, **kwargs):
        seen.append([a for a in args if isinstance(a, torch.Tensor)])
        return real(backend, *args, **kwargs)

    monkeypatch.setattr(_kernels.rgc_accumulate, "launch", launch)
    planes = {"AVG": 1, "VAR": 2, "TAC2": 2}
    pixels = OUT[0] * OUT[1]
    for temporal, chunk in (("AVG", 6), ("VAR", 4), ("TAC2", 12)):
        seen.clear()
        _run(_stack(), temporal, chunk)
        assert len(seen) == -(-FRAMES // chunk)
        for tensors in seen:
            state = [t for t in tensors if t.numel() % pixels == 0 and t.shape[-2] == OUT[0]]
            moved = sum(t.numel() * t.element_size() for t in state) // pixels
            model = 2 * (8 * planes[temporal] + 4 * 2)
            assert moved == model == _kernels.accumulator_bytes(temporal)
            assert all(t.shape[0] <= 2 for t in state)  # state planes, never one per frame
    assert _kernels.accumulator_bytes("AVG") / 16 == 2.0


@pytest.mark.parametrize(("dtype", "reads_per_chunk"), [(np.uint16, 0), (np.float32, 1)])
def test_host_reads_per_chunk(host_kernels, monkeypatch, dtype, reads_per_chunk):
    """Inside a chunk the host reads no device value for integer frames (nothing to check)
    and one for float frames (whether any is NaN or infinite): on a GPU one synchronisation
    per chunk at most. Counted for 3 and 6 chunks of the same stack: the difference is the
    per-chunk count, whatever the job does once."""
    counts = {}
    for chunk in (4, 2):
        with _Recorder() as recorder:
            result = _run(_stack(dtype), "VAR", chunk)
        counts[result.chunks] = len(recorder.host_reads)
    assert set(counts) == {3, 6}
    assert (counts[6] - counts[3]) == 3 * reads_per_chunk, counts
