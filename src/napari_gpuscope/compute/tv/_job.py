"""The TV denoising job: input checks, weight from strength, chunks, solver, result."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..arrays import (
    InvalidInputError,
    check_finite,
    download_into,
    to_device,
    to_host,
    validate_image,
)
from ..camera import CameraModel
from ..chunking import AxisLayout, HaloChunker, Region
from ..devices import device_context
from ..jobs import Job, Output, Progress, blocking, mapped
from ..noise import (
    anscombe_forward,
    anscombe_inverse,
    estimate_noise_sigma,
    estimate_poisson_gaussian,
)
from ..params import ParameterError, takes_params
from ..results import Geometry, LayerDataTuple, image_layer
from . import _fgp
from . import _solvers as solvers
from ._chambolle import solve_chambolle
from ._fgp import solve_fgp
from ._params import TVParams

__all__ = ["HALO_PLANES", "OUTPUT", "TVResult", "denoise", "halo", "iter_denoise"]

HALO_PLANES = 16
"""Halo (in planes, for a unit spacing weight) around each chunk of a chunked volume."""

OUTPUT = "denoised"
"""Name of the job's (only) output in ``Progress.outputs``."""


@dataclass(frozen=True)
class TVResult:
    """Denoised image and the facts needed to trust and reproduce it.

    Attributes
    ----------
    image : numpy.ndarray
        float32, same shape as the input, in the input's intensity units.
    params : TVParams
        The parameters as requested (``weight`` None means it was derived from ``strength``).
    weight : float
        TV weight used (image units; Anscombe units for ``noise_model="poisson"``).
    noise_sigma : float or None
        Noise level estimated from the image when the weight was derived from the strength in
        the Gaussian model, else None.
    iterations : int
        Iterations run (the largest over chunks and independent problems).
    relative_gap : float
        Relative duality gap ``(P(u) - D(y)) / P(u)`` of the result (the largest over chunks and
        independent problems; in Anscombe units for ``noise_model="poisson"``). 0 when nothing
        had to be solved.
    converged : bool
        FGP: every problem reached ``relative_gap <= tolerance``. Chambolle: scikit-image's
        stopping rule fired before ``max_iterations``.
    spacing : tuple of float
        Difference weight of every non-channel axis.
    chunks : int
        Number of device chunks processed (1 when everything fit at once).
    camera : CameraModel or None
        Camera parameters used in Poisson mode.
    stopped_early : bool
        The user asked to stop and keep the result so far.
    unprocessed_fraction : float
        Fraction of the voxels left as the input because the run was stopped before their chunk
        was reached (0 unless ``stopped_early`` with several chunks).
    kernel_paths : dict of str to str
        Which implementation of each fused operation ran and why (FGP), e.g. ``{"fgp_step":
        "fused kernel (verified against the twin)"}``.
    """

    image: np.ndarray
    params: TVParams
    weight: float
    iterations: int
    relative_gap: float
    converged: bool
    spacing: tuple[float, ...]
    chunks: int
    noise_sigma: float | None = None
    camera: CameraModel | None = None
    stopped_early: bool = False
    unprocessed_fraction: float = 0.0
    kernel_paths: dict[str, str] = field(default_factory=dict)

    @property
    def method(self) -> str:
        """The solver that ran."""
        return self.params.method

    @property
    def noise_model(self) -> str:
        """The noise model used."""
        return self.params.noise_model

    @property
    def poisson(self) -> CameraModel | None:
        """The camera model of Poisson mode (alias of :attr:`camera`)."""
        return self.camera

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance (everything but the image)."""
        return {
            "params": self.params.to_dict(),
            "weight": float(self.weight),
            "noise_sigma": None if self.noise_sigma is None else float(self.noise_sigma),
            "iterations": int(self.iterations),
            "relative_gap": float(self.relative_gap),
            "converged": bool(self.converged),
            "method": self.method,
            "noise_model": self.noise_model,
            "spacing": [float(s) for s in self.spacing],
            "chunks": int(self.chunks),
            "camera": None if self.camera is None else dataclasses.asdict(self.camera),
            "stopped_early": bool(self.stopped_early),
            "unprocessed_fraction": float(self.unprocessed_fraction),
            "kernel_paths": dict(self.kernel_paths),
        }

    def describe(self) -> str:
        """One line in plain words, e.g. ``"converged in 80 iterations (relative gap 9.5e-04
        <= tolerance 1e-03), weight 0.0998"``."""
        gap = f"relative gap {self.relative_gap:.1e}"
        if self.params.method == "fgp":
            gap += f" {'<=' if self.converged else '>'} tolerance {self.params.tolerance:.0e}"
        facts = f"{gap}, weight {self.weight:.4g}"
        if self.noise_sigma is not None:
            facts += f" (strength {self.params.strength:g} x noise {self.noise_sigma:.4g})"
        if self.stopped_early:
            left = ""
            if self.unprocessed_fraction > 0:
                left = (
                    f"; {self.unprocessed_fraction:.0%} of the image was not reached and is "
                    "unchanged"
                )
            return f"stopped early by request after {self.iterations} iterations ({facts}){left}"
        if self.iterations == 0:
            return f"nothing to solve ({facts})"
        if self.converged and self.params.method == "chambolle":
            # scikit-image's rule compares successive energies; it says nothing about the
            # distance to the optimum, which the gap bounds.
            return (
                f"stopped by scikit-image's energy-change rule (eps {self.params.tolerance:g}) "
                f"after {self.iterations} iterations ({facts})"
            )
        if self.converged:
            return f"converged in {self.iterations} iterations ({facts})"
        return (
            f"stopped at the iteration limit ({self.params.max_iterations}) before reaching the "
            f"tolerance ({facts})"
        )

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """One image layer, ``"<name> [TV s=1]"`` (or ``w=<weight>``), in the input's units.

        No colormap or contrast limits are set: a viewer shows the result like its input.
        """
        return [
            image_layer(self.image, f"{name} [TV {self.params.label}]", geometry, metadata=metadata)
        ]


def halo(params: TVParams, spacing_weight: float = 1.0) -> int:
    """Planes of overlap a chunk of a volume needs along an axis of difference weight
    ``spacing_weight`` (e.g. the ``depth`` of a Dask ``map_overlap``).

    Examples
    --------
    >>> halo(TVParams(), 0.25)
    4
    """
    return math.ceil(HALO_PLANES * spacing_weight)


def _fraction_done(tick: solvers.Tick, first_gap: float, params: TVParams) -> float:
    """Progress of one solve: iterations used, or the way to the tolerance on a log scale.

    Runs usually stop on the gap long before ``max_iterations``; counting iterations alone
    would make the bar jump from a fraction to 100 %.
    """
    by_iterations = tick.iteration / params.max_iterations
    tolerance = params.tolerance
    gap = tick.relative_gap
    if tolerance <= 0 or not math.isfinite(gap) or first_gap <= tolerance or gap <= 0:
        return min(1.0, by_iterations)
    by_gap = math.log(first_gap / max(gap, tolerance)) / math.log(first_gap / tolerance)
    return min(1.0, max(by_iterations, by_gap))


def _check_call(image: Any, params: TVParams) -> tuple[int | None, tuple[float, ...]]:
    """Shape checks that need both the image and the parameters."""
    extra = params.channel_axis is not None
    validate_image(image, min_ndim=2, max_ndim=4 + extra, check_values=False)
    ndim = len(image.shape)
    channel = params.channel_axis
    if channel is not None:
        if not -ndim <= channel < ndim:
            raise ParameterError(
                f"TVParams.channel_axis={channel} is out of range for an image with {ndim} "
                "dimensions"
            )
        channel %= ndim
        if ndim - 1 < 2:
            raise InvalidInputError(
                f"image has {ndim - 1} non-channel dimension(s); expected 2 to 4 besides the "
                "channel axis"
            )
    n_spatial = ndim - (channel is not None)
    spacing = params.spacing if params.spacing is not None else (1.0,) * n_spatial
    if len(spacing) != n_spatial:
        raise ParameterError(
            f"TVParams.spacing must have one weight per non-channel axis ({n_spatial} for an "
            f"image of shape {tuple(image.shape)}), got {len(spacing)}: {spacing!r}"
        )
    return channel, spacing


@takes_params(TVParams, positional=("weight",))
def iter_denoise(
    image: Any,
    params: TVParams,
    *,
    memory_budget: int | None = None,
    device: str | torch.device | None = None,
) -> Job[TVResult]:
    """Total-variation denoising as a job that reports progress and can be stopped or cancelled.

    Solves ``min_u 1/2 ||u - f||^2 + weight * TV(u)`` (isotropic TV from weighted forward
    differences), on the GPU.

    Parameters
    ----------
    image : array-like
        2D ``(Y, X)``, 3D ``(Z, Y, X)`` or ``(T, Y, X)``, or 4D ``(T, Z, Y, X)`` real array
        (NumPy, dask or zarr; read chunk by chunk), plus an optional channel axis. Never
        modified.
    {params}
    params : TVParams, optional
        All parameters at once (keywords given as well override its fields). A ``TVParams``
        may also be passed in place of ``weight``.
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory (also settable with the
        ``NAPARI_GPUSCOPE_MEMORY_BUDGET`` environment variable).
    device : str or torch.device, optional
        ``None`` = first GPU (raises :class:`~napari_gpuscope.compute.devices.NoGPUError`
        without one); ``"cpu"`` runs the reference path.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` (with the lazy output
        ``"denoised"`` and ``metrics={"relative_gap"}``, ``step`` = iteration) and returns a
        :class:`TVResult`. Sending ``STOP`` returns the current, certified estimate.

    Raises
    ------
    InvalidInputError
        For complex, boolean, empty or non-finite input or a wrong number of dimensions.
    ParameterError
        For invalid parameters (the message names the parameter and the valid range).
    DeviceMemoryError
        When not even the smallest chunk fits in device memory.

    Notes
    -----
    Integer inputs are converted to float32 **without rescaling** (unlike scikit-image's
    ``img_as_float``): a uint16 image is denoised in ADU and ``weight`` is in ADU too.

    The relative gap certifies the FGP result: ``(P(u) - P*) / P(u) <= relative_gap`` where
    ``P`` is the ROF energy. A gap of 1e-3 is visually converged; 1e-2 is a good preview.

    Parameters are checked when this function is called; the values of the image (NaN,
    infinity) are checked when the job starts, so a worker thread pays for reading a lazy array.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute import tv
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> noisy = np.random.default_rng(0).normal(0.5, 0.1, (64, 64)).astype(np.float32)
    >>> result = run_job(tv.iter_denoise(noisy, 0.1, device="cpu"))
    >>> result.converged, bool(result.image.std() < noisy.std())
    (True, True)
    """
    memory_budget = _check_budget(memory_budget)
    channel, spacing = _check_call(image, params)
    if device is None and isinstance(image, torch.Tensor) and image.is_cuda:
        device = image.device  # a CUDA tensor is denoised where it lives
    return _run(image, params, channel, spacing, memory_budget, device)


def _check_budget(memory_budget: Any) -> int | None:
    if memory_budget is None:
        return None
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, int | np.integer):
        raise ParameterError(
            f"memory_budget must be a positive number of bytes, got {memory_budget!r}"
        )
    if memory_budget <= 0:
        raise ParameterError(
            f"memory_budget must be a positive number of bytes, got {memory_budget!r}"
        )
    return int(memory_budget)


denoise = blocking(iter_denoise, unwrap=lambda result: result.image)
denoise.__doc__ = """Denoise an image with total variation (ROF); blocking version of
:func:`iter_denoise` (same parameters).

Returns
-------
numpy.ndarray
    float32, same shape as ``image``, in the input's intensity units.

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute import tv
>>> noisy = np.random.default_rng(0).normal(0.5, 0.1, (64, 64)).astype(np.float32)
>>> tv.denoise(noisy, 0.1, device="cpu").shape
(64, 64)
"""


class _StopAll(Exception):
    """A solve was stopped early: later chunks are not started."""


def _bytes_per_element(method: str, n_coupled: int, device: Any = None) -> int:
    """Device bytes per voxel: resident fields plus the torch twins' largest temporaries.

    FGP: see :func:`._fgp.bytes_per_element` (less on a device where the fused kernels run;
    without ``device``, the twins' need).
    """
    d = n_coupled
    if method == "fgp":
        if device is None:
            return _fgp.ops.kernel_bytes_per_element(d, fused=False)
        return _fgp.bytes_per_element(d, device)
    # Chambolle: f, d, out, norm, result, p and g (d each), temporaries (~d + 1).
    return 4 * (5 + 2 * d + (d + 1))


def _solver(f: torch.Tensor, spacing: tuple[float, ...], weight: float, params: TVParams):
    """Solver for one chunk (module-level so tests can inject out-of-memory failures)."""
    if params.method == "chambolle":
        return solve_chambolle(
            f, weight, spacing, max_iterations=params.max_iterations, eps=params.tolerance
        )
    lo = 0.0 if params.nonnegative and params.noise_model == "gaussian" else -math.inf
    return solve_fgp(
        f,
        weight,
        spacing,
        lo=lo,
        max_iterations=params.max_iterations,
        tolerance=params.tolerance,
    )


@dataclass
class _Totals:
    iterations: int = 0
    relative_gap: float = 0.0
    converged: bool = True
    stopped: bool = False
    written: list[tuple[slice, ...]] = field(default_factory=list)


def _resolve_weight(image: Any, params: TVParams) -> tuple[float, float | None]:
    """The weight to solve with, and the noise level it came from (Gaussian strength mode)."""
    if params.weight is not None:
        return params.weight, None
    if params.noise_model == "poisson":
        return params.strength, None  # unit-variance noise after the Anscombe transform
    sigma = estimate_noise_sigma(image)
    if not (math.isfinite(sigma) and sigma > 0):
        raise InvalidInputError(
            f"the noise level estimated from the image is {sigma:g}: it looks noise-free (or "
            "constant), so a strength relative to the noise is undefined. Pass an absolute "
            "weight instead."
        )
    return params.strength * sigma, sigma


def _run(
    image: Any,
    params: TVParams,
    channel: int | None,
    spacing: tuple[float, ...],
    memory_budget: int | None,
    device: Any,
) -> Job[TVResult]:
    with torch.no_grad(), device_context(device) as dev:
        # On a GPU each chunk's upload checks its values on the device (no host pass); a value
        # read by an estimate first is reported by the host scan below.
        device_check = dev.type == "cuda"
        if not device_check:
            check_finite(image)
        shape = tuple(int(s) for s in image.shape)
        camera = None
        try:
            if params.noise_model == "poisson":
                if params.gain is None:
                    yield Progress(None, "estimating camera gain, offset and read noise")
                    camera = estimate_poisson_gaussian(image)  # reads a subsample of planes
                else:
                    camera = CameraModel(
                        params.gain, params.offset or 0.0, params.read_noise or 0.0
                    )
            if params.weight is None and params.noise_model == "gaussian":
                yield Progress(None, "estimating the noise level")
            weight, sigma = _resolve_weight(image, params)
        except ValueError:  # InvalidInputError and ParameterError too
            if device_check:
                check_finite(image)  # a NaN in the sampled planes: say so first
            raise
        layout = AxisLayout.of(shape, spacing, channel)
        out = np.empty(shape, dtype=np.float32)
        totals = _Totals()

        def postprocess(u: torch.Tensor) -> torch.Tensor:
            if camera is not None:
                u = anscombe_inverse(u, camera, exact=True)
            if params.nonnegative and (camera is not None or params.method == "chambolle"):
                u = u.clamp_min(0.0)
            return u

        chunks = 0
        if weight == 0 or not layout.coupled_axes:
            # Nothing is penalised: the ROF solution is f itself.
            if device_check:
                check_finite(image)
            data = to_device(image, "cpu").numpy()
            out[...] = np.maximum(data, 0) if params.nonnegative else data
            yield Progress(1.0, "nothing to solve: with weight 0 the input is its own solution")
        else:
            chunker = HaloChunker(
                layout,
                bytes_per_element=_bytes_per_element(params.method, len(layout.coupled_axes), dev),
                halo=halo(params, layout.coupled_spacing[0]),
                device=dev,
                budget=memory_budget,
                what="TV denoising of one chunk",
            )

            def solve(region: Region) -> Job[None]:
                return _solve_region(
                    image, out, region, layout, params, weight, camera, dev, postprocess, totals
                )

            with contextlib.suppress(_StopAll):  # stopped early: later chunks keep the input
                yield from chunker.run(solve)
            chunks = chunker.chunks
        unprocessed = 0.0
        if totals.stopped:
            unprocessed = _fill_unprocessed(image, out, totals.written)
        return TVResult(
            image=out,
            params=params,
            weight=weight,
            iterations=totals.iterations,
            relative_gap=totals.relative_gap,
            converged=totals.converged and not totals.stopped,
            spacing=spacing,
            chunks=chunks,
            noise_sigma=sigma,
            camera=camera,
            stopped_early=totals.stopped,
            unprocessed_fraction=unprocessed,
            kernel_paths=_fgp.kernel_paths(dev) if params.method == "fgp" and chunks else {},
        )


def _fill_unprocessed(image: Any, out: np.ndarray, written: list[tuple[slice, ...]]) -> float:
    """Copy the input into every part of ``out`` no chunk wrote (a run stopped early).

    Returns the fraction of the voxels left as the input.
    """
    mask = np.ones(out.shape, dtype=bool)
    for core in written:
        mask[core] = False
    for index in np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1)):
        plane = mask[index]
        out[index][plane] = to_device(image[int(index)], "cpu").numpy()[plane]
    return float(mask.mean())


def _solve_region(
    image: Any,
    out: np.ndarray,
    region: Region,
    layout: AxisLayout,
    params: TVParams,
    weight: float,
    camera: CameraModel | None,
    dev: torch.device,
    postprocess: Callable[[torch.Tensor], torch.Tensor],
    totals: _Totals,
) -> Job[None]:
    f = layout.to_problem(
        to_device(image, dev, region=region.read, check_finite=dev.type == "cuda")
    )
    if camera is not None:
        f = anscombe_forward(f, camera).contiguous()

    def to_output(u: torch.Tensor) -> torch.Tensor:
        return postprocess(layout.from_problem(u, region.read_shape)[region.keep])

    first_gap = None
    fraction = 0.0  # FGP's gap is not monotone; the bar must not move backwards
    output_region = None if region.whole else region.core

    def report(tick: solvers.Tick) -> Progress:
        nonlocal first_gap, fraction
        first_gap = first_gap or tick.relative_gap
        fraction = max(fraction, _fraction_done(tick, first_gap, params))
        estimate = tick.estimate
        return Progress(
            fraction,
            f"iteration {tick.iteration}/{params.max_iterations}, gap {tick.relative_gap:.1e}",
            step=tick.iteration,
            metrics={"iteration": tick.iteration, "relative_gap": tick.relative_gap},
            outputs={
                OUTPUT: Output(
                    lambda: to_host(to_output(estimate)), region=output_region, shape=out.shape
                )
            },
        )

    result: solvers.SolveResult = yield from mapped(
        _solver(f, layout.coupled_spacing, weight, params), report
    )
    download_into(out[region.core], to_output(result.image))
    totals.written.append(region.core)
    totals.iterations = max(totals.iterations, result.iterations)
    totals.relative_gap = max(totals.relative_gap, result.relative_gap)
    totals.converged = totals.converged and result.converged
    if result.stopped:
        totals.stopped = True
        raise _StopAll
