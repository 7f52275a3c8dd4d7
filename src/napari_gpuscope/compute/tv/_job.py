"""The TV denoising job: input checks, weight from strength, chunks, solver, result.

The result it returns is :class:`~._result.TVResult`.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from .._types import ArrayLike, Device
from ..arrays import download_into, to_device, value_range
from ..camera import CameraModel
from ..chunking import AxisLayout, HaloChunker, Region
from ..devices import device_context
from ..jobs import Job, Progress, blocking
from ..memory import check_budget
from ..signatures import takes_params
from . import _fgp
from ._chambolle import solve_chambolle
from ._context import OUTPUT, SolveContext, StopAll
from ._fgp import solve_fgp
from ._params import TVParams
from ._result import TVResult
from ._scale import NEGLIGIBLE_WEIGHT, DataScale
from ._split import solve_split
from ._weight import check_input, resolve_weight

__all__ = ["OUTPUT", "TVResult", "denoise", "iter_denoise"]


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
