"""The eSRRF job: one ``(T, Y, X)`` stack (:mod:`._stream`) or the channels of a 4D input
(:mod:`._channels`), and its blocking twin."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..jobs import Job, blocking
from ..signatures import takes_params
from ._channels import ChannelsResult, iter_channels
from ._input import check_frames_per_chunk
from ._params import EsrrfParams
from ._resolution_frc import with_frc
from ._stream import CPU_CHUNK, GPU_CHUNK, OUTPUT, EsrrfResult, iter_stack, output_geometry

# The stack's names stay importable from here, where they were defined before.
__all__ = [
    "CPU_CHUNK",
    "GPU_CHUNK",
    "OUTPUT",
    "EsrrfResult",
    "esrrf",
    "iter_esrrf",
    "output_geometry",
]


@takes_params(EsrrfParams)
def iter_esrrf(
    stack: ArrayLike,
    params: EsrrfParams,
    *,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    drift_shifts: Any = None,
    channel_axis: int | None = None,
    channel_names: tuple[str, ...] | None = None,
    device: str | torch.device | None = None,
) -> Job[EsrrfResult | ChannelsResult]:
    """eSRRF super-resolution as a job that streams the image while it builds up.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames of blinking fluorophores, any real dtype (uint16 camera frames are
        uploaded as uint16 and converted on the device); NumPy, dask, zarr, a memory-mapped TIFF
        or a torch tensor, read chunk by chunk. Never modified. A 4D array holds 2 to 8
        channels, ``(C, T, Y, X)`` (or ``(T, C, Y, X)`` with ``channel_axis=1``): each is
        drift-corrected, registered to channel 0 (``channel_registration``) and reconstructed
        (:func:`~napari_gpuscope.compute.esrrf.iter_channels`; the result is then a
        :class:`~napari_gpuscope.compute.esrrf.ChannelsResult`).
    {params}
    params : EsrrfParams, optional
        All parameters at once (keywords given as well override its fields).
    frames_per_chunk : int, optional
        At most this many frames per device chunk (fewer when device memory is short): the
        job yields after every chunk, so small chunks stream the build-up more smoothly.
        Default: 32 on a GPU, 4 on the CPU.
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory.
    name : str
        How the input is called in error messages.
    drift_shifts : array-like, optional
        A drift trace ``(T, 2)`` (``(dy, dx)`` per frame in input pixels, e.g. loaded with
        :func:`~napari_gpuscope.compute.esrrf.load_drift_trace`) to correct the frames with
        instead of estimating one; given, the frames are corrected whatever
        ``drift_correction`` says. A :class:`~napari_gpuscope.compute.esrrf.DriftResult`
        (an estimate made before, e.g. by the dock's *Estimate drift*) is the result's
        :attr:`EsrrfResult.drift` as it is, with its blocks and parameters: the run records
        the same facts as one that estimated the trace itself with those parameters.
    channel_axis : int, optional
        The channel axis of a 4D ``stack`` (0 when not given); an error for 3D input.
    channel_names : tuple of str, optional
        Names of a 4D ``stack``'s channels (e.g. the layers they came from), in the result's
        layer names; ignored for 3D input.
    device : str or torch.device, optional
        ``None`` = first GPU (raises :class:`~napari_gpuscope.compute.devices.NoGPUError`
        without one); ``"cpu"`` runs the reference path.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` after every frame chunk (with
        drift correction, first the drift estimation's updates, its block shifts as metrics
        ``dy``/``dx``), with the
        lazy output ``"esrrf"``: the running reconstruction of the current time point (one
        plane of the ``(n_timepoints, H M, W M)`` result). Returns an :class:`EsrrfResult`.
        Sending ``STOP`` returns the time points so far (the current one from the frames
        analysed before the stop); during the drift estimate, the estimate finishes its block
        (and a second) and eSRRF reconstructs one chunk of the frames its blocks cover.

    Raises
    ------
    InvalidInputError
        For a stack that is not ``(T, Y, X)``, has fewer than 2 frames, frames too small for
        the radius, NaN or infinity (named by frame), or a time point VAR/TAC2 cannot use.
    ParameterError
        For invalid parameters.
    DeviceMemoryError
        When not even one frame fits in device memory.

    Notes
    -----
    The temporal statistics are accumulated online (exact running formulas, float64), so
    device memory is O(output), whatever the number of frames. With ``drift_correction``
    the drift is estimated over the whole stack first (one more streamed read,
    :func:`~napari_gpuscope.compute.esrrf.estimate_drift` with ``drift_reference``,
    ``drift_time_averaging`` and ``max_drift``), then every frame is moved back by its
    drift on the device (:func:`~napari_gpuscope.compute.esrrf.correct_drift`'s
    interpolation) before eSRRF; the output has the same shape, and the trace is
    :attr:`EsrrfResult.drift`. ``geometry="nanopyx"`` matches
    NanoPyx 2.1.5 ``nanopyx.methods.eSRRF`` (``use_fht=False``); ``"centred"`` puts output
    pixel ``i`` at input pixel ``(i + 0.5) / M - 0.5`` for the intensity and the RGC alike.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute import esrrf
    >>> from napari_gpuscope.compute.jobs import run_job
    >>> stack = np.random.default_rng(0).poisson(50, (4, 16, 16)).astype(np.uint16)
    >>> result = run_job(esrrf.iter_esrrf(stack, magnification=2, device="cpu"))
    >>> result.image.shape
    (1, 32, 32)
    """
    check_frames_per_chunk(frames_per_chunk)
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)  # a nested list: as NumPy reads it
    if len(stack.shape) == 4 or channel_axis is not None:
        return iter_channels(
            stack,
            params,
            channel_axis=0 if channel_axis is None else channel_axis,
            drift_shifts=drift_shifts,
            frames_per_chunk=frames_per_chunk,
            memory_budget=memory_budget,
            name=name,
            channel_names=channel_names,
            device=device,
        )
    job = iter_stack(
        stack,
        params,
        frames_per_chunk=frames_per_chunk,
        memory_budget=memory_budget,
        name=name,
        drift_shifts=drift_shifts,
        device=device,
    )
    if not params.measure_resolution:
        return job
    # The FRC of the even and odd frames, corrected as the run corrects them (the result's
    # trace: the one given, or the one the run estimated).
    return with_frc(
        job,
        stack,
        params,
        device=device,
        frames_per_chunk=frames_per_chunk,
        memory_budget=memory_budget,
    )


esrrf = blocking(iter_esrrf, unwrap=lambda result: result.image)
esrrf.__doc__ = """eSRRF super-resolution; blocking version of :func:`iter_esrrf` (same
parameters).

Returns
-------
numpy.ndarray
    float32 ``(n_timepoints, H M, W M)`` (``(C, n_timepoints, H M, W M)`` of 4D input).

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute import esrrf
>>> stack = np.random.default_rng(0).poisson(50, (4, 16, 16)).astype(np.uint16)
>>> esrrf.esrrf(stack, magnification=3, temporal="VAR", device="cpu").shape
(1, 48, 48)
"""
