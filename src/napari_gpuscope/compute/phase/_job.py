"""The phase jobs: reconstruction (with a manual, estimated or given tilt) and tilt estimation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..arrays import InvalidInputError, download_into, to_device, validate_image
from ..devices import device_context
from ..job_parts import mapped
from ..jobs import Job, Output, Progress, blocking
from ..memory import check_budget
from ..params import ParameterError
from ..signatures import takes_params
from . import _ops
from ._estimate import TiltResult, estimate_on_device, tilt_grid
from ._optics import OpticsCache, shared_cache
from ._params import PhaseParams
from ._reconstruct import Reconstructor
from ._result import PhaseResult
from ._tiles import TiltMap

__all__ = [
    "OUTPUTS",
    "PhaseResult",
    "azimuth_from_waveorder",
    "azimuth_to_waveorder",
    "estimate_tilt",
    "iter_estimate_tilt",
    "iter_reconstruct",
    "reconstruct",
]

OUTPUTS = ("phase", "absorption", "tilt")
"""Keyed outputs of :func:`iter_reconstruct` (the dock streams them in this order)."""
MIN_SLICES = 3
LAYOUTS = ("ZYX",)
"""The axis layouts the phase job accepts: one z-stack through focus."""


def azimuth_from_waveorder(azimuth: float) -> float:
    """Our azimuth of a tilt that waveorder 3.0.5 fitted (or that an OPS calibration gives).

    waveorder's inverse filter is the conjugate of the least-squares inverse of its own forward
    model, so its optimiser lands at azimuth + pi of the forward-model tilt. Returns
    ``azimuth - pi`` in ``[0, 2 pi)``.

    Examples
    --------
    >>> round(azimuth_from_waveorder(4.1416), 4)
    1.0
    """
    return (float(azimuth) - math.pi) % (2 * math.pi)


def azimuth_to_waveorder(azimuth: float) -> float:
    """The azimuth to give waveorder 3.0.5 so that it reconstructs like we do at ``azimuth``.

    Examples
    --------
    >>> round(azimuth_to_waveorder(1.0), 4)
    4.1416
    """
    return (float(azimuth) + math.pi) % (2 * math.pi)


def _check_stack(zyx: Any, params: PhaseParams) -> None:
    validate_image(zyx, name="z-stack", layouts=LAYOUTS, check_values=False)
    if zyx.shape[0] < MIN_SLICES:
        raise InvalidInputError(
            f"z-stack has {zyx.shape[0]} slice(s); phase from defocus needs at least "
            f"{MIN_SLICES} slices through focus (shape (Z, Y, X), Z >= 3)"
        )
    if zyx.shape[1] < 8 or zyx.shape[2] < 8:
        raise InvalidInputError(
            f"z-stack slices are {zyx.shape[1]} x {zyx.shape[2]} pixels; at least 8 x 8 needed"
        )
    slices = int(zyx.shape[0])
    # The focal plane may lie outside the stack (a one-sided defocus series still carries
    # phase), but not further from the middle slice than the stack is long: a focus 1000 slices
    # away on a 5-slice stack is a typo, whose result looked valid.
    if abs(params.z_focus_offset) > slices - 1:
        raise ParameterError(
            f"PhaseParams.z_focus_offset={params.z_focus_offset:g} slices puts the focal plane "
            f"{abs(params.z_focus_offset):g} slices from the middle of a {slices}-slice stack; "
            f"use a value in [-{slices - 1}, {slices - 1}] (0 = the middle slice is in focus)"
        )


_RESCALE_ABOVE = 2.0**100
"""Stacks brighter than this are multiplied by ``2**-100`` on loading: a slice's float32 sum
overflows from ~2e34 per pixel (a 128 x 128 slice), and the contrast ``I / mean(I)`` then
collapsed to 0 (phase 0, absorption -0.5, no error). The contrast does not depend on the scale,
and a power of two changes no bit of it."""


def _load(zyx: Any, device: torch.device) -> torch.Tensor:
    data = to_device(zyx, device)
    # The checks come back in one small copy: each read of a device value waits for the device.
    _, peak = torch.aminmax(data)
    non_finite, dark, bright = torch.stack(
        (~torch.isfinite(data).all(), (data.mean(dim=(-2, -1)) <= 0).any(), peak > _RESCALE_ABOVE)
    ).tolist()
    if non_finite:
        raise InvalidInputError("z-stack contains NaN or infinite values")
    if bright:
        # In place on our own copy; a new tensor when the input itself is on the device.
        data = data * (1.0 / _RESCALE_ABOVE) if data is zyx else data.mul_(1.0 / _RESCALE_ABOVE)
        dark = bool((data.mean(dim=(-2, -1)) <= 0).any())
    if dark:
        raise InvalidInputError(
            "z-stack has a slice with a non-positive mean: expected brightfield intensities "
            "(the background must be positive)"
        )
    return data


def download(tensor: torch.Tensor) -> np.ndarray:
    """A new float32 host array of ``tensor`` (from a GPU through pinned staging buffers)."""
    out = np.empty(tuple(tensor.shape), dtype=np.float32)
    download_into(out, tensor)
    return out


@takes_params(PhaseParams)
def iter_reconstruct(
    zyx: Any,
    params: PhaseParams,
    *,
    tilt_map: TiltMap | None = None,
    optics_cache: OpticsCache | None = None,
    memory_budget: int | None = None,
    device: str | torch.device | None = None,
) -> Job[PhaseResult]:
    """Tilt-corrected quantitative phase from a brightfield z-stack, as a job.

    Parameters
    ----------
    zyx : array-like
        ``(Z, Y, X)`` brightfield intensities through focus (Z >= 3), slice order as
        ``z_order`` says. Never modified.
    {params}
    params : PhaseParams, optional
        All parameters at once (keywords given as well override its fields).
    tilt_map : TiltMap, optional
        Use this tilt (per tile, blended) instead of ``tilt_mode``.
    optics_cache : OpticsCache, optional
        Device optics to reuse between calls; default: this process's cache of the device
        (:func:`~napari_gpuscope.compute.phase._optics.shared_cache`, keyed by the optics), so
        a second reconstruction with the same optics builds none of them again.
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory (slices are processed in chunks
        that fit; the result is the same).
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` only when named.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` (outputs ``"phase"``, and
        ``"tilt"`` vectors while estimating; the loss as ``metrics={"tilt objective"}`` per
        optimiser iteration) and returns a :class:`PhaseResult`. ``STOP`` during a tilt
        estimate keeps the best tilt so far and reconstructs with it.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute import phase
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> p = phase.PhaseParams(wavelength=0.45, yx_pixel_size=0.325, z_pixel_size=1.0,
    ...                       na_illumination=0.4, na_detection=0.55, index_of_refraction=1.0)
    >>> truth = np.zeros((32, 32), np.float32); truth[12:20, 12:20] = 0.5
    >>> stack = phase.simulate_stack(truth, 0 * truth, p, 7)
    >>> result = run_job(phase.iter_reconstruct(stack, params=p, device="cpu"))
    >>> bool(np.corrcoef(result.phase.ravel(), truth.ravel())[0, 1] > 0.9)
    True
    """
    _check_stack(zyx, params)
    memory_budget = check_budget(memory_budget)
    return _run(zyx, params, tilt_map, optics_cache, memory_budget, device)


def _run(zyx, params, tilt_map, optics_cache, memory_budget, device) -> Job[PhaseResult]:
    with device_context(device) as dev:
        data = _load(zyx, dev)
        shape = tuple(data.shape[-2:])
        estimate = None
        if tilt_map is None and params.tilt_mode in ("global", "tiles"):
            grid = tilt_grid(shape, params)
            estimate = yield from mapped(
                estimate_on_device(data, _tilt_params(params), grid, memory_budget=memory_budget),
                lambda update: update,
            )
            tilt_map = estimate.tilt_map
        elif tilt_map is None:
            grid = tilt_grid(shape, params)
            manual = params.tilt_mode == "manual"
            tilt_map = TiltMap.uniform(
                grid,
                params.tilt_zenith if manual else 0.0,
                params.tilt_azimuth if manual else 0.0,
            )
        elif tilt_map.grid.shape != shape:
            raise InvalidInputError(
                f"tilt_map covers {tilt_map.grid.shape}; the z-stack slices are {shape}"
            )
        with torch.no_grad():
            cache = shared_cache(dev) if optics_cache is None else optics_cache
            recon = Reconstructor(data, params, cache, memory_budget)
            if tilt_map.grid.count == 1:
                yield Progress(0.0, "reconstructing")
                absorption, phase = recon.whole(
                    tilt_map.zenith.item(), tilt_map.azimuth.item(), tilt_map.focus.item()
                )
            else:
                count = tilt_map.grid.count
                for index, done in recon.tiles(tilt_map):
                    if done is not None:
                        absorption, phase = done
                        break
                    yield Progress((index + 1) / count, f"tile {index + 1}/{count}", step=index + 1)
            final = download(phase)
            yield Progress(
                1.0,
                "reconstructed",
                outputs={
                    "phase": Output(final),
                    "tilt": Output(tilt_map.vectors(), kind="vectors"),
                },
            )
        return PhaseResult(
            phase=final,
            absorption=download(absorption),
            params=params,
            tilt_map=tilt_map,
            estimate=estimate,
            stopped_early=bool(estimate and estimate.stopped_early),
            kernel_paths=_ops.kernel_paths(dev),
            chunks=recon.chunks,
            regularization_chosen=recon.chosen_regularization,
            tv_choice=recon.tv_choice,
        )


@takes_params(PhaseParams)
def iter_estimate_tilt(
    zyx: Any,
    params: PhaseParams,
    *,
    tiles: tuple[int, int] | None = None,
    init: TiltMap | None = None,
    memory_budget: int | None = None,
    device: str | torch.device | None = None,
) -> Job[TiltResult]:
    """Estimate the illumination tilt (per tile or global) from a brightfield z-stack, as a job.

    Parameters
    ----------
    zyx : array-like
        ``(Z, Y, X)`` brightfield stack (Z >= 3).
    {params}
    params : PhaseParams, optional
        All parameters at once.
    tiles : tuple of int, optional
        Tile rows and columns of the map; default: ``(tiles_y, tiles_x)`` when
        ``tilt_mode="tiles"``, else one global tilt.
    init : TiltMap, optional
        Warm start (same grid, or a global map); e.g. a previous field's map, or
        :func:`radial_zenith_init` values for a well.
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory (tiles are optimised in groups
        that fit; each tile's estimate is the same).
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` only when named.

    Returns
    -------
    generator
        Yields one :class:`~napari_gpuscope.compute.jobs.Progress` per iteration (indeterminate;
        the loss as ``metrics={"tilt objective"}``, outputs ``"tilt"`` vectors and the current
        ``"phase"``) and returns a :class:`TiltResult`; ``STOP`` keeps the best values so far.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute import phase
    >>> p = phase.PhaseParams(wavelength=0.45, yx_pixel_size=0.325, z_pixel_size=1.0,
    ...                       na_illumination=0.4, na_detection=0.55, index_of_refraction=1.0,
    ...                       iterations=3)
    >>> stack = phase.simulate_stack(np.zeros((32, 32)), np.zeros((32, 32)), p, 5)
    >>> phase.estimate_tilt(stack, params=p, device="cpu").iterations
    3
    """
    _check_stack(zyx, params)
    memory_budget = check_budget(memory_budget)
    return _estimate(zyx, params, tiles, init, memory_budget, device)


def _estimate(zyx, params, tiles, init, memory_budget, device) -> Job[TiltResult]:
    with device_context(device) as dev:
        data = _load(zyx, dev)
        grid = tilt_grid(tuple(data.shape[-2:]), params, tiles)
        return (
            yield from estimate_on_device(data, _tilt_params(params), grid, init, memory_budget)
        )


def _tilt_params(params: PhaseParams) -> PhaseParams:
    """The params of the tilt estimate: an automatic regularization is fixed at
    :attr:`~PhaseParams.tilt_regularization` (the loss is evaluated at every step)."""
    if params.regularization is None:
        return params.replace(regularization=params.tilt_regularization)
    return params


reconstruct = blocking(iter_reconstruct)
reconstruct.__doc__ = """Tilt-corrected phase from a brightfield z-stack; blocking version of
:func:`iter_reconstruct` (same parameters). Returns a :class:`PhaseResult`.

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute import phase
>>> stack = np.ones((5, 32, 32), np.float32)
>>> phase.reconstruct(stack, wavelength=0.45, yx_pixel_size=0.325, z_pixel_size=1.0,
...                   na_illumination=0.4, na_detection=0.55, index_of_refraction=1.0,
...                   device="cpu").phase.shape
(32, 32)
"""
estimate_tilt = blocking(iter_estimate_tilt)
estimate_tilt.__doc__ = """Estimate the illumination tilt; blocking version of
:func:`iter_estimate_tilt` (same parameters). Returns a :class:`TiltResult`."""
