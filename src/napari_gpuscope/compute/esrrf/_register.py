"""Channel registration: the translation (or smooth per-block map) that aligns each channel
with a reference channel, and its application by resampling.

Conventions, as the drift trace's: ``shifts[c] = (dy, dx)`` in pixels means channel ``c`` shows
the reference channel's content moved by ``+shifts[c]`` (``shifts[reference_channel]`` is
``(0, 0)``); :func:`apply_registration` moves channel ``c`` back,
``out_c[y, x] = channel_c[y + dy, x + dx]``, as ``scipy.ndimage.shift(channel_c, -shifts[c])``.

Estimation: each channel's image (the mean over frames for ``(C, T, Y, X)`` input) is
mean-subtracted and tapered at its edges (Tukey window), and cross-correlated with the
reference's by FFT, all channels (or all blocks) in one batch on the device. The integer peak
is refined by an upsampled matrix DFT around it (Guizar-Sicairos et al., Opt. Lett. 2008; a
1/20 px grid) and a parabola through its 3 x 3 maximum; the channel is then moved back by that
estimate and the small residual measured once more, since the window, which stays put while
the content moves, pulls a single measurement towards zero.

``elastic=True`` measures the same on overlapping blocks (``block_size`` pixels, half a block
apart), as NanoPyx's and NanoJ's channel registration do: blocks whose normalised correlation
peak is below ``min_similarity`` take their neighbours' median (or the channel's translation),
the block map is median-filtered (3 x 3) and interpolated bilinearly between block centres to
one ``(dy, dx)`` per pixel.

Resampling is separable Catmull-Rom (cubic convolution, exact for integer shifts); samples
outside the image take the nearest edge pixel.

Modules: the refusals of bad input, options and channels are :mod:`._register_checks`, the shift
estimation :mod:`._register_shifts`, the elastic block map :mod:`._register_blocks` and the
resampling :mod:`._register_sample`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..arrays import InvalidInputError
from ..devices import device_context
from ..params import ParameterError
from ._register_blocks import _block_starts, _blocks, _pixel_fields, _smooth_blocks
from ._register_checks import (
    _as_channel_array,
    _channel_images,
    _check_channels,
    _check_float32_range,
    _check_options,
)
from ._register_sample import _sample
from ._register_shifts import _measure

__all__ = [
    "RegistrationResult",
    "apply_registration",
    "register_channels",
]

_CHUNK_PIXELS = 1 << 24  # pixels resampled at once by apply_registration (64 MB of float32)


@dataclass(frozen=True)
class RegistrationResult:
    """How each channel is displaced relative to the reference channel.

    Attributes
    ----------
    shifts : numpy.ndarray
        float64 ``(C, 2)``: ``(dy, dx)`` of each channel's content relative to the reference
        channel's (``(0, 0)`` for the reference itself).
    reference_channel : int
        Index of the reference channel.
    similarity : numpy.ndarray
        ``(C,)`` normalised cross-correlation at the peak (1: identical up to the shift).
    shape : tuple of int
        ``(Y, X)`` of the registered images.
    elastic : bool
        Whether :attr:`fields` holds a per-pixel map.
    fields : numpy.ndarray or None
        float32 ``(C, 2, Y, X)`` per-pixel ``(dy, dx)`` (elastic only).
    block_shifts : numpy.ndarray or None
        float64 ``(C, 2, n_rows, n_cols)`` smoothed per-block shifts (elastic only).
    block_similarity : numpy.ndarray or None
        ``(C, n_rows, n_cols)`` normalised correlation of each block (elastic only).
    block_centres : tuple of numpy.ndarray or None
        Row and column centres (pixels) of the blocks (elastic only).
    block_size : int or None
        Side of the blocks (elastic only).
    """

    shifts: np.ndarray
    reference_channel: int
    similarity: np.ndarray
    shape: tuple[int, int]
    elastic: bool = False
    fields: np.ndarray | None = None
    block_shifts: np.ndarray | None = None
    block_similarity: np.ndarray | None = None
    block_centres: tuple[np.ndarray, np.ndarray] | None = None
    block_size: int | None = None

    @property
    def n_channels(self) -> int:
        """Number of channels."""
        return int(self.shifts.shape[0])

    def summary(self) -> dict[str, Any]:
        """JSON-able facts (the per-pixel map left out: see :attr:`block_shifts`)."""
        facts: dict[str, Any] = {
            "reference_channel": self.reference_channel,
            "shifts": [[float(v) for v in row] for row in self.shifts],
            "similarity": [float(v) for v in self.similarity],
            "shape": list(self.shape),
            "elastic": self.elastic,
        }
        if self.elastic and self.block_shifts is not None:
            facts["block_size"] = self.block_size
            facts["block_shift_range"] = [
                [float(self.block_shifts[c, k].min()), float(self.block_shifts[c, k].max())]
                for c in range(self.n_channels)
                for k in range(2)
            ]
        return facts

    def describe(self) -> str:
        """One line in plain words."""
        parts = [
            f"channel {c}: dy {dy:+.2f}, dx {dx:+.2f} px"
            for c, (dy, dx) in enumerate(self.shifts)
            if c != self.reference_channel
        ]
        kind = "elastic (per block) registration" if self.elastic else "registration"
        return f"{kind} to channel {self.reference_channel}: " + "; ".join(parts)


def register_channels(
    channels: Any,
    *,
    reference_channel: int = 0,
    elastic: bool = False,
    block_size: int = 64,
    min_similarity: float = 0.5,
    max_shift: float | None = None,
    device: str | torch.device | None = None,
) -> RegistrationResult:
    """Measure how each channel is displaced relative to a reference channel.

    Parameters
    ----------
    channels : array-like or pair of array-likes
        ``(C, Y, X)`` images, ``(C, T, Y, X)`` stacks (each channel's mean over frames is
        registered), or a pair ``(moving, reference)`` of ``(Y, X)`` or ``(T, Y, X)`` arrays of
        one shape (then channel 0 is ``moving``, channel 1 ``reference``, and
        ``reference_channel`` is 1). Not modified.
    reference_channel : int
        The channel the others are aligned to.
    elastic : bool
        Also measure a smooth per-pixel map from overlapping blocks (for chromatic or field
        distortions that a single translation does not remove).
    block_size : int
        Block side in pixels (elastic), at least 16 and at most the image's smaller side.
    min_similarity : float
        Blocks whose normalised correlation peak is below this take their neighbours' shift
        (elastic), in ``[0, 1)``.
    max_shift : float, optional
        Largest shift searched, in pixels per axis; default up to half the image (block).
    device : str or torch.device, optional
        Where the correlations run (default: the first GPU; ``"cpu"`` only when named).

    Returns
    -------
    RegistrationResult

    Raises
    ------
    InvalidInputError
        Channels of different shapes, fewer than two channels, images smaller than 16 pixels,
        NaN or infinity, constant channels.
    ParameterError
        ``reference_channel`` out of range, a bad ``block_size``, ``min_similarity`` or
        ``max_shift``.

    Examples
    --------
    >>> from scipy import ndimage
    >>> rng = np.random.default_rng(0)
    >>> scene = ndimage.gaussian_filter(rng.random((96, 96)), 2.0)
    >>> moved = ndimage.shift(scene, (1.5, -2.25), order=3, mode="nearest")
    >>> result = register_channels(np.stack([scene, moved]), device="cpu")
    >>> bool(np.abs(result.shifts[1] - (1.5, -2.25)).max() < 0.05)
    True
    >>> aligned = apply_registration(np.stack([scene, moved]), result, device="cpu")
    >>> bool(np.abs(aligned[1] - scene)[8:-8, 8:-8].max() < 0.01)
    True
    """
    images, reference_channel = _channel_images(channels, reference_channel)
    n_channels, height, width = images.shape
    _check_options(elastic, block_size, min_similarity, max_shift, (height, width))
    for c in range(n_channels):
        if float(np.ptp(images[c])) == 0.0:
            raise InvalidInputError(
                f"channel {c} is constant: there is nothing to register it by (channels)"
            )
    with torch.no_grad(), device_context(device) as dev:
        data = torch.as_tensor(images, dtype=torch.float32, device=dev)
        reference = data[reference_channel].expand_as(data)
        limit = max_shift if max_shift is not None else None
        shifts, similarity, on_edge, significance = _measure(data, reference, limit, guard=True)
        _check_channels(shifts, similarity, on_edge, significance, reference_channel, limit)
        shifts[reference_channel] = 0.0
        similarity[reference_channel] = 1.0
        if not elastic:
            return RegistrationResult(
                shifts=shifts,
                reference_channel=reference_channel,
                similarity=similarity,
                shape=(height, width),
            )
        rows = _block_starts(height, block_size)
        cols = _block_starts(width, block_size)
        blocks = _blocks(data, rows, cols, block_size)  # (C, R, K, b, b)
        ref_blocks = blocks[reference_channel].expand_as(blocks)
        flat = blocks.reshape(-1, block_size, block_size)
        block_limit = min(limit, block_size / 4) if limit is not None else block_size / 4
        measured, block_similarity, _, _ = _measure(
            flat, ref_blocks.reshape(-1, block_size, block_size), block_limit
        )
        grid = (n_channels, len(rows), len(cols))
        measured = measured.reshape(*grid, 2).transpose(0, 3, 1, 2)  # (C, 2, R, K)
        block_similarity = block_similarity.reshape(grid)
        smoothed = _smooth_blocks(measured, block_similarity, shifts, min_similarity)
        smoothed[reference_channel] = 0.0
        block_similarity[reference_channel] = 1.0
        centres = (rows + block_size / 2 - 0.5, cols + block_size / 2 - 0.5)
        fields = _pixel_fields(smoothed, centres, (height, width))
        return RegistrationResult(
            shifts=shifts,
            reference_channel=reference_channel,
            similarity=similarity,
            shape=(height, width),
            elastic=True,
            fields=fields,
            block_shifts=smoothed,
            block_similarity=block_similarity,
            block_centres=centres,
            block_size=int(block_size),
        )


def apply_registration(
    channels: Any,
    registration: RegistrationResult,
    *,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """Move every channel back onto the reference channel.

    Parameters
    ----------
    channels : array-like
        ``(C, Y, X)`` images or ``(C, T, Y, X)`` stacks (every frame of a channel moves by the
        channel's shift or map), with the ``C``, ``Y`` and ``X`` of ``registration``; or the
        pair ``(moving, reference)`` it was measured on. Not modified.
    registration : RegistrationResult
        From :func:`register_channels`.
    device : str or torch.device, optional
        Where the resampling runs.

    Returns
    -------
    numpy.ndarray
        float32, the shape of ``channels`` (a pair gives ``(2, ...)``):
        ``out[c, ..., y, x] = channels[c, ..., y + dy, x + dx]`` with ``(dy, dx)`` the
        channel's shift (or its map at ``(y, x)``), separable Catmull-Rom, edge pixels
        repeated outside the image; the reference channel is copied unchanged.
    """
    if not isinstance(registration, RegistrationResult):
        raise ParameterError(
            f"registration must be a RegistrationResult, got {type(registration).__name__}"
        )
    data = _as_channel_array(channels)
    if data.shape[0] != registration.n_channels or tuple(data.shape[-2:]) != registration.shape:
        raise InvalidInputError(
            f"channels are {data.shape}; the registration was measured on "
            f"{registration.n_channels} channels of {registration.shape}"
        )
    out = np.empty(data.shape, np.float32)
    height, width = registration.shape
    # Frames go to the device a chunk at a time (a few tens of MB), so a long stack fits.
    chunk = max(1, _CHUNK_PIXELS // (height * width))
    with torch.no_grad(), device_context(device) as dev:
        for c in range(data.shape[0]):
            frames = data[c].reshape(-1, height, width)
            target = out[c].reshape(-1, height, width)
            if c == registration.reference_channel:
                for start in range(0, frames.shape[0], chunk):
                    _check_float32_range(np.asarray(frames[start : start + chunk]), c, start)
                target[...] = frames
                continue
            ys, xs = _positions(registration, c, dev)
            for start in range(0, frames.shape[0], chunk):
                values = np.asarray(frames[start : start + chunk])
                _check_float32_range(values, c, start)
                planes = torch.as_tensor(values.astype(np.float32), device=dev)
                target[start : start + chunk] = _sample(planes, ys, xs).cpu().numpy()
    return out


def _positions(
    registration: RegistrationResult, channel: int, dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H, W)`` float64 positions each output pixel of ``channel`` samples."""
    height, width = registration.shape
    rows = torch.arange(height, device=dev, dtype=torch.float64)[:, None].expand(height, width)
    cols = torch.arange(width, device=dev, dtype=torch.float64)[None, :].expand(height, width)
    if registration.elastic and registration.fields is not None:
        field = torch.as_tensor(registration.fields[channel], device=dev, dtype=torch.float64)
        return rows + field[0], cols + field[1]
    dy, dx = (float(v) for v in registration.shifts[channel])
    return rows + dy, cols + dx
