"""GPU kit measurements of eSRRF (``benchmarks/gpu_kit.py bench|exercise|profile --method esrrf``).

- ``bench(device)``: JSON-able measurements at 512 x 512 frames, M 5, R 1.5 (design target
  <= 0.3 ms per frame for AVG, VAR and TAC2, memory flat in T), each in its own try/except so
  one failure loses nothing else, within a time budget (the kit step's limit is 45 s):

  - ``kernels``: CUDA-event GPU time per frame of each fused kernel (gradients, the
    accumulating RGC per statistic, the per-frame maps kernel) in a chunk of 32 frames (and the
    accumulating RGC in chunks of 4: the state's cost per chunk), achieved taps/s, the torch
    twins for comparison, registers and local (spill) bytes per kernel;
  - ``end_to_end``: wall time of ``esrrf.esrrf`` from uint16 and float32 host stacks and a
    float32 CUDA tensor (upload, RGC, accumulation, macro-pixel correction, download), per
    statistic, at 64 and 192 frames: ms per frame at 192 and the per-frame slope between them
    (the job's fixed cost removed);
  - ``overlap``: CUDA events around every chunk's upload (upload stream) and kernels (compute
    stream) of a host-stack job: how much of the upload time runs under other chunks' kernels;
  - ``host_syncs``: ``torch.cuda.set_sync_debug_mode`` warnings per job, frame and chunk, for
    each input kind;
  - ``peak_gib_vs_frames``: peak device memory at 48 and 192 frames.
  - ``drift``: ms per frame of drift estimation (blocks of 48) and correction, and of eSRRF
    with and without ``drift_correction`` (issue 19: drift well under eSRRF's own time).
- ``exercise(device)``: every eSRRF kernel once at a small size, the accumulating one with each
  statistic (fresh and continuing), and a small job through the upload stream (what
  compute-sanitizer memcheck, racecheck and initcheck run).
- ``profile(device)``: each kernel once at 512 x 512, M 5, 8 frames: ``esrrf_half_gradients``,
  ``esrrf_rgc``, ``esrrf_rgc_accumulate`` (AVG, VAR, TAC2): five launches (what Nsight Compute
  profiles).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import kit_common
import numpy as np
import torch
from kit_common import GIB, kill_switch

SIZE = 512
MAGNIFICATION = 5
RADIUS = 1.5
TARGET_MS_PER_FRAME = 0.3
STATISTICS = ("AVG", "VAR", "TAC2")
"""GPU cycles the stream spins before a timed batch of launches (~50 ms), so that the host has
queued them all before the first starts: the events then time the GPU alone."""
BUDGET_S = 36.0
"""Measurements start only while the bench has run less than this (its kit step's limit is
45 s, the process start and kernel compilation included)."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def gpu_ms(run: Callable[[], None], calls: int = 5, repeats: int = 3) -> float:
    """:func:`kit_common.gpu_ms` with eSRRF's batches of 5 (a call is a whole chunk)."""
    return kit_common.gpu_ms(run, calls=calls, repeats=repeats)


def _frames(device: torch.device, batch: int, size: tuple[int, int], seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.poisson(torch.full((batch, *size), 150.0), generator=gen).to(device)


class _Launches:
    """The fused chain of one shape with everything its kernels take, on ``device``."""

    def __init__(
        self, device: torch.device, batch: int, size: tuple[int, int], m: int, centred=False
    ) -> None:
        from napari_gpuscope.compute.esrrf import _kernels
        from napari_gpuscope.compute.esrrf._ops import FrameGeometry

        self.kernels = _kernels
        self.geometry = FrameGeometry.build(*size, m, RADIUS, centred, device)
        self.chain = _kernels.FusedChain(self.geometry, device)
        self.frames = _frames(device, batch, size)
        lattice = (batch, 2 * size[0] + 1, 2 * size[1] + 1, 2)
        self.grad = torch.zeros(lattice, device=device)  # gradients() fills it
        self.device = device

    def gradients(self) -> None:
        self.kernels.half_gradients(
            self.frames, self.grad, self.chain.row_half, self.chain.col_half
        )

    def maps(self, out: torch.Tensor | None = None) -> torch.Tensor:
        c = self.chain
        if out is None:
            shape = (self.frames.shape[0], *self.geometry.output_shape)
            out = torch.empty(shape, device=self.device)
        kwargs = {"geometry": self.geometry, "sensitivity": 1.0, "weighting": True}
        self.kernels.rgc(self.grad, self.frames, c.row_m, c.col_m, c.lut, out, **kwargs)
        return out

    def accumulator(self, statistic: str):
        from napari_gpuscope.compute.esrrf._temporal import TemporalAccumulator

        return TemporalAccumulator(self.geometry.output_shape, statistic, self.device)

    def accumulate(self, acc, continuing: bool | None = None) -> None:
        c = self.chain
        sums, edges, staged_sums, staged_edges = acc.buffers()
        f32 = torch.float32
        state = (sums.view(f32), edges, staged_sums.view(f32), staged_edges)
        self.kernels.rgc_accumulate(
            *(self.grad, self.frames, c.row_m, c.col_m, c.lut, *state),
            geometry=self.geometry,
            sensitivity=1.0,
            weighting=True,
            statistic=acc.mode,
            continuing=acc.continuing if continuing is None else continuing,
        )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _require_kernels(device: torch.device) -> None:
    """Every eSRRF op ran its kernel on ``device`` (on the CPU: the host-emulated one, which
    is how the CPU tests run these functions)."""
    from napari_gpuscope.compute.esrrf import _kernels

    wanted = "kernel" if device.type == "cuda" else "host"
    for op in (_kernels.half_gradients, _kernels.rgc, _kernels.rgc_accumulate):
        path = op.last_paths.get(str(device))
        if path is None or path.path != wanted:
            raise RuntimeError(f"{op.name} did not run its fused kernel on {device}: {path}")


# --------------------------------------------------------------------------------------------
# exercise and profile
# --------------------------------------------------------------------------------------------


def exercise(device: torch.device) -> None:
    """Every eSRRF kernel once at a small size (5 frames: a group of 4 and one more), for both
    geometries; the accumulating kernel with each statistic, starting and continuing; then a
    7-frame uint16 job in chunks of 3 through the upload stream."""
    from napari_gpuscope.compute import esrrf

    for centred in (False, True):
        launches = _Launches(device, 5, (23, 29), 3, centred=centred)
        launches.gradients()
        launches.maps()
        for statistic in STATISTICS:
            acc = launches.accumulator(statistic)
            launches.accumulate(acc)
            acc.staged(5)
            acc.commit()
            launches.accumulate(acc)  # continuing: reads the committed edges
    stack = np.random.default_rng(1).poisson(100, (7, 24, 24)).astype(np.uint16)
    esrrf.esrrf(stack, device=device, magnification=2, temporal="TAC2", frames_per_chunk=3)
    _sync(device)
    _require_kernels(device)


def profile(device: torch.device) -> None:
    """Each kernel once at 512 x 512, M 5, R 1.5, 8 frames (two groups of 4): the inputs are
    made first, then five launches (gradients, maps, accumulate AVG, VAR, TAC2)."""
    launches = _Launches(device, 8, (SIZE, SIZE), MAGNIFICATION)
    accumulators = [launches.accumulator(s) for s in STATISTICS]
    out = torch.empty((8, SIZE * MAGNIFICATION, SIZE * MAGNIFICATION), device=device)
    _sync(device)
    launches.gradients()
    launches.maps(out)
    for acc in accumulators:
        launches.accumulate(acc)
    _sync(device)


# --------------------------------------------------------------------------------------------
# bench
# --------------------------------------------------------------------------------------------


def _kernel_attributes() -> dict:
    """Registers and local memory (spills) per kernel, from the NVRTC build the kit runs."""
    from napari_gpuscope.compute.esrrf import _kernels
    from napari_gpuscope.compute.kernels._backends import _compile_module

    module = _compile_module(_kernels.SOURCE, torch.cuda.current_device())
    out = {}
    for name in _kernels.SOURCE.kernel_names:
        attributes = module.get_function(name).attributes
        out[name] = {k: attributes.get(k) for k in ("num_regs", "local_size_bytes")}
    return out


def _kernel_times(device: torch.device) -> dict:
    """GPU ms per frame of each kernel at 512 x 512, M 5, in chunks of 32 frames."""
    out: dict[str, object] = {}
    batch = 32
    launches = _Launches(device, batch, (SIZE, SIZE), MAGNIFICATION)
    launches.gradients()
    taps = float(launches.geometry.table.counts().mean())
    pixels = (SIZE * MAGNIFICATION) ** 2

    def item(key: str, run: Callable[[], object]) -> None:
        try:
            out[key] = run()
        except Exception as exc:  # one failed measurement must not lose the others
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}

    def maps() -> float:
        out_maps = launches.maps()
        return round(gpu_ms(lambda: launches.maps(out_maps)) / batch, 4)

    item("half_gradients_ms_per_frame", lambda: round(gpu_ms(launches.gradients) / batch, 4))
    item("rgc_maps_ms_per_frame", maps)
    accumulate: dict[str, float] = {}
    for statistic in STATISTICS:
        acc = launches.accumulator(statistic)
        try:
            accumulate[statistic] = round(gpu_ms(lambda a=acc: launches.accumulate(a)) / batch, 4)
        except Exception as exc:
            accumulate[statistic] = f"error: {type(exc).__name__}: {exc}"
    out["rgc_accumulate_ms_per_frame"] = accumulate
    half = out.get("half_gradients_ms_per_frame")
    if isinstance(half, float):
        out["fused_ms_per_frame"] = {
            s: round(half + v, 4) for s, v in accumulate.items() if isinstance(v, float)
        }
        avg = accumulate.get("AVG")
        if isinstance(avg, float):
            out["taps_per_s"] = f"{taps * pixels / (avg * 1e-3):.3e}"

    def small_chunks() -> float:
        small = _Launches(device, 4, (SIZE, SIZE), MAGNIFICATION)
        small.gradients()
        acc = small.accumulator("TAC2")
        return round(gpu_ms(lambda: small.accumulate(acc)) / 4, 4)

    item("rgc_accumulate_TAC2_ms_per_frame_chunk_of_4", small_chunks)

    def twin() -> dict:
        twin_batch = 2
        frames = launches.frames[:twin_batch]
        with kill_switch(True):
            from napari_gpuscope.compute.esrrf._params import EsrrfParams
            from napari_gpuscope.compute.esrrf._pipeline import FramePipeline

            pipeline = FramePipeline(SIZE, SIZE, EsrrfParams(), device, "bench")
            ms = gpu_ms(lambda: pipeline.maps(frames), calls=1, repeats=2)
        return {"ms_per_frame": round(ms / twin_batch, 3), "paths": pipeline.kernel_paths()}

    item("twin_maps", twin)
    item("kernel_attributes", _kernel_attributes)
    return out


def _stack(frames: int) -> np.ndarray:
    """uint16 Poisson frames (mean 150); 64 drawn, the rest shifted copies of them."""
    rng = np.random.default_rng(0)
    base = rng.poisson(150, (64, SIZE, SIZE)).astype(np.uint16)
    parts = [np.roll(base, 3 * k, axis=2) for k in range(-(-frames // 64))]
    return np.ascontiguousarray(np.concatenate(parts)[:frames])


def _timed_s(run: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _sources(device: torch.device, stack: np.ndarray) -> dict[str, Callable[[int], object]]:
    """Each input kind for the first ``n`` frames (made before the clock starts)."""
    as_float = stack.astype(np.float32)
    on_device = torch.from_numpy(as_float).to(device)
    return {
        "uint16": lambda n: stack[:n],
        "float32": lambda n: as_float[:n],
        "cuda": lambda n: on_device[:n],
    }


def _end_to_end(device: torch.device, stack: np.ndarray, sizes=(64, 192)) -> dict:
    from napari_gpuscope.compute import esrrf

    sources = _sources(device, stack)
    esrrf.esrrf(stack[:8], device=device)  # warm: nothing of the first job's setup is timed
    out: dict[str, dict] = {}
    for statistic in STATISTICS:
        for kind, source in sources.items():
            key = f"{statistic}_{kind}"
            try:
                seconds = {}
                for n in sizes:
                    part = source(n)
                    seconds[n] = _timed_s(
                        lambda p=part, s=statistic: esrrf.esrrf(p, device=device, temporal=s)
                    )
                small, large = sizes
                out[key] = {
                    f"ms_per_frame_{large}": round(seconds[large] / large * 1e3, 4),
                    "ms_per_frame_slope": round(
                        (seconds[large] - seconds[small]) / (large - small) * 1e3, 4
                    ),
                    f"ms_job_{small}": round(seconds[small] * 1e3, 2),
                }
            except Exception as exc:  # one failed measurement must not lose the others
                out[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


@contextlib.contextmanager
def _chunk_events(log: list):
    """Record CUDA events around every chunk's upload (on the upload stream) and kernels (on
    the compute stream) of the jobs run inside."""
    from napari_gpuscope.compute.esrrf._pipeline import FramePipeline

    real_upload, real_stage = FramePipeline._to_device, FramePipeline.stage

    def events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def to_device(self, host, check):
        stream = self._copy_stream or torch.cuda.current_stream()
        start, stop = events()
        start.record(stream)
        result = real_upload(self, host, check)
        stop.record(stream)
        log.append(("upload", start, stop))
        return result

    def stage(self, frames, accumulator):
        start, stop = events()
        start.record()
        real_stage(self, frames, accumulator)
        stop.record()
        log.append(("compute", start, stop))

    FramePipeline._to_device, FramePipeline.stage = to_device, stage
    try:
        yield
    finally:
        FramePipeline._to_device, FramePipeline.stage = real_upload, real_stage


def overlap_summary(spans: list[tuple[str, float, float]]) -> dict:
    """From ``(kind, start_ms, stop_ms)`` spans of a job's chunks (kind ``"upload"`` or
    ``"compute"``): total upload and kernel time, the job's span, and how much of the uploads
    after the first (which nothing can precede) ran while some chunk's kernels ran.

    Examples
    --------
    >>> spans = [("upload", 0.0, 2.0), ("compute", 2.0, 6.0)]
    >>> spans += [("upload", 3.0, 5.0), ("compute", 6.0, 9.0)]
    >>> s = overlap_summary(spans)
    >>> s["later_uploads_under_kernels"], s["overlapped_fraction_of_upload"], s["span_ms"]
    (1, 1.0, 9.0)
    """
    uploads = [(a, b) for kind, a, b in spans if kind == "upload"]
    computes = [(a, b) for kind, a, b in spans if kind == "compute"]

    def covered(a: float, b: float) -> float:
        return sum(max(0.0, min(b, d) - max(a, c)) for c, d in computes)

    later = uploads[1:]
    later_ms = sum(b - a for a, b in later)
    return {
        "chunks": len(computes),
        "upload_ms": round(sum(b - a for a, b in uploads), 3),
        "compute_ms": round(sum(b - a for a, b in computes), 3),
        "span_ms": round(max(b for _, _, b in spans) - min(a for _, a, _ in spans), 3),
        "later_uploads_under_kernels": sum(covered(a, b) > 0 for a, b in later),
        "later_uploads": len(later),
        "overlapped_fraction_of_upload": round(
            sum(covered(a, b) for a, b in later) / max(1e-9, later_ms), 3
        ),
    }


def _overlap(device: torch.device, stack: np.ndarray, frames: int = 192) -> dict:
    """Per host input kind: :func:`overlap_summary` of a TAC2 job's chunks (CUDA events)."""
    from napari_gpuscope.compute import esrrf

    out = {}
    for kind, source in _sources(device, stack).items():
        if kind == "cuda":
            continue  # nothing to upload
        try:
            log: list = []
            part = source(frames)
            with _chunk_events(log):
                esrrf.esrrf(part, device=device, temporal="TAC2")
            torch.cuda.synchronize()
            origin = log[0][1]
            spans = [(k, origin.elapsed_time(a), origin.elapsed_time(b)) for k, a, b in log]
            out[kind] = overlap_summary(spans)
        except Exception as exc:  # one failed measurement must not lose the others
            out[kind] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _count_syncs(run: Callable[[], object]) -> int:
    from napari_gpuscope.compute.devices import count_host_syncs

    return count_host_syncs(run)[1]


def _host_syncs(device: torch.device, stack: np.ndarray, frames: int = 192) -> dict:
    from napari_gpuscope.compute import esrrf
    from napari_gpuscope.compute.esrrf._stream import GPU_CHUNK

    out = {}
    chunks = -(-frames // GPU_CHUNK)
    for kind, source in _sources(device, stack).items():
        try:
            part = source(frames)
            count = _count_syncs(lambda p=part: esrrf.esrrf(p, device=device, temporal="VAR"))
            out[kind] = {
                "per_job": count,
                "per_frame": round(count / frames, 4),
                "per_chunk": round(count / chunks, 3),
            }
        except Exception as exc:  # one failed measurement must not lose the others
            out[kind] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _peaks(device: torch.device, stack: np.ndarray) -> dict:
    from napari_gpuscope.compute import esrrf

    peaks = {}
    for n in (48, 192):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        esrrf.esrrf(stack[:n], device=device, temporal="TAC2")
        peaks[str(n)] = round((torch.cuda.max_memory_allocated(device) - base) / GIB, 4)
    return peaks


def _drift_times(device: torch.device, stack: np.ndarray) -> dict:
    """ms per frame of drift estimation (blocks of 48) and correction on the stack, and of
    eSRRF with and without drift correction (issue 19: both well under eSRRF's own time)."""
    from napari_gpuscope.compute import esrrf

    blocks = 48
    esrrf.estimate_drift(stack[: 2 * blocks], time_averaging=blocks, device=device)  # warm-up
    n = len(stack)
    out: dict[str, object] = {"frames": n, "time_averaging": blocks}
    drift = None

    def estimate() -> None:
        nonlocal drift
        drift = esrrf.estimate_drift(stack, time_averaging=blocks, device=device)

    out["estimate_ms_per_frame"] = round(1e3 * _timed_s(estimate) / n, 4)
    out["correct_ms_per_frame"] = round(
        1e3 * _timed_s(lambda: esrrf.correct_drift(stack, drift.shifts, device=device)) / n, 4
    )
    plain = _timed_s(lambda: esrrf.esrrf(stack, device=device))
    corrected = _timed_s(
        lambda: esrrf.esrrf(
            stack, drift_correction=True, drift_time_averaging=blocks, device=device
        )
    )
    out["esrrf_ms_per_frame"] = round(1e3 * plain / n, 4)
    out["esrrf_with_drift_ms_per_frame"] = round(1e3 * corrected / n, 4)
    return out


def bench(device: torch.device) -> dict:
    """eSRRF at 512 x 512, M 5, R 1.5 (see the module docstring); target <= 0.3 ms per frame."""
    started = time.perf_counter()
    result: dict[str, object] = {
        "setting": f"{SIZE} x {SIZE} frames, M {MAGNIFICATION}, R {RADIUS}, S 1, weighting, "
        "nanopyx geometry, default chunks",
        "target_ms_per_frame": TARGET_MS_PER_FRAME,
    }
    seconds: dict[str, float] = {}
    data: dict[str, np.ndarray] = {}

    def stack() -> np.ndarray:
        if "stack" not in data:
            data["stack"] = _stack(192)
        return data["stack"]

    def measure(key: str, step: Callable[[], object]) -> None:
        if time.perf_counter() - started > BUDGET_S:
            result[key] = {"skipped": f"the bench's {BUDGET_S:.0f} s budget was spent"}
            return
        start = time.perf_counter()
        try:
            result[key] = step()
        except Exception as exc:  # one failed measurement must not lose the others
            result[key] = {"error": f"{type(exc).__name__}: {exc}"}
        seconds[key] = round(time.perf_counter() - start, 1)

    measure("kernels", lambda: _kernel_times(device))
    measure("end_to_end", lambda: _end_to_end(device, stack()))
    measure("overlap", lambda: _overlap(device, stack()))
    measure("host_syncs", lambda: _host_syncs(device, stack()))
    measure("peak_gib_vs_frames", lambda: _peaks(device, stack()))
    measure("drift", lambda: _drift_times(device, stack()))
    result["seconds"] = seconds
    return result
