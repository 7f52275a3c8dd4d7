"""Total-variation (ROF) denoising on the GPU.

Solves ``min_u 1/2 ||u - f||^2 + weight * TV(u)`` with isotropic TV built from per-axis weighted
forward differences, for 2D, 3D, time-lapse and 4D images with an optional channel axis:

- ``method="fgp"`` (default): fast gradient projection on the dual (Beck & Teboulle 2009), with
  fused CUDA kernels, an optional non-negativity constraint and a real convergence test (the
  relative duality gap).
- ``method="chambolle"``: Chambolle's projection exactly as
  :func:`skimage.restoration.denoise_tv_chambolle` (same step, stopping rule and output), for users
  who must reproduce scikit-image results.

Independent problems (channels, and axes whose spacing weight is 0 such as a frame-by-frame time
axis) are solved together as one batch. Volumes larger than device memory are processed in chunks
with overlapping halos. :func:`iter_denoise` is the progress-reporting job behind
:func:`denoise`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import _tv_solvers as solvers
from .arrays import InvalidInputError, check_finite, to_device, to_host, validate_image
from .devices import device_context
from .jobs import Job, PreviewThrottle, Progress, mapped, run_job, scaled
from .memory import DeviceMemoryError, plan_chunk, run_in_chunks
from .noise import PoissonGaussian, anscombe_forward, anscombe_inverse, estimate_poisson_gaussian

__all__ = ["METHODS", "NOISE_MODELS", "TVResult", "denoise", "iter_denoise", "spacing_from_scale"]

METHODS = ("fgp", "chambolle")
NOISE_MODELS = ("gaussian", "poisson")
# Halo (in planes, for a unit weight) around each chunk of a chunked volume. TV couples voxels
# globally, but the influence of a chunk border decays within a few planes; 16 keeps chunked
# results within the solver tolerance of the unchunked solution (tested).
HALO_PLANES = 16


@dataclass(frozen=True)
class TVResult:
    """Denoised image and the facts needed to trust and reproduce it.

    Attributes
    ----------
    image : numpy.ndarray
        float32, same shape as the input, in the input's intensity units.
    iterations : int
        Iterations run (the largest over chunks and independent problems).
    relative_gap : float
        Relative duality gap ``(P(u) - D(y)) / P(u)`` of the result (the largest over chunks and
        independent problems; in Anscombe units for ``noise_model="poisson"``). 0 when nothing
        had to be solved.
    converged : bool
        FGP: every problem reached ``relative_gap <= tolerance``. Chambolle: scikit-image's
        stopping rule fired before ``max_iterations``.
    weight : float
        TV weight used (image units; Anscombe units for ``noise_model="poisson"``).
    method, noise_model : str
        As requested.
    spacing : tuple of float
        Difference weight of every non-channel axis.
    chunks : int
        Number of device chunks processed (1 when everything fit at once).
    poisson : PoissonGaussian or None
        Camera parameters used in Poisson mode.
    """

    image: np.ndarray
    iterations: int
    relative_gap: float
    converged: bool
    weight: float
    method: str
    noise_model: str
    spacing: tuple[float, ...]
    chunks: int
    poisson: PoissonGaussian | None = None

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance (everything but the image)."""
        return {
            "iterations": int(self.iterations),
            "relative_gap": float(self.relative_gap),
            "converged": bool(self.converged),
            "weight": float(self.weight),
            "method": self.method,
            "noise_model": self.noise_model,
            "spacing": [float(s) for s in self.spacing],
            "chunks": int(self.chunks),
            "poisson": None if self.poisson is None else dataclasses.asdict(self.poisson),
        }


def _fraction_done(tick: solvers.Tick, first_gap: float, settings: Any) -> float:
    """Progress of one solve: iterations used, or the way to the tolerance on a log scale.

    Runs usually stop on the gap long before ``max_iterations``; counting iterations alone
    would make the bar jump from a fraction to 100 %.
    """
    by_iterations = tick.iteration / settings.max_iterations
    tolerance = settings.tolerance
    gap = tick.relative_gap
    if tolerance <= 0 or not math.isfinite(gap) or first_gap <= tolerance or gap <= 0:
        return min(1.0, by_iterations)
    by_gap = math.log(first_gap / max(gap, tolerance)) / math.log(first_gap / tolerance)
    return min(1.0, max(by_iterations, by_gap))


def denoise(
    image: Any,
    weight: float,
    *,
    method: str = "fgp",
    spacing: Sequence[float] | None = None,
    noise_model: str = "gaussian",
    gain: float | None = None,
    offset: float | None = None,
    read_noise: float | None = None,
    channel_axis: int | None = None,
    max_iterations: int = 200,
    tolerance: float = 1e-3,
    nonnegative: bool = False,
    memory_budget: int | None = None,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """Denoise an image with total variation (ROF); blocking version of :func:`iter_denoise`.

    Parameters and notes: see :func:`iter_denoise`.

    Returns
    -------
    numpy.ndarray
        float32, same shape as ``image``, in the input's intensity units.
    """
    job = iter_denoise(
        image,
        weight,
        method=method,
        spacing=spacing,
        noise_model=noise_model,
        gain=gain,
        offset=offset,
        read_noise=read_noise,
        channel_axis=channel_axis,
        max_iterations=max_iterations,
        tolerance=tolerance,
        nonnegative=nonnegative,
        memory_budget=memory_budget,
        device=device,
    )
    return run_job(job).image


def iter_denoise(
    image: Any,
    weight: float,
    *,
    method: str = "fgp",
    spacing: Sequence[float] | None = None,
    noise_model: str = "gaussian",
    gain: float | None = None,
    offset: float | None = None,
    read_noise: float | None = None,
    channel_axis: int | None = None,
    max_iterations: int = 200,
    tolerance: float = 1e-3,
    nonnegative: bool = False,
    memory_budget: int | None = None,
    device: str | torch.device | None = None,
) -> Job[TVResult]:
    """Total-variation denoising as a job that reports progress and can be cancelled.

    Parameters
    ----------
    image : array-like
        2D ``(Y, X)``, 3D ``(Z, Y, X)`` or ``(T, Y, X)``, or 4D ``(T, Z, Y, X)`` real array (NumPy,
        dask or zarr; read chunk by chunk), plus an optional channel axis.
    weight : float
        TV weight (>= 0) in the image's intensity units -- larger is smoother. In Poisson mode it
        is in Anscombe units, where the noise standard deviation is about 1 (try 0.5-1.5).
    method : {"fgp", "chambolle"}
        ``"fgp"``: fast gradient projection with a duality-gap stopping rule (default).
        ``"chambolle"``: scikit-image-compatible Chambolle projection; ``tolerance`` is then
        scikit-image's ``eps``.
    spacing : sequence of float, optional
        Difference weight per non-channel axis: 1 = normal coupling, ``xy_pixel / z_step`` for
        anisotropic voxels, 0 = no coupling (e.g. a time axis denoised frame by frame). Default:
        all ones.
    noise_model : {"gaussian", "poisson"}
        ``"poisson"``: generalized Anscombe transform, ROF, exact unbiased inverse.
    gain, offset, read_noise : float, optional
        Camera model for Poisson mode (ADU per photon, ADU, ADU). With ``gain=None`` all three are
        estimated from the image (``offset``/``read_noise`` are then ignored); with a gain,
        ``offset`` and ``read_noise`` default to 0.
    channel_axis : int, optional
        Axis holding independent channels.
    max_iterations : int
        Iteration cap (>= 1).
    tolerance : float
        FGP: stop once the relative duality gap is ``<= tolerance`` (0 runs all iterations).
        Chambolle: scikit-image's ``eps``.
    nonnegative : bool
        Constrain ``u >= 0``. FGP solves the constrained problem exactly; Chambolle (no box
        constraint in its dual) and Poisson mode clip the result.
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory (also settable with the
        ``NAPARI_GPUSCOPE_MEMORY_BUDGET`` environment variable).
    device : str or torch.device, optional
        ``None`` = first GPU (raises :class:`~.devices.NoGPUError` without one); ``"cpu"`` runs
        the reference path.

    Returns
    -------
    generator
        Yields :class:`~.jobs.Progress` (with a throttled preview of the current estimate and
        ``metrics={"iteration", "relative_gap"}``) and returns a :class:`TVResult`.

    Raises
    ------
    InvalidInputError
        For complex, boolean, empty or non-finite input or a wrong number of dimensions.
    ValueError
        For invalid parameters (the message names the parameter and the valid range).
    DeviceMemoryError
        When not even the smallest chunk fits in device memory.

    Notes
    -----
    Integer inputs are converted to float32 **without rescaling** (unlike scikit-image's
    ``img_as_float``): a uint16 image is denoised in ADU and ``weight`` is in ADU too. The output
    is always float32 in the input's units.

    The relative gap certifies the result: ``(P(u) - P*) / P(u) <= relative_gap`` where ``P`` is
    the ROF energy. A gap of 1e-3 is visually converged; 1e-2 is a good preview budget.

    Parameters are checked when this function is called; the values of the image (NaN,
    infinity) are checked when the job starts, so a worker thread pays for reading a lazy array.
    """
    validate_image(image, min_ndim=2, max_ndim=4 + (channel_axis is not None), check_values=False)
    ndim = len(image.shape)
    channel = _check_channel_axis(channel_axis, ndim)
    n_spatial = ndim - (channel is not None)
    if channel is not None and n_spatial < 2:
        raise InvalidInputError(
            f"image has {n_spatial} non-channel dimension(s); expected 2 to 4 besides the "
            "channel axis"
        )
    weight = _check_number("weight", weight, minimum=0.0)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if noise_model not in NOISE_MODELS:
        raise ValueError(f"noise_model must be one of {NOISE_MODELS}, got {noise_model!r}")
    tolerance = _check_number("tolerance", tolerance, minimum=0.0)
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, numbers.Integral):
        raise ValueError(f"max_iterations must be an integer >= 1, got {max_iterations!r}")
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be an integer >= 1, got {max_iterations!r}")
    if memory_budget is not None and (
        isinstance(memory_budget, bool)
        or not isinstance(memory_budget, numbers.Integral)
        or memory_budget <= 0
    ):
        raise ValueError(f"memory_budget must be a positive number of bytes, got {memory_budget!r}")
    weights = _check_spacing(spacing, n_spatial)
    camera = None
    if noise_model == "poisson" and gain is not None:
        camera = PoissonGaussian(
            float(gain),
            0.0 if offset is None else float(offset),
            0.0 if read_noise is None else float(read_noise),
        )
    settings = _Settings(
        weight=weight,
        method=method,
        noise_model=noise_model,
        spacing=weights,
        channel_axis=channel,
        max_iterations=int(max_iterations),
        tolerance=tolerance,
        nonnegative=bool(nonnegative),
        memory_budget=None if memory_budget is None else int(memory_budget),
    )
    return _run(image, settings, camera, device)


def spacing_from_scale(scale: Sequence[float], uncoupled: Sequence[int] = ()) -> tuple[float, ...]:
    """Difference weights ``spacing`` for voxels of the given physical size.

    Parameters
    ----------
    scale : sequence of float
        Physical step per axis (e.g. napari ``layer.scale``); the last axis (x) is the reference.
    uncoupled : sequence of int
        Axes denoised independently, e.g. a time axis (weight 0).

    Returns
    -------
    tuple of float
        ``x_step / step`` per axis (1 for x; 0.25 for 0.4 µm z-steps with 0.1 µm pixels); 0 for
        the uncoupled axes, and 1 where a step is not positive.
    """
    steps = [float(s) for s in scale]
    reference = steps[-1] if steps and steps[-1] > 0 else 1.0
    skip = {a % len(steps) for a in uncoupled} if steps else set()
    return tuple(
        0.0 if axis in skip else (reference / step if step > 0 else 1.0)
        for axis, step in enumerate(steps)
    )


# --- validation ------------------------------------------------------------------------------


def _check_number(name: str, value: Any, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number >= {minimum:g}, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return value


def _check_channel_axis(channel_axis: int | None, ndim: int) -> int | None:
    if channel_axis is None:
        return None
    if isinstance(channel_axis, bool) or not isinstance(channel_axis, numbers.Integral):
        raise ValueError(f"channel_axis must be an integer axis or None, got {channel_axis!r}")
    if not -ndim <= channel_axis < ndim:
        raise ValueError(
            f"channel_axis={channel_axis} is out of range for an image with {ndim} dimensions"
        )
    return int(channel_axis) % ndim


def _check_spacing(spacing: Sequence[float] | None, n_spatial: int) -> tuple[float, ...]:
    if spacing is None:
        return (1.0,) * n_spatial
    try:
        values = [float(s) for s in spacing]
    except (TypeError, ValueError):
        raise ValueError(
            f"spacing must be a sequence of {n_spatial} numbers >= 0 (one per non-channel axis), "
            f"got {spacing!r}"
        ) from None
    if len(values) != n_spatial:
        raise ValueError(
            f"spacing must have one weight per non-channel axis ({n_spatial}), got {len(values)}: "
            f"{tuple(values)}"
        )
    if not all(math.isfinite(s) and s >= 0 for s in values):
        raise ValueError(
            f"spacing weights must be finite and >= 0 (0 = no coupling along that axis), got "
            f"{tuple(values)}"
        )
    return tuple(values)


# --- the job ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    weight: float
    method: str
    noise_model: str
    spacing: tuple[float, ...]
    channel_axis: int | None
    max_iterations: int
    tolerance: float
    nonnegative: bool
    memory_budget: int | None


@dataclass(frozen=True)
class _Layout:
    """How the input's axes map onto the solver's ``(batch, coupled...)`` problem layout."""

    shape: tuple[int, ...]
    batch_axes: tuple[int, ...]
    coupled_axes: tuple[int, ...]
    coupled_spacing: tuple[float, ...]

    @staticmethod
    def of(shape: tuple[int, ...], settings: _Settings) -> _Layout:
        spatial = [a for a in range(len(shape)) if a != settings.channel_axis]
        weight_of = dict(zip(spatial, settings.spacing, strict=True))
        coupled = tuple(a for a in spatial if weight_of[a] > 0)
        batch = tuple(a for a in range(len(shape)) if a not in coupled)
        return _Layout(shape, batch, coupled, tuple(weight_of[a] for a in coupled))

    @property
    def perm(self) -> tuple[int, ...]:
        return self.batch_axes + self.coupled_axes

    def to_problem(self, region: torch.Tensor) -> torch.Tensor:
        """Region tensor (input axis order) -> contiguous ``(batch, coupled...)`` tensor."""
        permuted = region.permute(self.perm)
        coupled_shape = permuted.shape[len(self.batch_axes) :]
        return permuted.reshape(-1, *coupled_shape).contiguous()

    def from_problem(self, problem: torch.Tensor, region_shape: Sequence[int]) -> torch.Tensor:
        """Inverse of :meth:`to_problem` (a view, input axis order)."""
        permuted_shape = [region_shape[a] for a in self.perm]
        inverse = np.argsort(self.perm).tolist()
        return problem.reshape(permuted_shape).permute(inverse)


@dataclass
class _Totals:
    iterations: int = 0
    relative_gap: float = 0.0
    converged: bool = True
    chunks: int = 0


def _bytes_per_element(method: str, n_coupled: int) -> int:
    """Device bytes per voxel: resident fields plus the torch twins' largest temporaries."""
    d = n_coupled
    # FGP: f, u, primal and gap terms, y and z (d each), at most two twin work buffers.
    # Chambolle: f, d, out, norm, result, p and g (d each), temporaries (~d + 1).
    fields = 4 + 2 * d + 2 if method == "fgp" else 5 + 2 * d + (d + 1)
    return 4 * fields


def _solve_problem(
    f: torch.Tensor, spacing: Sequence[float], settings: _Settings
) -> solvers.Solver:
    """Solver for one chunk (module-level so tests can inject out-of-memory failures)."""
    if settings.method == "chambolle":
        return solvers.solve_chambolle(
            f,
            settings.weight,
            spacing,
            max_iterations=settings.max_iterations,
            eps=settings.tolerance,
        )
    lo = 0.0 if settings.nonnegative and settings.noise_model == "gaussian" else -math.inf
    return solvers.solve_fgp(
        f,
        settings.weight,
        spacing,
        lo=lo,
        max_iterations=settings.max_iterations,
        tolerance=settings.tolerance,
    )


def _run(
    image: Any, settings: _Settings, camera: PoissonGaussian | None, device: Any
) -> Job[TVResult]:
    with torch.no_grad(), device_context(device) as dev:
        check_finite(image)
        shape = tuple(int(s) for s in image.shape)
        if settings.noise_model == "poisson" and camera is None:
            yield Progress(0.0, "estimating camera gain, offset and read noise")
            camera = estimate_poisson_gaussian(image)  # reads a subsample of planes
        layout = _Layout.of(shape, settings)
        out = np.empty(shape, dtype=np.float32)
        totals = _Totals()

        def postprocess(u: torch.Tensor) -> torch.Tensor:
            if camera is not None:
                u = anscombe_inverse(u, camera, exact=True)
            if settings.nonnegative and (camera is not None or settings.method == "chambolle"):
                u = u.clamp_min(0.0)
            return u

        if settings.weight == 0 or not layout.coupled_axes:
            # Nothing couples the voxels (or nothing is penalised): the ROF solution is f itself.
            data = np.asarray(image, dtype=np.float32)
            out[...] = np.maximum(data, 0) if settings.nonnegative else data
            yield Progress(1.0, "nothing to solve: the input is its own TV solution")
        else:
            runner = _ChunkRunner(image, out, layout, settings, camera, dev, postprocess, totals)
            yield from runner.run()
        return TVResult(
            image=out,
            iterations=totals.iterations,
            relative_gap=totals.relative_gap,
            converged=totals.converged,
            weight=settings.weight,
            method=settings.method,
            noise_model=settings.noise_model,
            spacing=settings.spacing,
            chunks=totals.chunks,
            poisson=camera,
        )


class _ChunkRunner:
    """Splits the input into device-sized chunks and solves each one.

    Axes are split in this order: independent (batch) axes first -- their chunks need no halo --
    then the leading coupled axis, whose chunks read ``halo`` extra planes on each side and keep
    only their core.
    """

    def __init__(self, image, out, layout, settings, camera, device, postprocess, totals):
        self.image = image
        self.out = out
        self.layout = layout
        self.settings = settings
        self.camera = camera
        self.device = device
        self.postprocess = postprocess
        self.totals = totals
        self.throttle = PreviewThrottle()
        self.bpe = _bytes_per_element(settings.method, len(layout.coupled_axes))
        lead = layout.coupled_axes[0]
        self.halo = min(layout.shape[lead] - 1, math.ceil(HALO_PLANES * layout.coupled_spacing[0]))
        self.split_axes = (*layout.batch_axes, lead)

    def run(self) -> Job[None]:
        full = [(0, n) for n in self.layout.shape]
        yield from self._split(0, full)

    def _split(self, level: int, region: list[tuple[int, int]]) -> Job[None]:
        axis = self.split_axes[level]
        coupled = level == len(self.split_axes) - 1
        start0, stop0 = region[axis]
        length = stop0 - start0
        elements = math.prod(b - a for a, b in region)
        per_item = elements // length * self.bpe
        halo = self.halo if coupled else 0
        # A chunk reads its core plus up to 2 halos, never more than the whole axis.
        fixed = min(2 * halo, length - 1) * per_item
        what = "TV denoising of one chunk"
        try:
            chunk = plan_chunk(
                length,
                per_item,
                self.device,
                fixed_bytes=fixed,
                budget=self.settings.memory_budget,
                what=what,
            )
        except DeviceMemoryError:
            if coupled:
                raise
            # Not even one slab along this independent axis fits: split the next axis inside it.
            for index in range(length):
                sub = list(region)
                sub[axis] = (start0 + index, start0 + index + 1)
                yield from scaled(self._split(level + 1, sub), index / length, (index + 1) / length)
            return

        def process(start: int, stop: int) -> Job[None]:
            sub = list(region)
            sub[axis] = (start0 + start, start0 + stop)
            return self._solve_region(sub, axis if coupled else None)

        yield from run_in_chunks(
            length,
            chunk,
            process,
            device=self.device,
            bytes_per_item=per_item,
            fixed_bytes=fixed,
            what=what,
        )

    def _solve_region(self, core: list[tuple[int, int]], halo_axis: int | None) -> Job[None]:
        read = list(core)
        if halo_axis is not None:
            a, b = core[halo_axis]
            read[halo_axis] = (
                max(0, a - self.halo),
                min(self.layout.shape[halo_axis], b + self.halo),
            )
        read_slices = tuple(slice(a, b) for a, b in read)
        read_shape = [b - a for a, b in read]
        # Where the core sits inside the read region.
        keep = tuple(slice(c[0] - r[0], c[1] - r[0]) for c, r in zip(core, read, strict=True))
        core_slices = tuple(slice(a, b) for a, b in core)
        whole = all(a == 0 and b == n for (a, b), n in zip(core, self.layout.shape, strict=True))
        preview_region = None if whole else core_slices

        f = self.layout.to_problem(to_device(self.image, self.device, region=read_slices))
        if self.camera is not None:
            f = anscombe_forward(f, self.camera).contiguous()

        def to_output(u: torch.Tensor) -> torch.Tensor:
            return self.postprocess(self.layout.from_problem(u, read_shape)[keep])

        settings = self.settings
        first_gap = None
        fraction = 0.0  # FGP's gap is not monotone; the bar must not move backwards

        def report(tick: solvers.Tick) -> Progress:
            nonlocal first_gap, fraction
            first_gap = first_gap or tick.relative_gap
            fraction = max(fraction, _fraction_done(tick, first_gap, settings))
            preview = to_host(to_output(tick.estimate)) if self.throttle.due() else None
            return Progress(
                fraction,
                f"iteration {tick.iteration}/{settings.max_iterations}, "
                f"gap {tick.relative_gap:.1e}",
                preview=preview,
                preview_region=None if preview is None else preview_region,
                metrics={"iteration": tick.iteration, "relative_gap": tick.relative_gap},
            )

        solver = _solve_problem(f, self.layout.coupled_spacing, settings)
        result: solvers.SolveResult = yield from mapped(solver, report)
        self.out[core_slices] = to_host(to_output(result.image))
        totals = self.totals
        totals.iterations = max(totals.iterations, result.iterations)
        totals.relative_gap = max(totals.relative_gap, result.relative_gap)
        totals.converged = totals.converged and result.converged
        totals.chunks += 1
