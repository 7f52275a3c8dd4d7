"""eSRRF defects found by review (issue 16, part 1): a slightly negative RGC at non-integer
sensitivity, the upload stream of device-resident input, and out-of-memory retries that must
not count frames twice. Each test failed before its fix."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf import EsrrfParams, _kernels
from napari_gpuscope.compute.esrrf._ops import FrameGeometry, normalise
from napari_gpuscope.compute.esrrf._temporal import TemporalAccumulator, macro_pixel_correct
from napari_gpuscope.compute.kernels import (
    HostBackend,
    host_emulation_available,
    registered_ops,
)

F32 = np.float32


# -- 1.3: powf of a slightly negative RGC -------------------------------------------------------
def _unit_direction(dx: float, dy: float) -> tuple[np.float32, np.float32]:
    """The tap's unit vector as the kernels' table and the twin hold it."""
    d = math.sqrt(dx * dx + dy * dy)
    return F32(dx / d), F32(dy / d)


def _negative_terms(nx: np.ndarray, ny: np.ndarray, dx: float, dy: float) -> np.ndarray:
    """Where ``1 - |n x u|`` of a converging unit gradient ``n`` rounds below 0 in float32
    (IEEE float32 without fused multiply-add: what g++ and torch on the CPU do)."""
    ux, uy = _unit_direction(dx, dy)
    converging = nx * ux + ny * uy < 0
    return converging & (F32(1) - np.abs(ny * ux - nx * uy) < 0)


def _gradient_with_negative_term(dx: float, dy: float) -> tuple[float, float]:
    """A unit gradient (as ``normalise`` makes it) a hair more than perpendicular to the tap
    direction ``(dx, dy)``, so that it converges, whose term rounds below zero (found by
    search; ~3 % of these candidates qualify)."""
    rng = np.random.default_rng(0)
    angle = math.atan2(dy, dx) + math.pi / 2 + rng.uniform(1e-7, 1e-4, 4096)
    scale = rng.uniform(1, 100, 4096)
    raw_x = torch.from_numpy((scale * np.cos(angle)).astype(F32))
    raw_y = torch.from_numpy((scale * np.sin(angle)).astype(F32))
    nx, ny = (v.numpy() for v in normalise(raw_x, raw_y))
    found = np.flatnonzero(_negative_terms(nx, ny, dx, dy))
    assert found.size, "no candidate gradient rounds to a negative term"
    return float(nx[found[0]]), float(ny[found[0]])


def _one_negative_pixel():
    """Half-lattice unit gradients that are zero except one sample, read by output pixel
    (15, 15) (M 3, R 1, phase (0, 0)) through a single tap, so that pixel's RGC is
    ``w term / den`` with ``term`` slightly negative. Returns the geometry, the rgc op's inputs
    (without the output) and the pixel."""
    g = FrameGeometry.build(12, 12, 3, 1.0, False, torch.device("cpu"))
    q = 5
    taps = g.table.phase_taps(0, 0)
    row_off, col_off, dx, dy, _w = next(t for t in taps if t[:2] == (-1, 1))
    grad = torch.zeros((1, 25, 25, 2))
    grad[0, 2 * q + row_off, 2 * q + col_off] = torch.tensor(_gradient_with_negative_term(dx, dy))
    frames = torch.full((1, 12, 12), 100.0)
    chain = _kernels.FusedChain(g, torch.device("cpu"))
    args = (grad, frames, chain.row_m, chain.col_m, chain.lut)
    return g, args, (3 * q, 3 * q)


def _check_no_nan(out: torch.Tensor, pixel: tuple[int, int]) -> None:
    assert not bool(out.isnan().any()), f"NaN at {torch.nonzero(out.isnan())[:3].tolist()}"
    assert float(out[0][pixel]) == 0.0  # clamped at 0 before the power
    corrected = macro_pixel_correct(out[0], 3)
    assert not bool(corrected.isnan().any())


@pytest.mark.parametrize("weighting", [False, True])
def test_slightly_negative_rgc_gives_no_nan_in_the_twin(weighting):
    g, args, pixel = _one_negative_pixel()
    out = torch.empty((1, 36, 36))
    _kernels._rgc_twin(*args, out, geometry=g, sensitivity=1.5, weighting=weighting)
    _check_no_nan(out, pixel)


@pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")
@pytest.mark.parametrize("weighting", [False, True])
def test_slightly_negative_rgc_gives_no_nan_in_the_kernels(weighting):
    """Both RGC kernels: the per-frame maps and the one folding them into the sums (whose
    edges hold the frame's value; its sums would carry the NaN into every statistic)."""
    g, args, pixel = _one_negative_pixel()
    kwargs = {"geometry": g, "sensitivity": 1.5, "weighting": weighting}
    out = torch.full((1, 36, 36), np.nan)
    _kernels.rgc.run_on(HostBackend(), *args, out, **kwargs)
    _check_no_nan(out, pixel)
    for statistic in ("AVG", "VAR", "TAC2"):
        acc = TemporalAccumulator((36, 36), statistic, torch.device("cpu"))
        sums, edges, staged_sums, staged_edges = acc.buffers()
        _kernels.rgc_accumulate.run_on(
            HostBackend(),
            *args,
            sums.view(torch.float32),
            edges,
            staged_sums.view(torch.float32),
            staged_edges,
            statistic=statistic,
            continuing=False,
            **kwargs,
        )
        acc.staged(1)
        acc.commit()
        _check_no_nan(acc.plane("last")[None], pixel)
        assert not bool(acc.sums.isnan().any())


# -- 1.1: the upload stream and device-resident input ---------------------------------------------
class _Stream:
    """Stands for a CUDA stream: records waits in the shared log."""

    def __init__(self, name: str, log: list) -> None:
        self.name = name
        self.log = log

    def wait_stream(self, other: _Stream) -> None:
        self.log.append(("wait", self.name, other.name))


@pytest.fixture
def streams(monkeypatch):
    """A compute stream (torch's current one) and the pipeline's upload stream, as recorders:
    every read of the input (``to_device``) is logged with the stream current at that moment."""
    from napari_gpuscope.compute.esrrf import _pipeline

    log: list = []
    compute, side = _Stream("compute", log), _Stream("side", log)
    current = [compute]

    class _Use:
        def __init__(self, stream: _Stream) -> None:
            self.stream = stream

        def __enter__(self) -> None:
            self.previous, current[0] = current[0], self.stream

        def __exit__(self, *exc: object) -> None:
            current[0] = self.previous

    def read(data, device, **kwargs):
        log.append(("read", current[0].name))
        return torch.zeros(tuple(data.shape), dtype=torch.float32)

    real_aminmax = torch.aminmax

    def aminmax(tensor):  # the range and finite check of float frames
        log.append(("check", current[0].name))
        return real_aminmax(tensor)

    monkeypatch.setattr(torch, "aminmax", aminmax)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[0])
    monkeypatch.setattr(torch.cuda, "stream", _Use)
    monkeypatch.setattr(_pipeline, "to_device", read)
    monkeypatch.setattr(
        torch.Tensor, "record_stream", lambda self, s: log.append(("record", s.name))
    )
    pipeline = _pipeline.FramePipeline(
        16, 16, _pipeline.EsrrfParams(), torch.device("cpu"), "stack"
    )
    pipeline._copy_stream = side  # as on a GPU
    return pipeline, log


def test_device_resident_input_is_read_after_the_stream_that_wrote_it(streams):
    """A CUDA tensor is ready on torch's current stream (where its producer queued the
    writes): it must be read there, or on a stream that waited for it first. (A meta tensor
    stands for the CUDA tensor: anything not in host memory.)"""
    pipeline, log = streams
    pipeline.upload(torch.empty((3, 16, 16), device="meta"), 0)
    read = log.index(next(entry for entry in log if entry[0] == "read"))
    stream = log[read][1]
    assert stream == "compute" or ("wait", stream, "compute") in log[:read], log


def test_host_input_is_uploaded_on_the_side_stream_and_awaited(streams):
    """Host frames keep the overlap: copied on the upload stream, which compute then waits for,
    and their memory is not reused before compute is done with it. Float frames are checked
    for NaN there too, so the host's read of the answer waits for the upload only, not for the
    previous chunk's kernels on the compute stream (the check also bounds their range)."""
    pipeline, log = streams
    pipeline.upload(np.zeros((3, 16, 16), np.uint16), 0)
    assert log == [("read", "side"), ("wait", "compute", "side"), ("record", "compute")]
    log.clear()
    pipeline.upload(np.zeros((3, 16, 16), np.float32), 0)
    expected = [("read", "side"), ("check", "side"), ("wait", "compute", "side")]
    assert log == [*expected, ("record", "compute")]


# -- 1.2: an out-of-memory retry must not count frames twice ---------------------------------
class _Injector(TorchDispatchMode):
    """Counts the torch operations (and emulated kernel launches) of every frame chunk and
    raises a simulated out-of-memory error at operation number ``fail_at`` (once).

    It also records every operation that turns a float32 block of at least two frames into
    float64 (a float64 copy of a whole chunk is outside the memory plan), where each chunk
    starts and ends in the count, and which operations belong to the per-frame maps of the
    torch twins (hundreds of them, none touching the sums)."""

    current: _Injector | None = None

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.active = False
        self.points = 0
        self.chunks: list[tuple[int, int]] = []
        self.maps: list[tuple[int, int]] = []
        self.wide_copies: list[str] = []

    def __enter__(self):
        _Injector.current = self
        return super().__enter__()

    def __exit__(self, *exc):
        _Injector.current = None
        return super().__exit__(*exc)

    def point(self) -> None:
        if not self.active:
            return
        self.points += 1
        if self.points - 1 == self.fail_at:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.point()
        out = func(*args, **kwargs)
        if self.active:
            blocks = [
                a for a in args if isinstance(a, torch.Tensor) and a.dim() == 3 and a.shape[0] >= 2
            ]
            widened = kwargs.get("dtype") == torch.float64 or (
                isinstance(out, torch.Tensor) and out.dtype == torch.float64
            )
            if widened and any(b.dtype == torch.float32 for b in blocks):
                self.wide_copies.append(str(func))
        return out


@pytest.fixture
def counting_chunks(monkeypatch):
    """Make the active :class:`_Injector` count inside every frame chunk's work (from the
    chunk's start to its progress update), and at every emulated kernel launch."""
    from napari_gpuscope.compute import memory
    from napari_gpuscope.compute.esrrf import _pipeline, _stream
    from napari_gpuscope.compute.kernels import HostBackend as Host

    real_run, real_launch = _stream.run_in_chunks, Host.launch
    real_maps = _pipeline.FramePipeline.maps

    def maps(self, frames):
        injector = _Injector.current
        start = injector.points
        try:
            return real_maps(self, frames)
        finally:
            injector.maps.append((start, injector.points))

    def counted(job):
        injector = _Injector.current
        start = injector.points
        injector.active = True
        try:
            update = next(job)
        except StopIteration as done:
            return done.value
        finally:
            injector.active = False
            injector.chunks.append((start, injector.points))
        while True:
            command = yield update
            try:
                update = job.send(command)
            except StopIteration as done:
                return done.value

    def run_in_chunks(n, chunk, process, **kwargs):
        return real_run(n, chunk, lambda a, b: counted(process(a, b)), **kwargs)

    def launch(self, function, n_threads, args):
        if _Injector.current is not None:
            _Injector.current.point()
        return real_launch(self, function, n_threads, args)

    monkeypatch.setattr(_stream, "run_in_chunks", run_in_chunks)
    monkeypatch.setattr(Host, "launch", launch)
    monkeypatch.setattr(_pipeline.FramePipeline, "maps", maps)
    # A retry frees the device caches, on the CPU a gc.collect() (0.3 s in a test process):
    # nothing this test checks.
    monkeypatch.setattr(memory, "free_cached", lambda device: None)


def _run(stack: np.ndarray, temporal: str, injector: _Injector):
    from napari_gpuscope.compute import esrrf
    from napari_gpuscope.compute.jobs import run_job

    with injector:
        return run_job(
            esrrf.iter_esrrf(
                stack,
                device="cpu",
                magnification=2,
                radius=1.0,
                sensitivity=1.5,
                temporal=temporal,
                frames_per_chunk=2,
                frames_per_timepoint=4,
            )
        )


@pytest.mark.parametrize(
    ("temporal", "host_kernels"),
    [("AVG", True), ("VAR", True), ("TAC2", True), ("TAC2", False)],
    ids=["AVG-host-kernels", "VAR-host-kernels", "TAC2-host-kernels", "TAC2-twins"],
)
def test_out_of_memory_anywhere_in_a_chunk_gives_the_same_result(
    monkeypatch, counting_chunks, temporal, host_kernels
):
    """An out-of-memory error at every operation of every chunk (upload, gradients, RGC,
    temporal sums, widefield sum) of two time points: the retried run equals the undisturbed
    one exactly, image and widefield mean, and the frames are counted once. (Of the hundreds
    of operations of the twins' per-frame maps, which touch no sum, the first and last 5 of
    each chunk; through the twins TAC2 only, the statistic with the most state: ~10 s.)"""
    from napari_gpuscope.compute.kernels import HOST_KERNELS_ENV

    if host_kernels:
        if not host_emulation_available():
            pytest.skip("g++ not available")
        monkeypatch.setenv(HOST_KERNELS_ENV, "1")
        for op in registered_ops():  # self-tests now, not inside the first counted chunk
            if op.name.startswith("esrrf"):
                assert op.prepare("cpu")
    stack = np.random.default_rng(7).poisson(200, (7, 10, 11)).astype(np.uint16)
    clean = _Injector()
    reference = _run(stack, temporal, clean)
    assert clean.wide_copies == [], clean.wide_copies
    assert reference.frames_analysed == 7 and len(clean.chunks) == 4
    every = {k for start, stop in clean.chunks for k in range(start, stop)}
    for start, stop in clean.maps:
        every -= set(range(start + 5, stop - 5))
    for k in sorted(every):
        injected = _Injector(fail_at=k)
        result = _run(stack, temporal, injected)
        assert injected.points > clean.points, f"no out-of-memory at operation {k}"
        assert result.frames_analysed == 7 and result.time_points == reference.time_points
        np.testing.assert_array_equal(result.image, reference.image, err_msg=f"at {k}")
        np.testing.assert_array_equal(result.widefield, reference.widefield, err_msg=f"at {k}")


# -- issue 17, item 9: huge finite intensities never turn into silent NaN ---------------------
@pytest.mark.parametrize(
    ("scale", "temporal", "dtype"),
    [(1e20, "VAR", np.float32), (1e20, "TAC2", np.float32), (3e38, "AVG", np.float32)],
)
def test_intensities_beyond_the_float32_safe_range_are_refused_with_the_range(
    scale, temporal, dtype
):
    from napari_gpuscope.compute.esrrf._pipeline import MAX_INTENSITY
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    stack, _ = blinking_filaments_stack(12, (32, 32))
    huge = (stack / stack.max()).astype(dtype) * dtype(scale)
    assert np.isfinite(huge).all() and np.abs(huge).max() > MAX_INTENSITY
    with pytest.raises(InvalidInputError, match=r"accepts intensities up to 1e\+18"):
        esrrf.esrrf(huge, params=EsrrfParams(magnification=2, temporal=temporal), device="cpu")


def test_float64_beyond_float32_is_named_as_such_not_as_nan():
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    stack, _ = blinking_filaments_stack(12, (32, 32))
    huge = stack.astype(np.float64) / stack.max() * 1e300
    assert np.isfinite(huge).all()
    with pytest.raises(InvalidInputError, match="beyond float32's range"):
        esrrf.esrrf(huge, params=EsrrfParams(magnification=2), device="cpu")


@pytest.mark.parametrize("temporal", ["AVG", "VAR", "TAC2"])
def test_the_largest_accepted_intensities_give_the_result_of_unit_scale(temporal):
    """The result does not depend on the intensity scale (RGC is normalised and the output is
    scaled by the widefield), so the stack scaled to the accepted maximum must equal the
    stack at unit scale to float32 rounding: finite, and no precision lost."""
    from napari_gpuscope.compute.esrrf._pipeline import MAX_INTENSITY
    from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack

    stack, _ = blinking_filaments_stack(12, (32, 32))
    unit = (stack / stack.max()).astype(np.float32)
    params = EsrrfParams(magnification=2, temporal=temporal)
    reference = esrrf.esrrf(unit, params=params, device="cpu")
    top = esrrf.esrrf(unit * np.float32(MAX_INTENSITY), params=params, device="cpu")
    assert np.isfinite(top).all()
    scale = np.abs(reference).max()
    np.testing.assert_allclose(top, reference, atol=1e-5 * scale, rtol=1e-4)
