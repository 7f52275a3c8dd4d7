"""Interactive latency: a parameter changed in a dock -> the layer updated (issue 29 item 3).

What a user feels while tuning, per method, without Qt: the dock's own preview or run job (the
functions the docks call: :func:`napari_gpuscope.compute.tv.preview_job`,
:func:`napari_gpuscope.compute.phase.preview_job`, the registry's eSRRF run and flat-field apply
jobs), then the new plane assigned to an image layer of napari's Qt-free ``ViewerModel``
(``layer.data = plane``: napari's own slicing and contrast bookkeeping). The clock starts when
the parameter changes and stops when the layer holds the new data. Not counted: the Qt event
loop's hop to the main thread and the OpenGL redraw (a few ms, the same for every method;
napari draws the next frame after the assignment).

- **TV**: the strength slider moved, the displayed 2048² plane denoised with the preview's
  budget (the noise level of the whole image estimated once, before the clock, as the dock's
  preview keeps it).
- **phase**: the regularization moved, the whole 2048² field re-solved from the kept normal
  equations (built once before the clock, as the dock's preview keeps them).
- **eSRRF**: Run pressed, the clock stopped at the first updated layer (the first streamed
  time point of a 512² stack).
- **flat-field**: a saved profile applied to one 2048² frame (what a new frame or a moved
  frame slider costs).

Goals (issue 29, on a GPU): TV preview ≤ 50 ms, phase re-solve ≤ 20 ms, first eSRRF update
≤ 100 ms, profile application ≤ 30 ms. On a CPU the rows measure the reference path; compare
them with each other, not with the goals. Without napari installed (the GPU machine has no Qt
and may lack napari) the layer is a plain holder and the table says so.

Usage::

    python benchmarks/interactive_latency.py                  # first GPU, the goals' sizes
    python benchmarks/interactive_latency.py --device cpu --size 512 --repeats 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_benchmark import blinking_frames, flat_profile, phase_params

from napari_gpuscope.compute.devices import device_label, resolve_device
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.preview import PlaneView

GOALS_MS = {
    "TV preview": 50.0,
    "phase re-solve": 20.0,
    "eSRRF first update": 100.0,
    "flat-field apply": 30.0,
}


class _Holder:
    """A layer stand-in where napari is not installed: keeps the data, nothing else."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data


def viewer_and_layer(data: np.ndarray) -> tuple[object, object, str]:
    """napari's Qt-free viewer model with ``data`` as an image layer, and a result layer."""
    try:
        from napari.components import ViewerModel
    except ImportError:
        return None, _Holder(np.zeros(data.shape[-2:], np.float32)), "no napari: plain holder"
    viewer = ViewerModel()
    viewer.add_image(data, name="input")
    result = viewer.add_image(np.zeros(data.shape[-2:], np.float32), name="result")
    return viewer, result, "napari ViewerModel"


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed(step: Callable[[int], None], repeats: int, device: str) -> list[float]:
    """Milliseconds of ``step(i)`` per repeat (one untimed warm-up first)."""
    step(-1)
    synchronise(device)
    out = []
    for i in range(repeats):
        start = time.perf_counter()
        step(i)
        synchronise(device)
        out.append(1000 * (time.perf_counter() - start))
    return out


def tv_case(device: str, size: int, repeats: int) -> tuple[list[float], str]:
    from napari_gpuscope.compute import tv

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:size, :size]
    clean = 100 + 50 * np.sin(xx / 17.0) * np.cos(yy / 23.0)
    data = (clean + rng.normal(0, 10, (size, size))).astype(np.float32)
    viewer, layer, kind = viewer_and_layer(data)
    view = PlaneView.of(viewer, viewer.layers["input"]) if viewer else _plane(size)
    weights = tv.WholeImageWeights()

    def step(i: int) -> None:
        params = tv.TVParams(strength=1.0 + 0.1 * (i + 1))
        preview = run_job(tv.preview_job(weights, data, params, device, view))
        layer.data = np.asarray(next(iter(preview.planes.values())))

    return timed(step, repeats, device), kind


def phase_case(device: str, size: int, repeats: int) -> tuple[list[float], str]:
    from napari_gpuscope.compute import phase

    slices = 21
    params = phase_params()
    yy, xx = np.mgrid[:size, :size] - size / 2
    truth = (0.5 * (yy**2 + xx**2 < (size / 6) ** 2)).astype(np.float32)
    stack = np.asarray(phase.simulate_stack(truth, 0 * truth, params, slices))
    viewer, layer, kind = viewer_and_layer(stack)
    view = PlaneView.of(viewer, viewer.layers["input"]) if viewer else _plane(size, slices)
    solvers = phase.PhaseSolvers()
    run_job(phase.preview_job(solvers, stack, params, device, view, None))  # builds, untimed

    def step(i: int) -> None:
        moved = params.replace(regularization=1e-3 * (1.5 ** (i + 2)))
        preview = run_job(phase.preview_job(solvers, stack, moved, device, view, None))
        layer.data = np.asarray(preview.planes["phase"])

    return timed(step, repeats, device), kind


def esrrf_case(device: str, size: int, repeats: int) -> tuple[list[float], str]:
    from napari_gpuscope.compute.esrrf import EsrrfParams, iter_esrrf

    stack = blinking_frames(100, size)
    _viewer, layer, kind = viewer_and_layer(stack)
    params = EsrrfParams(magnification=4, frames_per_timepoint=20)

    def step(i: int) -> None:
        job = iter_esrrf(stack, params=params, device=device, name="benchmark")
        try:
            for update in job:
                output = next(iter(update.outputs.values()), None)
                if output is not None:
                    plane = np.asarray(output.array())
                    layer.data = plane.reshape(plane.shape[-2:]) if plane.ndim > 2 else plane
                    return
        finally:
            job.close()
        raise RuntimeError("the eSRRF run streamed no output")

    return timed(step, repeats, device), kind


def flatfield_case(device: str, size: int, repeats: int) -> tuple[list[float], str]:
    from napari_gpuscope.compute.flatfield import BasicParams, apply_profile

    frame = blinking_frames(1, size)
    _viewer, layer, kind = viewer_and_layer(frame)
    profile = flat_profile(size)
    params = BasicParams(output_dtype="uint16", clip_negative=True)

    def step(i: int) -> None:
        corrected = apply_profile(
            frame, profile, params=params, measure_shading=False, device=device
        )
        layer.data = np.asarray(corrected.image)[0]

    return timed(step, repeats, device), kind


def _plane(size: int, slices: int | None = None) -> PlaneView:
    """The y-x view of the last plane when there is no viewer model."""
    shape = (size, size) if slices is None else (slices, size, size)
    return PlaneView(shape=shape, axes=(len(shape) - 2, len(shape) - 1), index=(0,) * len(shape))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--size", type=int, default=2048, help="TV, phase, flat-field side")
    parser.add_argument("--esrrf-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    args = parser.parse_args()
    device = str(resolve_device(args.device))
    print(
        f"device: {device_label(device)}; host: {platform.processor() or platform.machine()}; "
        f"torch {torch.__version__}"
    )
    rows = [
        ("TV preview", lambda: tv_case(device, args.size, args.repeats), args.size),
        ("phase re-solve", lambda: phase_case(device, args.size, args.repeats), args.size),
        (
            "eSRRF first update",
            lambda: esrrf_case(device, args.esrrf_size, args.repeats),
            args.esrrf_size,
        ),
        ("flat-field apply", lambda: flatfield_case(device, args.size, args.repeats), args.size),
    ]
    print("| what | size | median ms | max ms | goal (GPU) | layer |")
    print("|---|---|---|---|---|---|")
    for name, run, size in rows:
        if args.only and not any(word.lower() in name.lower() for word in args.only):
            continue
        times, kind = run()
        print(
            f"| {name} | {size}² | {statistics.median(times):.1f} | {max(times):.1f} | "
            f"≤ {GOALS_MS[name]:.0f} ms | {kind} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
