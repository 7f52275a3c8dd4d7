"""The fit job: read and shrink the stack, run the reweighting passes, build the profile."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._types import ArrayLike, Device
from ..arrays import InvalidInputError, to_device, to_host
from ..devices import device_context, resolve_device
from ..jobs import Job, Output, Progress, blocking, is_stop
from ..memory import MemoryRetry
from ..params import ParameterError
from ..signatures import takes_params
from ._alm import auto_smoothness, reweighting_passes
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


def _dark_frame(dark_frame: Any, layout: StackLayout, device: torch.device) -> torch.Tensor:
    dark = to_device(dark_frame, device)
    frame = layout.frame_shape
    if tuple(dark.shape[-2:]) != frame or dark.ndim not in (2, 3):
        raise InvalidInputError(
            f"dark_frame must be (Y, X) = {frame} like the images (or (P, Y, X)), got "
            f"{tuple(dark.shape)}"
        )
    if dark.ndim == 3 and dark.shape[0] != layout.problems:
        raise InvalidInputError(
            f"dark_frame has {dark.shape[0]} planes for {layout.problems} problems"
        )
    if not bool(torch.isfinite(dark).all()):
        raise InvalidInputError("dark_frame contains NaN or infinite values")
    return (
        dark.expand(layout.problems, *frame)
        if dark.ndim == 3
        else dark[None].expand(layout.problems, *frame)
    )


MIN_SIGNAL_FRACTION = 0.05
"""A fit needs a positive mean and at least this fraction of its (dark-subtracted) pixels above
0: data below the dark level, or all zero, has no shading to fit, and the ALM still
"converged" on it to a flatfield of ~1 or NaN. Sparse fluorescence whose background sits at the
camera offset has about half its pixels at or below it, so the rule only catches images (nearly)
entirely below the dark level."""


MAX_INTENSITY = 1e15
"""Largest intensity magnitude the fit accepts: its float32 norms sum squares over the whole
working stack, which overflow from ~1e17 (a 3e38 or 2**61 stack gave a NaN profile). Camera
data stay below 1e7."""


def _check_signal(stack: torch.Tensor, source: str, params: BasicParams) -> None:
    """Refuse problems whose images are (nearly) all at or below the dark level (or zero), and
    intensities beyond :data:`MAX_INTENSITY`."""
    flat = stack.flatten(1)
    positive = (flat > 0).float().mean(dim=1)
    # One read of the device for every criterion: the worst problem's fraction (-1 when a
    # problem's mean is not positive) and the largest magnitude.
    worst = torch.where(flat.mean(dim=1) > 0, positive, torch.full_like(positive, -1.0))
    low, high = torch.aminmax(flat)
    fraction, largest = torch.stack((worst.min(), torch.maximum(-low, high))).tolist()
    if not largest <= MAX_INTENSITY:
        if not math.isfinite(largest):
            raise InvalidInputError(
                "images hold values beyond float32's range; divide them by a constant first"
            )
        divisor = 10 ** math.ceil(math.log10(largest / 1e6))
        raise InvalidInputError(
            f"images hold values up to {largest:.3g}; the fit accepts intensities up to "
            f"{MAX_INTENSITY:.0e} in magnitude (float32 sums of their squares overflow beyond). "
            f"Divide the images by a constant (e.g. {divisor:.0e}) first: the flatfield does not "
            "depend on it"
        )
    if fraction >= MIN_SIGNAL_FRACTION:
        return
    problem = int(worst.argmin())
    where = f" (problem {problem})" if stack.shape[0] > 1 else ""
    percent = f"{100 * float(positive[problem]):.0f} %"
    if source == "none":
        raise InvalidInputError(
            f"images{where}: {percent} of the pixels are above 0 and their mean is not "
            "positive (all zero, or negative); there is no signal to fit a shading profile to"
            if fraction < 0
            else f"images{where}: only {percent} of the pixels are above 0 (all zero, or "
            "negative); there is no signal to fit a shading profile to"
        )
    dark = "the dark_frame" if source == "frame" else f"camera_offset={params.camera_offset:g}"
    raise InvalidInputError(
        f"images{where}: {percent} of the pixels are above the dark level of {dark}"
        f"{', and their mean is below it' if fraction < 0 else ''}; the images must be "
        "brighter than the dark level. Check the offset (it is in the images' units, e.g. ADU) "
        "or the dark frame"
    )


def _check_weight(mask: torch.Tensor) -> None:
    """Refuse a fitting weight that marks no background pixel in some problem."""
    empty = ~mask.flatten(1).any(dim=1)
    if bool(empty.any()):
        problem = int(torch.nonzero(empty)[0, 0])
        where = f" for problem {problem}" if mask.shape[0] > 1 else ""
        raise InvalidInputError(
            f"fitting_weight has no pixel > 0{where}: pixels > 0 mark the background the fit "
            "uses, so an all-zero or negative weight would fit nothing (omit it to use every "
            "pixel)"
        )


def broadcast_weight(weight: Any, shape: tuple[int, ...], name: str = "fitting_weight") -> Any:
    """``weight`` at the images' ``shape``: as given, or a ``(Y, X)`` mask broadcast to every
    image (napari-basicpy's ``np.broadcast_to`` of a 2D mask); anything else is refused with a
    message naming ``name`` and the shapes that would do.

    Examples
    --------
    >>> import numpy as np
    >>> broadcast_weight(np.ones((4, 5)), (3, 4, 5)).shape
    (3, 4, 5)
    >>> broadcast_weight(np.ones((4, 4)), (3, 4, 5), name="fitting_weight 'cells'")
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.arrays.InvalidInputError: fitting_weight 'cells' has shape (4, 4); ...
    """
    got = tuple(int(n) for n in weight.shape)
    shape = tuple(int(n) for n in shape)
    if got == shape:
        return weight
    if got == shape[-2:]:
        if isinstance(weight, torch.Tensor):
            return weight.expand(shape)
        return np.broadcast_to(np.asarray(weight), shape)
    raise InvalidInputError(
        f"{name} has shape {got}; a mask must be (Y, X) = {shape[-2:]} (one mask for every "
        f"image) or the images' shape {shape}"
    )


def _upsample(small: torch.Tensor, frame: tuple[int, int]) -> torch.Tensor:
    if tuple(small.shape[-2:]) == tuple(frame):
        return small
    return F.interpolate(small[:, None], size=frame, mode="bilinear", align_corners=True)[:, 0]


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


def _full_fields(state, frame, dark_full) -> tuple[torch.Tensor, torch.Tensor]:
    flat = _upsample(state.flatfield, frame)
    dark = dark_full if dark_full is not None else _upsample(state.darkfield, frame)
    return flat, dark


def _outputs(state, frame, dark_full) -> dict[str, Output]:
    def flat():
        return _squeeze(to_host(_upsample(state.flatfield, frame)))

    def dark():
        return _squeeze(to_host(_full_fields(state, frame, dark_full)[1]))

    def base():
        return _squeeze(to_host(state.baseline))

    return {"flatfield": Output(flat), "darkfield": Output(dark), "baseline": Output(base)}


def _squeeze(array: np.ndarray) -> np.ndarray:
    return array[0] if array.shape[0] == 1 else array


def _profile(
    state, params, layout, frame, shape, dark_full, source, lam_flat, lam_dark, stopped
) -> ShadingProfile:
    flat, dark = _full_fields(state, frame, dark_full)
    if source == "none":
        dark = torch.zeros_like(flat)
    residual = state.alm_residual
    flat_ok = torch.isfinite(state.flatfield).flatten(1).all(dim=1)
    converged = (
        (state.reweight_score <= params.reweighting_tol)
        & (residual <= params.optimization_tol)
        & torch.isfinite(residual)
        & flat_ok
    )
    if params.max_reweight_iterations == 1:  # one pass: nothing to compare; the ALM decides
        converged = (residual <= params.optimization_tol) & flat_ok
    converged = converged & ~torch.tensor(stopped, device=converged.device)
    if not bool(flat_ok.all()):  # never handed on, even flagged as not converged
        used = ", ".join(f"{float(v):.3g}" for v in lam_flat.cpu())
        if params.smoothness_flatfield is not None:
            raise ParameterError(
                f"smoothness_flatfield={params.smoothness_flatfield:g} is too strong for these "
                "images: the fit shrank the whole flatfield away (no finite profile is left); "
                "lower it, or leave it automatic (None)"
            )
        raise InvalidInputError(
            "the images do not follow BaSiC's model (intensity = flatfield x baseline + "
            f"darkfield, with a positive mean): the fit, at smoothness {used}, left no finite "
            "flatfield. Their mean is too close to zero for their spread (a camera "
            "offset subtracted twice?): fit the raw images and give camera_offset instead"
        )
    return ShadingProfile(
        flatfield=_squeeze(to_host(flat).astype(np.float32)),
        darkfield=_squeeze(to_host(dark.contiguous()).astype(np.float32)),
        baseline=_squeeze(to_host(state.baseline).astype(np.float32)),
        params=params,
        smoothness_flatfield=tuple(float(v) for v in lam_flat.cpu()),
        smoothness_darkfield=tuple(float(v) for v in lam_dark.cpu())
        if source == "estimated"
        else (),
        darkfield_source=source,
        converged=tuple(bool(v) for v in converged.cpu()),
        reweight_passes=tuple(int(v) for v in state.passes.cpu()),
        alm_iterations=tuple(int(v) for v in state.alm_iterations.cpu()),
        alm_residual=tuple(float(v) for v in residual.cpu()),
        reweight_score=tuple(float(v) for v in state.reweight_score.cpu()),
        offset=tuple(float(v) for v in state.offset.cpu()),
        working_shape=shape,
        stopped_early=stopped,
        batch_axis=layout.batch_axis,
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
