"""The fit job: read and shrink the stack, run the reweighting passes, build the profile.

Its input checks are :mod:`._fit_inputs`, and what it hands on (the lazy outputs of every
pass, the profile) :mod:`._fit_result`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._types import ArrayLike, Device
from ..arrays import InvalidInputError
from ..devices import device_context, resolve_device
from ..jobs import Job, Progress, blocking, is_stop
from ..memory import MemoryRetry
from ..params import ParameterError
from ..signatures import takes_params
from ._alm import auto_smoothness, reweighting_passes
from ._fit_inputs import _check_signal, _check_weight, _dark_frame, broadcast_weight
from ._fit_result import _outputs, _profile
from ._params import BasicParams
from ._profile import ShadingProfile
from ._stack import (
    StackLayout,
    check_images,
    frames_per_read,
    read_block,
    resize_frames,
    working_shape,
)

__all__ = ["OUTPUTS", "broadcast_weight", "fit_basic", "iter_fit_basic", "working_stack"]

OUTPUTS = ("flatfield", "darkfield", "baseline")


def working_stack(
    images: ArrayLike,
    layout: StackLayout,
    shape: tuple[int, int],
    device: torch.device,
    name: str = "images",
) -> Job[torch.Tensor]:
    """The ``(P, T, m, n)`` float32 working-size stack, read a few frames at a time."""
    out = torch.empty(
        (layout.problems, layout.n_frames, *shape), dtype=torch.float32, device=device
    )
    step = frames_per_read(layout)
    total = layout.problems * layout.n_frames
    done = 0
    for problem in range(layout.problems):
        for start in range(0, layout.n_frames, step):
            stop = min(layout.n_frames, start + step)
            block = read_block(images, layout, problem, start, stop, device, name)
            out[problem, start:stop] = resize_frames(block, shape)
            done += stop - start
            yield Progress(0.2 * done / total, f"reading and shrinking images {done}/{total}")
    return out


@takes_params(BasicParams)
def iter_fit_basic(
    images: ArrayLike,
    params: BasicParams,
    *,
    dark_frame: Any = None,
    fitting_weight: Any = None,
    device: str | torch.device | None = None,
) -> Job[ShadingProfile]:
    """Fit a BaSiC shading profile as a job that yields after every reweighting pass.

    Parameters
    ----------
    images : array-like
        ``(T, Y, X)`` tiles or frames (NumPy, memmap, dask, zarr, torch; read a few frames at
        a time), or 4D with ``batch_axis`` naming the axis of independent problems. Never
        modified.
    {params}
    params : BasicParams, optional
        All parameters at once (keywords override its fields).
    dark_frame : array-like, optional
        A measured dark frame ``(Y, X)`` (camera offset image): subtracted before the fit and
        returned as the darkfield. Excludes ``get_darkfield`` and ``camera_offset``.
    fitting_weight : array-like, optional
        The images' shape, or ``(Y, X)`` (one mask for every image, broadcast as napari-basicpy
        does); pixels > 0 are background and used for the fit, others get weight ``epsilon``
        (BaSiCPy's segmentation mask).
    device : str or torch.device, optional
        ``None`` = first GPU (raises ``NoGPUError`` without one); ``"cpu"`` when named.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` with the lazy outputs
        ``"flatfield"``, ``"darkfield"`` (full size) and ``"baseline"`` after every
        reweighting pass, and returns a :class:`ShadingProfile`. Sending ``STOP`` returns the
        profile of the last pass, marked ``stopped_early``.

    Raises
    ------
    InvalidInputError
        One image, NaN or infinity, a 4D input without ``batch_axis``, non-real dtypes.
    ParameterError
        Invalid parameters (the message names the parameter and the valid range).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.flatfield import iter_fit_basic
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> rng = np.random.default_rng(0)
    >>> yy, xx = np.mgrid[:64, :64]
    >>> flat = 1.2 - ((yy - 32) ** 2 + (xx - 32) ** 2) / 3000
    >>> tiles = rng.uniform(100, 300, (30, 1, 1)) * flat * rng.lognormal(0, 0.1, (30, 64, 64))
    >>> profile = run_job(iter_fit_basic(tiles, working_size=64, device="cpu"))
    >>> profile.all_converged, round(float(profile.flatfield.mean()), 3)
    (True, 1.0)
    """
    # batch_axis (a parameter: recipes carry it) names the axis of independent problems of a
    # 4D input; a (T, Y, X) stack is one problem whatever it says (the dock's behaviour).
    batch_axis = params.batch_axis if getattr(images, "ndim", 0) == 4 else None
    layout = check_images(images, batch_axis)
    if params.camera_offset is not None and params.camera_offset < 0:
        # The fit cannot tell: -1e9 lifts the images so far that float32 loses the shading,
        # and the "converged" flatfield was ~1.
        raise ParameterError(
            f"BasicParams.camera_offset={params.camera_offset:g} is negative; a camera offset is "
            "the level a dark image reads (>= 0, in the images' units), or None"
        )
    if dark_frame is not None and (params.get_darkfield or params.camera_offset is not None):
        raise InvalidInputError(
            "dark_frame cannot be combined with get_darkfield=True or camera_offset: pick one "
            "darkfield source"
        )
    if fitting_weight is not None:
        fitting_weight = broadcast_weight(fitting_weight, layout.shape)
    if device is None and isinstance(images, torch.Tensor) and images.is_cuda:
        device = images.device
    return _run_with_retry(images, params, layout, dark_frame, fitting_weight, device)


FIT_STACKS = 8
"""Working-size float32 stacks the fit holds at its peak (the stack, the ALM's sparse, dual and
weight, and about four temporaries of the twin's passes): the memory model of the error."""


def fit_bytes(layout: StackLayout, params: BasicParams) -> int:
    """About how many device bytes a fit of ``layout`` needs at its peak.

    Examples
    --------
    >>> from napari_gpuscope.compute.flatfield._stack import check_images
    >>> import numpy as np
    >>> tiles = np.broadcast_to(np.uint16(0), (1000, 2048, 2048))  # shape only, no memory
    >>> layout = check_images(tiles, None)
    >>> round(fit_bytes(layout, BasicParams()) / 2**20)  # 1000 tiles at 128 x 128
    580
    """
    rows, cols = working_shape(layout.frame_shape, params.working_size)
    stack = layout.problems * layout.n_frames * rows * cols
    return stack * (4 * FIT_STACKS + 1) + 4 * 4 * layout.problems * int(np.prod(layout.frame_shape))


def _run_with_retry(
    images: ArrayLike,
    params: BasicParams,
    layout: StackLayout,
    dark_frame: Any,
    fitting_weight: Any,
    device: Device,
) -> Job[ShadingProfile]:
    """:func:`_run`, tried again from the start after an out-of-memory error (with the failed
    attempt's memory and the device caches freed: the first attempt can fail on memory that
    other work held a moment ago), then a :class:`~napari_gpuscope.compute.memory.
    DeviceMemoryError` saying how much the fit needs. The fit has no smaller chunk to retry
    with: its ALM couples every image, and a smaller working size would change the result."""
    retry = MemoryRetry(resolve_device(device), what="the BaSiC fit")
    for attempt in (1, 2):
        try:
            return (yield from _run(images, params, layout, dark_frame, fitting_weight, device))
        except Exception as exc:
            if not retry.recover(exc):
                raise
            if attempt == 2:
                raise retry.error(fit_bytes(layout, params)) from None
            yield Progress(None, "out of device memory: freed the caches, fitting again")
    raise AssertionError("unreachable")


def _run(
    images: ArrayLike,
    params: BasicParams,
    layout: StackLayout,
    dark_frame: Any,
    fitting_weight: Any,
    device: Device,
) -> Job[ShadingProfile]:
    with torch.no_grad(), device_context(device) as dev:
        frame = layout.frame_shape
        shape = working_shape(frame, params.working_size)
        stack = yield from working_stack(images, layout, shape, dev)
        mask = None
        if fitting_weight is not None:
            mask = torch.empty(stack.shape, dtype=torch.bool, device=dev)
            step = frames_per_read(layout)
            for p in range(layout.problems):
                for start in range(0, layout.n_frames, step):
                    stop = min(layout.n_frames, start + step)
                    block = read_block(
                        fitting_weight, layout, p, start, stop, dev, "fitting_weight"
                    )
                    mask[p, start:stop] = resize_frames(block, shape, "nearest") > 0
            _check_weight(mask)
        source = "none"
        dark_full: torch.Tensor | None = None
        if dark_frame is not None:
            dark_full = _dark_frame(dark_frame, layout, dev)
            source = "frame"
        elif params.camera_offset is not None:
            dark_full = torch.full((layout.problems, *frame), params.camera_offset, device=dev)
            source = "offset"
        elif params.get_darkfield:
            source = "estimated"
        if dark_full is not None:
            stack -= resize_frames(dark_full.contiguous(), shape)[:, None]
        _check_signal(stack, source, params)
        # Automatic smoothness from the unsorted stack (as BaSiCPy).
        if params.smoothness_flatfield is None:
            lam_flat = auto_smoothness(stack)
        else:
            lam_flat = torch.full((layout.problems,), params.smoothness_flatfield, device=dev)
        if params.smoothness_darkfield is None:
            lam_dark = 0.1 * lam_flat
        else:
            lam_dark = torch.full((layout.problems,), params.smoothness_darkfield, device=dev)
        if params.sort_intensity:
            order = torch.argsort(stack, dim=1)
            stack = torch.take_along_dim(stack, order, dim=1)
            if mask is not None:
                mask = torch.take_along_dim(mask, order, dim=1)
        yield Progress(0.2, "fitting: reweighting pass 1", step=0)
        state = None
        passes = reweighting_passes(
            stack,
            lam_flat=lam_flat,
            lam_dark=lam_dark,
            get_darkfield=params.get_darkfield,
            max_iterations=params.max_iterations,
            optimization_tol=params.optimization_tol,
            max_reweight_iterations=params.max_reweight_iterations,
            reweighting_tol=params.reweighting_tol,
            epsilon=params.epsilon,
            fitting_mask=mask,
        )
        stopped = False
        for state in passes:
            n = int(state.passes.max())
            fraction = 0.2 + 0.8 * n / params.max_reweight_iterations
            score = float(state.reweight_score.max())
            change = (
                f"change {score:.2g} (tolerance {params.reweighting_tol:g})"
                if np.isfinite(score)
                else "first pass"
            )
            command = yield Progress(
                min(fraction, 1.0),
                f"reweighting pass {n}: {change}, {int(state.alm_iterations.max())} ALM iterations",
                step=n,
                # The change between passes is the reweighting's residual: it decides convergence.
                metrics={"reweighting residual": score} if np.isfinite(score) else {},
                outputs=_outputs(state, frame, dark_full),
            )
            if is_stop(command):
                stopped = True
                passes.close()
                break
        assert state is not None
        return _profile(
            state, params, layout, frame, shape, dark_full, source, lam_flat, lam_dark, stopped
        )


fit_basic = blocking(iter_fit_basic)
fit_basic.__doc__ = """Fit a BaSiC shading profile (blocking version of :func:`iter_fit_basic`).

Returns
-------
ShadingProfile

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.flatfield import fit_basic
>>> rng = np.random.default_rng(0)
>>> tiles = rng.uniform(50, 150, (20, 1, 1)) * rng.lognormal(0, 0.1, (20, 32, 48))
>>> fit_basic(tiles, max_reweight_iterations=3, device="cpu").flatfield.shape
(32, 48)
"""
