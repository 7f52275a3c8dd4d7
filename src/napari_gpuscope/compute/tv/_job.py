"""The TV denoising job: input checks, weight from strength, chunks, solver, result."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from .._types import ArrayLike, Device
from ..arrays import download_into, to_device, value_range
from ..camera import CameraModel
from ..chunking import AxisLayout, HaloChunker, Region
from ..devices import device_context
from ..jobs import Job, Progress, blocking
from ..memory import check_budget
from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ..signatures import takes_params
from . import _fgp
from ._chambolle import solve_chambolle
from ._context import OUTPUT, SolveContext, StopAll
from ._fgp import solve_fgp
from ._params import TVParams
from ._scale import NEGLIGIBLE_WEIGHT, DataScale
from ._split import solve_split
from ._weight import check_input, resolve_weight

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._types import JSONDict

__all__ = ["OUTPUT", "TVResult", "denoise", "iter_denoise"]


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
        Relative duality gap ``(P(u) - D(y)) / P(u)`` of the returned image (the largest over
        independent problems; in Anscombe units for ``noise_model="poisson"``): an upper
        bound on ``(P(u) - P*) / P(u)``. For a volume split into chunks it is computed on the
        stitched result, in float64 (FGP runs the unchunked iterations chunk by chunk, so the
        result is the unchunked one). 0 when nothing had to be solved.
    converged : bool
        FGP: every problem reached ``relative_gap <= tolerance``. Chambolle: scikit-image's
        stopping rule fired for every problem (or the problem was constant, hence solved
        exactly), which says nothing about the gap. Never True for a run stopped early or a
        result with NaN.
    spacing : tuple of float
        Difference weight of every non-channel axis.
    chunks : int
        Number of device chunks (1 when everything fit at once).
    camera : CameraModel or None
        Camera parameters used in Poisson mode.
    stopped_early : bool
        The user asked to stop and keep the result so far.
    unprocessed_fraction : float
        Fraction of the voxels left as the input (clipped at 0 in non-negative mode) because
        the run was stopped before their chunk was reached (0 unless ``stopped_early`` with
        several chunks).
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

    def summary(self) -> JSONDict:
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
        <= tolerance 1e-03, weight 6.18 = strength 1 x noise σ 6.18)"``."""
        params = self.params
        gap = f"relative gap {self.relative_gap:.1e}"
        if params.method == "fgp":
            below = self.relative_gap <= params.tolerance
            gap += f" {'<=' if below else '>'} tolerance {params.tolerance:.0e}"
        facts = f"{gap}, weight {self.weight:.4g}"
        if self.noise_sigma is not None:
            facts += f" = strength {params.strength:g} x noise σ {self.noise_sigma:.4g}"
        elif params.weight is None and params.noise_model == "poisson":
            facts += f" = strength {params.strength:g} (Anscombe units)"
        if self.chunks > 1:
            facts += f", {self.chunks} chunks"
        if self.stopped_early:
            left = ""
            if self.unprocessed_fraction > 0:
                left = (
                    f"; {self.unprocessed_fraction:.0%} of the image was not reached and is "
                    "left as the input"
                )
            return f"stopped early by request after {self.iterations} iterations ({facts}){left}"
        if self.iterations == 0:
            if self.weight > 0:
                return (
                    "nothing to solve: the weight is negligible next to the data, so the input "
                    f"is its own solution to float32 precision ({facts})"
                )
            return f"nothing to solve ({facts})"
        if params.method == "chambolle":
            if self.converged and self.relative_gap == 0:
                return f"solved exactly: the image is constant along the smoothed axes ({facts})"
            chunked = ""
            if self.chunks > 1:
                chunked = "; split into chunks, so not identical to scikit-image's result"
            if self.converged:
                # scikit-image's rule compares successive energies; it says nothing about the
                # distance to the optimum, which the gap bounds.
                return (
                    f"stopped by scikit-image's energy-change rule (eps {params.tolerance:g}) "
                    f"after {self.iterations} iterations ({facts}){chunked}"
                )
            return (
                f"stopped at the iteration limit ({params.max_iterations}) before "
                f"scikit-image's energy-change rule fired ({facts}){chunked}"
            )
        if self.converged:
            return f"converged in {self.iterations} iterations ({facts})"
        return (
            f"stopped at the iteration limit ({params.max_iterations}) before reaching the "
            f"tolerance ({facts})"
        )

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> list[LayerDataTuple]:
        """One image layer, ``"TV denoised · <name> [s=1]"`` (or ``w=<weight>``), in the input's
        units.

        No colormap or contrast limits are set: a viewer shows the result like its input.
        """
        return [
            image_layer(
                self.image,
                result_name("TV denoised", name, self.params.label),
                geometry,
                metadata=metadata,
            )
        ]


@takes_params(TVParams, positional=("weight",))
def iter_denoise(
    image: ArrayLike,
    params: TVParams,
    *,
    memory_budget: int | None = None,
    device: str | torch.device | None = None,
    camera: CameraModel | None = None,
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
    camera : CameraModel, optional
        Poisson mode's camera model when it is already known in full, e.g. estimated once on
        the whole image for a preview of a few planes (it keeps the estimate's floor variance,
        which ``gain``, ``offset`` and ``read_noise`` cannot carry). Overrides those fields.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` (with the lazy output
        ``"denoised"`` and ``metrics={"relative_gap"}``, ``step`` = iteration) and returns a
        :class:`TVResult`. Sending ``STOP`` returns the current, certified estimate.

    Raises
    ------
    InvalidInputError
        For complex, boolean, empty or non-finite input, a wrong number of dimensions, or
        values float32 cannot hold (beyond +-3.4e38, or all below 1.2e-38).
    ParameterError
        For invalid parameters (the message names the parameter and the valid range).
    DeviceMemoryError
        When not even the smallest chunk fits in device memory.

    Notes
    -----
    Integer inputs are converted to float32 **without rescaling** (unlike scikit-image's
    ``img_as_float``): a uint16 image is denoised in ADU and ``weight`` is in ADU too.
    Internally the data and the weight are multiplied by the same power of two so that the
    solvers see values of magnitude ~1 (ROF is scale-equivariant, and a power of two changes no
    bit of the result); any units work.

    The relative gap certifies the result: ``(P(u) - P*) / P(u) <= relative_gap`` where ``P``
    is the ROF energy. A gap of 1e-3 is visually converged; 1e-2 is a good preview. A volume
    larger than device memory is split into chunks along its first smoothed axis; FGP then
    runs the unchunked iterations chunk by chunk (same result, same gap), and the gap of the
    stitched image is computed in float64.

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
    memory_budget = check_budget(memory_budget)
    channel, spacing = check_input(image, params)
    if device is None and isinstance(image, torch.Tensor) and image.is_cuda:
        device = image.device  # a CUDA tensor is denoised where it lives
    return _run(image, params, channel, spacing, memory_budget, device, camera)


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


def _bytes_per_element(method: str, n_coupled: int, device: Device | None = None) -> int:
    """Device bytes per voxel: resident fields plus the largest temporaries.

    FGP: see :func:`._fgp.bytes_per_element` (less on a device where the fused kernels run;
    without ``device``, the twins' need).
    """
    d = n_coupled
    if method == "chambolle":
        # f, d, out, norm, product, p and g (d each), the pairwise sums' leaf lanes, the gap's
        # temporary at checks.
        return 4 * (5 + 2 * d + 2)
    if device is None:
        return _fgp.ops.kernel_bytes_per_element(d, fused=False)
    return _fgp.bytes_per_element(d, device)


def _solver(f: torch.Tensor, context: SolveContext):
    """Solver for one chunk (module-level so tests can inject out-of-memory failures)."""
    params = context.params
    spacing = context.layout.coupled_spacing
    if params.method == "chambolle":
        return solve_chambolle(
            f,
            context.weight,
            spacing,
            max_iterations=params.max_iterations,
            eps=params.tolerance,
        )
    return solve_fgp(
        f,
        context.weight,
        spacing,
        lo=context.lo,
        max_iterations=params.max_iterations,
        tolerance=params.tolerance,
    )


def _estimating(params: TVParams) -> str | None:
    """What :func:`resolve_weight` is about to estimate from the image, if anything."""
    if params.noise_model == "poisson":
        return "estimating camera gain, offset and read noise" if params.gain is None else None
    return "estimating the noise level" if params.weight is None else None


def _run(
    image: ArrayLike,
    params: TVParams,
    channel: int | None,
    spacing: tuple[float, ...],
    memory_budget: int | None,
    device: Device,
    known_camera: CameraModel | None = None,
) -> Job[TVResult]:
    with torch.no_grad(), device_context(device) as dev:
        low, high = value_range(image)  # refuses NaN and infinity
        message = _estimating(params)
        if message is not None:
            yield Progress(None, message)
        resolved = resolve_weight(image, params, value_range=(low, high), camera=known_camera)
        weight, camera = resolved.weight, resolved.camera
        scale = DataScale.for_data(low, high, image.dtype, camera, "image")
        shape = tuple(int(s) for s in image.shape)
        layout = AxisLayout.of(shape, spacing, channel)  # validated: one coupled axis at least
        out = np.empty(shape, dtype=np.float32)
        context = SolveContext(
            image=image,
            params=params,
            layout=layout,
            weight=scale.weight(weight),
            noise_sigma=resolved.noise_sigma,
            scale=scale,
            camera=camera,
            device=dev,
            out=out,
            solver=_solver,
            bytes_per_element=_bytes_per_element(params.method, len(layout.coupled_axes), dev),
        )
        totals = context.totals
        if context.weight < NEGLIGIBLE_WEIGHT:
            # Too little to move a float32 value (or nothing penalised): f is the solution.
            data = to_device(image, "cpu").numpy()  # NumPy, lazy arrays and tensors alike
            out[...] = np.maximum(data, 0) if params.nonnegative else data
            message = "nothing to solve: with weight 0 the input is its own solution"
            if weight > 0:
                message = "nothing to solve: the weight is negligible next to the data"
            yield Progress(1.0, message)
        else:
            chunker = HaloChunker(
                layout,
                bytes_per_element=context.bytes_per_element,
                device=dev,
                budget=memory_budget,
                what="TV denoising of one chunk",
            )
            with contextlib.suppress(StopAll):  # stopped early: later chunks keep the input
                yield from chunker.run(
                    lambda region: _solve_region(context, region),
                    split=lambda slab: solve_split(context, slab),
                )
        unprocessed = 0.0
        relative_gap = totals.relative_gap
        if totals.stopped:
            left = _fill_unprocessed(image, out, totals.written, params.nonnegative)
            unprocessed = left + totals.unreached / max(1, out.size)
            if left > 0:
                # Untouched problems are their own starting point (y = 0), whose relative gap
                # is at most 1: P(u) - D(0) = weight * TV(u) <= P(u).
                relative_gap = max(relative_gap, 1.0)
        return TVResult(
            image=out,
            params=params,
            weight=weight,
            iterations=totals.iterations,
            relative_gap=relative_gap,
            converged=totals.converged and not totals.stopped,
            spacing=spacing,
            chunks=totals.chunks,
            noise_sigma=resolved.noise_sigma,
            camera=camera,
            stopped_early=totals.stopped,
            unprocessed_fraction=unprocessed,
            kernel_paths=_fgp.kernel_paths(dev) if params.method == "fgp" and totals.chunks else {},
        )


def _fill_unprocessed(
    image: ArrayLike, out: np.ndarray, written: list[tuple[slice, ...]], nonnegative: bool
) -> float:
    """Copy the input (clipped at 0 in non-negative mode) into every part of ``out`` no chunk
    wrote (a run stopped early). Returns the fraction of the voxels left so."""
    mask = np.ones(out.shape, dtype=bool)
    for core in written:
        mask[core] = False
    for index in np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1)):
        plane = mask[index]
        values = to_device(image[int(index)], "cpu").numpy()[plane]
        out[index][plane] = np.maximum(values, 0) if nonnegative else values
    return float(mask.mean())


def _solve_region(context: SolveContext, region: Region) -> Job[None]:
    """Solve a region holding whole problems (every plane of the coupled axes)."""
    f = context.read(region.read)
    result = yield from context.solve(region, f)
    download_into(context.out[region.core], context.to_output(result.image, region))
    totals = context.totals
    totals.written.append(region.core)
    totals.chunks += 1
    totals.add(result.iterations, result.relative_gap, result.converged)
    if result.stopped:
        totals.stopped = True
        raise StopAll
