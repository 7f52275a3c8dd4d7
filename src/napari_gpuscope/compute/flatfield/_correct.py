"""Apply a shading profile: ``(image - darkfield) / flatfield``, streamed in frame chunks."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError, download_into
from ..devices import device_context
from ..job_parts import scaled
from ..jobs import Job, Progress, blocking
from ..memory import plan_chunk, run_in_chunks
from ._alm import MAX_MU_COEF, MU_COEF, RHO, spectral_norm
from ._fields import prepared_fields
from ._fit import working_stack
from ._params import OUTPUT_DTYPES
from ._profile import ShadingProfile
from ._stack import StackLayout, check_images, read_block, resize_frames, working_shape

__all__ = ["correct", "integer_bounds", "iter_correct", "output_type", "timelapse_baseline"]

BASELINE_PASSES = 5
BASELINE_TOL = 1e-4


def timelapse_baseline(
    stack: torch.Tensor,
    flat: torch.Tensor,
    dark: torch.Tensor,
    *,
    epsilon: float = 0.1,
    max_iterations: int = 500,
    tol: float = BASELINE_TOL,
    passes: int = BASELINE_PASSES,
) -> torch.Tensor:
    """Per-frame background level ``b_n`` with ``flat``/``dark`` fixed (BaSiCPy's
    ``fit_only_baseline``), on the working-size stack ``(P, T, m, n)``; returns ``(P, T)``.

    The fit uses each frame's darkest 10 % of pixels (background), reweighted as BaSiCPy does;
    unlike BaSiCPy the whole stack is fitted at once instead of 100-frame chunks chained
    end to start.
    """
    p_count, t_count = stack.shape[:2]
    quantile = torch.quantile(stack.flatten(2), 0.1, dim=-1)
    mask = stack < quantile[..., None, None]
    weight = torch.where(mask, 1.0, epsilon)
    counts = mask.sum(dim=(-2, -1)).clamp_min(1)
    mu0 = MU_COEF / spectral_norm(stack)
    norm = torch.linalg.vector_norm(stack.flatten(1), dim=1)
    flat4, dark4 = flat[:, None], dark[:, None]
    dark_mean = dark.mean(dim=(-2, -1))[:, None]
    baseline = torch.zeros(p_count, t_count, device=stack.device)
    for _ in range(passes):
        baseline = torch.where(mask, stack, 0.0).sum(dim=(-2, -1)) / counts
        sparse = torch.zeros_like(stack)
        dual = torch.zeros_like(stack)
        mu = mu0.clone()
        for _ in range(max_iterations):
            background = flat4 * baseline[..., None, None] + dark4
            value = stack - background + dual / mu[:, None, None, None]
            sparse = torch.sign(value) * (value.abs() - weight / mu[:, None, None, None]).clamp_min(
                0
            )
            new_baseline = ((stack - sparse).mean(dim=(-2, -1)) - dark_mean).clamp_min(0)
            residual = stack - background - sparse
            dual = dual + mu[:, None, None, None] * residual
            mu = torch.minimum(mu * RHO, mu0 * MAX_MU_COEF)
            baseline = new_baseline
            ratio = torch.linalg.vector_norm(residual.flatten(1), dim=1) / norm
            if bool((ratio <= tol).all()) or not bool(torch.isfinite(ratio).all()):
                break
        relative = sparse / baseline.clamp_min(1e-6)[..., None, None]
        weight = 1.0 / (relative.abs() + 0.1)
        weight = torch.where(mask, weight, weight * epsilon)
        weight = weight / weight.mean(dim=(1, 2, 3), keepdim=True) * mask
    return baseline


def iter_correct(
    images: ArrayLike,
    profile: ShadingProfile,
    *,
    timelapse: bool = False,
    clip: bool = False,
    dtype: str = "float32",
    out: Any = None,
    batch_axis: int | None = None,
    chunk_frames: int | None = None,
    device: str | torch.device | None = None,
) -> Job[np.ndarray]:
    """Correct images with a profile, as a job (frames streamed through the device in chunks).

    ``corrected = (image - darkfield) / flatfield`` (and, with ``timelapse``, minus each
    frame's fitted background level, which removes photobleaching drift and the background).

    Parameters
    ----------
    images : array-like
        ``(T, Y, X)`` or ``(Y, X)``, or 4D with ``batch_axis`` (one profile per problem, or one
        for all); NumPy, memmap, dask, zarr or torch, read chunk by chunk. Never modified.
    profile : ShadingProfile
        Fitted (:func:`fit_basic`) or loaded (:meth:`ShadingProfile.load`).
    timelapse : bool
        Also remove each frame's baseline (BaSiCPy's ``is_timelapse`` transform).
    clip : bool
        Clip negative values at 0.
    dtype : {"float32", "uint16", "same"}
        Output type: float32; uint16 rounds (half to even) and saturates at [0, 65535];
        "same" is the input's type (:func:`output_type`: an integer type rounds and saturates
        at its range, a float type is converted from float32).
    out : array-like, optional
        Where to write (e.g. a ``numpy.memmap`` or zarr array larger than RAM); default a new
        NumPy array.
    batch_axis : int, optional
        4D input: the axis of independent problems.
    chunk_frames : int, optional
        Frames per device chunk (default: planned from free memory). The result does not
        depend on it.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` when named.

    Returns
    -------
    generator
        Yields progress per chunk; returns the corrected array (``out`` when given).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.flatfield import ShadingProfile, correct
    >>> flat = np.full((8, 8), 2.0); flat[:, :4] = 1.0
    >>> profile = ShadingProfile.from_arrays(flat, camera_offset=10)
    >>> images = 10 + 6 * flat[None] / flat.mean() * np.ones((3, 1, 1))
    >>> np.allclose(correct(images, profile, device="cpu"), 6)
    True
    """
    if chunk_frames is not None and chunk_frames < 1:
        raise ValueError(f"chunk_frames must be >= 1, got {chunk_frames}")
    single = getattr(images, "ndim", 0) == 2
    if single:
        if timelapse:
            raise InvalidInputError("timelapse correction needs a stack of frames, got one image")
        images = images[None]
    if getattr(images, "ndim", 0) == 3 and batch_axis is None:
        shape = tuple(int(s) for s in images.shape)
        layout = StackLayout(shape, None)
        if np.dtype(str(images.dtype).replace("torch.", "")).kind not in "uif":
            check_images(images, None)  # raises the dtype error
    else:
        layout = check_images(images, batch_axis)
    frame = tuple(np.shape(profile.flatfield)[-2:])
    if frame != layout.frame_shape:  # said now, not when the job first runs
        raise InvalidInputError(
            f"the profile is {frame} but the images are {layout.frame_shape}: apply a profile "
            "fitted on images of the same size"
        )
    target_dtype = output_type(dtype, images.dtype)
    if out is None:
        out = np.empty(layout.shape, dtype=target_dtype)
    elif tuple(out.shape) != layout.shape:
        raise InvalidInputError(f"out must have the images' shape {layout.shape}, got {out.shape}")
    return _run(
        images, profile, layout, timelapse, clip, target_dtype, out, chunk_frames, device, single
    )


def output_type(dtype: str, input_dtype: Any) -> np.dtype:
    """The NumPy type of a corrected image: ``dtype`` (one of ``OUTPUT_DTYPES``), with
    ``"same"`` resolved to the input's type (NumPy's or torch's ``input_dtype``).

    Examples
    --------
    >>> import numpy as np
    >>> output_type("same", np.dtype("uint8")), output_type("uint16", np.float64)
    (dtype('uint8'), dtype('uint16'))
    """
    if dtype not in OUTPUT_DTYPES:
        raise ValueError(f"dtype must be one of {OUTPUT_DTYPES}, got {dtype!r}")
    if dtype != "same":
        return np.dtype(dtype)
    try:
        same = np.dtype(str(input_dtype).replace("torch.", ""))
    except TypeError:
        raise InvalidInputError(
            f"output type 'same': the input's type {input_dtype} has no NumPy equivalent; "
            "choose float32 or uint16"
        ) from None
    if same.kind not in "uif":
        raise InvalidInputError(f"output type 'same': cannot write a {same} image")
    return same


def integer_bounds(dtype: Any) -> tuple[float, float] | None:
    """Saturation bounds of an integer output type as float32 values (None for a float type).

    The upper bound is the largest float32 not above the type's maximum: a float32 rounded to an
    integer and clamped to it converts exactly (``float32(2**32 - 1)`` would be ``2**32``, which
    a uint32 cannot hold).

    Examples
    --------
    >>> import numpy as np
    >>> integer_bounds(np.uint16), integer_bounds(np.int8), integer_bounds(np.float32)
    ((0.0, 65535.0), (-128.0, 127.0), None)
    >>> integer_bounds(np.uint32)[1]
    4294967040.0
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "ui":
        return None
    info = np.iinfo(dtype)

    def inside(limit: int, toward: float) -> float:
        value = np.float32(limit)
        if not info.min <= int(value) <= info.max:  # rounded out of the range: one step back
            value = np.nextafter(value, np.float32(toward))
        return float(value)

    return inside(info.min, np.inf), inside(info.max, -np.inf)


def _run(
    images, profile, layout, timelapse, clip, target_dtype, out, chunk_frames, device, single
) -> Job[np.ndarray]:
    with torch.no_grad(), device_context(device) as dev:
        flat, dark = prepared_fields(profile, layout.frame_shape, layout.problems, dev)
        baseline = None
        if timelapse:
            shape = working_shape(layout.frame_shape, profile.params.working_size)
            stack = yield from working_stack(images, layout, shape, dev)
            small_flat = resize_frames(flat.contiguous(), shape)
            small_dark = resize_frames(dark.contiguous(), shape)
            yield Progress(0.2, "fitting each frame's baseline (timelapse)")
            baseline = timelapse_baseline(
                stack, small_flat, small_dark, epsilon=profile.params.epsilon
            )
            del stack
        y, x = layout.frame_shape
        if chunk_frames is None:
            chunk_frames = plan_chunk(
                layout.n_frames, 3 * 4 * y * x, dev, what="flat-field correction"
            )
        per_frame = 3 * 4 * y * x  # the frame block, its float32 result and a temporary
        bounds = integer_bounds(target_dtype)

        def process(p: int, start: int, stop: int) -> Job[None]:
            # In place: read_block's tensor is fresh (never the input's memory), and each step
            # is the same operation as a new tensor would get, without a frame-sized allocation.
            block = read_block(images, layout, p, start, stop, dev)
            block.sub_(dark[p]).div_(flat[p])
            if baseline is not None:
                block.sub_(baseline[p, start:stop, None, None])
            if clip:
                block.clamp_min_(0)
            if bounds is not None:  # exact integers inside the type's range: a defined cast
                block.clamp_min_(bounds[0]).round_().clamp_max_(bounds[1])
            _store(out, layout, p, start, stop, block, staged=_stages(dev))
            yield Progress(None, f"corrected frames {start}-{stop - 1}")

        first = 0.2 if timelapse else 0.0
        for p in range(layout.problems):
            span = (1 - first) / layout.problems
            yield from scaled(
                run_in_chunks(
                    layout.n_frames,
                    chunk_frames,
                    lambda start, stop, p=p: process(p, start, stop),
                    device=dev,
                    bytes_per_item=per_frame,
                    what="flat-field correction",
                ),
                first + p * span,
                first + (p + 1) * span,
                "" if layout.problems == 1 else f"problem {p + 1}/{layout.problems}: ",
            )
        return out[0] if single else out


def _stages(device: torch.device) -> bool:
    """Whether results leave ``device`` through pinned staging buffers (a GPU) or are read in
    place (the CPU)."""
    return device.type != "cpu"


def _destination(out: Any, layout, problem: int, start: int, stop: int) -> np.ndarray | None:
    """The part of ``out`` that frames ``start:stop`` of ``problem`` go to, as a NumPy view
    (None when ``out`` is not a NumPy array, e.g. zarr)."""
    if not isinstance(out, np.ndarray):
        return None
    if layout.batch_axis is None:
        return out[start:stop]
    if layout.batch_axis == 0:
        return out[problem, start:stop]
    return out[start:stop, problem]


def _store(
    out: Any, layout, problem: int, start: int, stop: int, block: torch.Tensor, staged: bool
) -> None:
    """Write a corrected float32 block into ``out`` (converted to its dtype on the way).

    From a GPU (``staged``) into an integer NumPy ``out``: converted on the device
    (:func:`device_integers`), then one copy of the output's bytes (half of float32's for
    uint16) into ``out``. Otherwise from a GPU: one DMA per piece into a pinned buffer and one
    host pass from it into ``out`` (:func:`~napari_gpuscope.compute.arrays.download_into`; the
    next piece's DMA overlaps it); into a non-NumPy ``out`` (zarr) the pieces land in one
    float32 host array first. On the CPU: one host pass from the tensor's memory into ``out``.
    """
    destination = _destination(out, layout, problem, start, stop)
    if destination is None:
        host = block.numpy() if not staged else np.empty(tuple(block.shape), np.float32)
        if staged:
            download_into(host, block)
        _write(out, layout, problem, start, stop, host)
        return
    # The device's integers are native-endian: an ``out`` of the other byte order takes the
    # float32 path, which NumPy's assignment converts.
    native = destination.dtype.isnative
    converted = device_integers(block, destination.dtype) if staged and native else None
    if converted is not None:
        bits = np.dtype(str(converted.dtype).removeprefix("torch."))
        torch.from_numpy(destination.view(bits)).copy_(converted)
    elif staged:
        download_into(destination, block)
    else:
        destination[...] = block.numpy()


_SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def device_integers(block: torch.Tensor, dtype: Any) -> torch.Tensor | None:
    """``block``'s values as integers of ``dtype``'s width, converted where ``block`` lies;
    None when ``dtype`` is not an integer type, or is uint64.

    ``block`` holds float32 integers within ``dtype``'s bounds (:func:`integer_bounds`: rounded
    and clamped), so the conversion is exact. An unsigned type's values are given as the signed
    type of its width whose bits they are (a uint16's 40000 is an int16's -25536: NumPy's view
    as uint16 reads 40000 back), made through the next wider signed type, which holds every
    value; torch's unsigned types beyond uint8 are not converted on every device. A uint64's
    upper values fit no signed type: None.

    Examples
    --------
    >>> import numpy as np, torch
    >>> bits = device_integers(torch.tensor([0.0, 40000.0, 65535.0]), np.uint16)
    >>> bits.dtype, bits.numpy().view(np.uint16).tolist()
    (torch.int16, [0, 40000, 65535])
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "ui" or dtype == np.uint64:
        return None
    if dtype.kind == "i":
        return block.to(_SIGNED[dtype.itemsize])
    if dtype == np.uint8:
        return block.to(torch.uint8)
    return block.to(_SIGNED[2 * dtype.itemsize]).to(_SIGNED[dtype.itemsize])


def _write(out: Any, layout, problem: int, start: int, stop: int, block: np.ndarray) -> None:
    if layout.batch_axis is None:
        out[start:stop] = block
    elif layout.batch_axis == 0:
        out[problem, start:stop] = block
    else:
        out[start:stop, problem] = block


correct = blocking(iter_correct)
correct.__doc__ = """Correct images with a shading profile (blocking :func:`iter_correct`).

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.flatfield import ShadingProfile, correct
>>> profile = ShadingProfile.from_arrays(np.ones((4, 4)))
>>> correct(np.full((2, 4, 4), 5.0), profile, device="cpu").dtype
dtype('float32')
"""
