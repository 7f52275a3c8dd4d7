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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import ndimage

from ..arrays import InvalidInputError, validate_image
from ..devices import device_context
from ..params import ParameterError
from ._resample import catmull_rom_weights, tukey_window

__all__ = [
    "RegistrationResult",
    "apply_registration",
    "register_channels",
]

UPSAMPLING = 20
"""Sub-pixel grid of the peak refinement: 1/20 px, then a parabola through its maximum."""

MIN_SIDE = 16
"""Smallest image (or block) side a correlation is computed on."""

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


# ------------------------------------------------------------------------------- checks
def _as_channel_array(channels: Any) -> np.ndarray:
    if isinstance(channels, (tuple, list)):
        if len(channels) != 2:
            raise InvalidInputError(
                f"channels as a sequence must be a pair (moving, reference), got {len(channels)}"
            )
        moving, reference = channels
        for name, item in (("moving", moving), ("reference", reference)):
            validate_image(item, name=f"the {name} channel", min_ndim=2, max_ndim=3)
        if tuple(np.shape(moving)) != tuple(np.shape(reference)):
            raise InvalidInputError(
                f"channels of different shapes: moving {tuple(np.shape(moving))}, reference "
                f"{tuple(np.shape(reference))}; register channels of one shape (crop or "
                "resample one first)"
            )
        return np.stack([np.asarray(moving), np.asarray(reference)])
    validate_image(channels, name="channels", min_ndim=3, max_ndim=4)
    return np.asarray(channels)


def _channel_images(channels: Any, reference_channel: int) -> tuple[np.ndarray, int]:
    pair = isinstance(channels, (tuple, list))
    data = _as_channel_array(channels)
    if pair:
        reference_channel = 1
    if data.shape[0] < 2:
        raise InvalidInputError(
            f"channels has {data.shape[0]} channel(s) {data.shape}; registration needs at "
            "least two (axis 0 is the channel axis)"
        )
    if isinstance(reference_channel, bool) or not isinstance(reference_channel, (int, np.integer)):
        raise ParameterError(f"reference_channel must be an integer, got {reference_channel!r}")
    if not 0 <= reference_channel < data.shape[0]:
        raise ParameterError(
            f"reference_channel must lie within [0, {data.shape[0] - 1}] (the channels), got "
            f"{reference_channel}"
        )
    # (The mean accumulates in float64 without a float64 copy of the stack.)
    images = data.astype(np.float64) if data.ndim == 3 else data.mean(axis=1, dtype=np.float64)
    # Each channel scaled by a power of two to a largest magnitude in [0.5, 1): shifts do not
    # depend on scale, and values near float32's limits would overflow the spectra.
    for c in range(images.shape[0]):
        largest = float(np.abs(images[c]).max())
        if largest > 0:
            images[c] = np.ldexp(images[c], -math.frexp(largest)[1])
    if min(images.shape[1:]) < MIN_SIDE:
        raise InvalidInputError(
            f"channels are {images.shape[1:]} pixels; registration needs at least "
            f"{MIN_SIDE} x {MIN_SIDE}"
        )
    return images.astype(np.float32), int(reference_channel)


def _check_options(
    elastic: bool,
    block_size: int,
    min_similarity: float,
    max_shift: float | None,
    shape: tuple[int, int],
) -> None:
    if max_shift is not None and not (
        isinstance(max_shift, (int, float)) and math.isfinite(max_shift) and max_shift > 0
    ):
        raise ParameterError(f"max_shift must be a positive number of pixels, got {max_shift!r}")
    if not elastic:
        return
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise ParameterError(f"block_size must be an integer number of pixels, got {block_size!r}")
    if not MIN_SIDE <= block_size <= min(shape):
        raise ParameterError(
            f"block_size must lie within [{MIN_SIDE}, {min(shape)}] (the image's smaller "
            f"side), got {block_size}"
        )
    if not (isinstance(min_similarity, (int, float)) and 0.0 <= min_similarity < 1.0):
        raise ParameterError(f"min_similarity must lie within [0, 1), got {min_similarity!r}")


# --------------------------------------------------------------------------- estimation
_FLOAT32_HEADROOM = float(np.finfo(np.float32).max) / 2
"""Largest magnitude resampled: the float32 result holds up to 3.4e38, and Catmull-Rom's
overshoot (at most 1/4 of a step between neighbours) stays within twice the input's."""


def _check_float32_range(values: np.ndarray, channel: int, start: int) -> None:
    """Refuse values the float32 resampling would turn into infinity (e.g. float64 near
    1e300): a clear error, not a result of +-inf."""
    if values.dtype.kind not in "fiu" or values.size == 0:
        return
    peak = float(np.abs(values).max())
    if peak > _FLOAT32_HEADROOM:
        raise InvalidInputError(
            f"channel {channel} (frames from {start}) holds values up to {peak:.3g}; the "
            f"registered channels are float32 (at most {_FLOAT32_HEADROOM:.3g} after "
            "resampling): divide the data by a power of two first"
        )


def _spectra(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """complex128 FFTs of the windowed, mean-subtracted ``(B, H, W)`` images, and their
    energies (for the normalised correlation)."""
    height, width = images.shape[-2:]
    dev = images.device
    window = tukey_window(height, dev)[:, None] * tukey_window(width, dev)[None, :]
    x = images.to(torch.float64)
    x = (x - x.mean(dim=(-2, -1), keepdim=True)) * window
    return torch.fft.fft2(x), (x * x).sum(dim=(-2, -1))


def _measure(
    moving: torch.Tensor, reference: torch.Tensor, limit: float | None, *, guard: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(B, 2)`` shifts of ``moving`` relative to ``reference``, ``(B,)`` similarities,
    whether the integer peak lies on the edge of the ``limit`` search window, and the peak's
    significance (:func:`_significance`): a first estimate, then the residual after moving
    back by it (see the module notes)."""
    first, similarity, on_edge, significance = _peaks(moving, reference, limit, guard=guard)
    table = torch.as_tensor(first, dtype=torch.float64, device=moving.device)
    back = _shift_batch(moving.to(torch.float32), table)
    residual, _, _, _ = _peaks(back, reference, 2.0)
    return first + residual, similarity, on_edge, significance


_FALSE_PEAK_PROBABILITY = 1e-3
"""Chance that a channel without structure in common with the reference passes
:func:`_significance` (as the drift estimate's)."""


def _null_spread(f_moving: torch.Tensor, f_reference: torch.Tensor) -> torch.Tensor:
    """``(B,)`` standard deviation of the cross-correlation, at any lag, of two independent
    images with these (windowed) spectra: Bartlett's formula, the variance of
    ``sum_x a(x) b(x + s)`` is ``sum_t c_a(t) c_b(t)`` times the pixels, i.e. (Parseval)
    ``sum_k |A_k|^2 |B_k|^2 / N^2`` of the spectra, times ``sum w^4 / (sum w^2)^2 N`` for
    the edge taper ``w`` (1 without one). It keeps each image's own smoothness and
    structure, which the surface's median absolute deviation mistook for noise (a 32 x 32 px
    filament pair of similarity 0.88 was refused)."""
    height, width = f_moving.shape[-2:]
    dev = f_moving.device
    window = tukey_window(height, dev)[:, None] * tukey_window(width, dev)[None, :]
    w2 = (window.to(torch.float64) ** 2).sum()
    w4 = (window.to(torch.float64) ** 4).sum()
    n = height * width
    power = (f_moving.abs() ** 2 * f_reference.abs() ** 2).sum(dim=(-2, -1)) / n
    return torch.sqrt(power * (w4 / w2**2))


def _significance(
    surface: torch.Tensor, best: torch.Tensor, searched: int, spread: torch.Tensor
) -> np.ndarray:
    """``(B,)`` height of each correlation peak above its surface's median, in units of the
    height pure noise reaches over the ``searched`` lags with probability
    :data:`_FALSE_PEAK_PROBABILITY`: the correlation of unrelated images is, lag by lag,
    roughly Gaussian with the spread of :func:`_null_spread`, and the highest of ``N`` such
    values exceeds ``Q^-1(p / N)`` of them with probability at most ``p`` (Bonferroni).
    ``>= 1``: a real peak."""
    from scipy.special import ndtri

    flat = surface.reshape(surface.shape[0], -1)
    centre = flat.median(dim=1).values
    height = best - centre
    threshold = float(-ndtri(_FALSE_PEAK_PROBABILITY / max(searched, 1)))
    scale = torch.maximum(centre.abs(), best.abs()).clamp(min=1e-300)
    ratio = height / (spread * threshold).clamp(min=1e-300)
    ratio = torch.where(height > 1e-9 * scale, ratio, torch.zeros_like(ratio))
    ratio = torch.where(spread <= 1e-12 * scale, torch.where(height > 0, math.inf, 0.0), ratio)
    return ratio.cpu().numpy()


def _check_channels(
    shifts: np.ndarray,
    similarity: np.ndarray,
    on_edge: np.ndarray,
    significance: np.ndarray,
    reference_channel: int,
    limit: float | None,
) -> None:
    """Refuse a channel whose correlation with the reference has no peak above the noise, or
    whose peak lies on the edge of the ``max_shift`` window or beyond it (the true shift is
    larger: a shift within the window would be a wrong one)."""
    for c in range(len(shifts)):
        if c == reference_channel:
            continue
        where = f"dy {shifts[c, 0]:+.2f}, dx {shifts[c, 1]:+.2f} px"
        if limit is not None and (on_edge[c] or np.abs(shifts[c]).max() > limit):
            raise InvalidInputError(
                f"channel {c} correlates best with channel {reference_channel} at the edge "
                f"of max_shift={limit:g} px or beyond it ({where}, similarity "
                f"{similarity[c]:.2f}): its shift is larger; raise max_shift (or None)"
            )
        if not significance[c] >= 1.0:
            raise InvalidInputError(
                f"channel {c} has no structure in common with channel {reference_channel}"
                + (f" within max_shift={limit:g} px" if limit is not None else "")
                + f": its correlation peak ({where}, similarity {similarity[c]:.2f}) is "
                f"{significance[c]:.2f} x the height noise alone reaches (needs >= 1); "
                "there is no shift to measure"
            )


def _peaks(
    moving: torch.Tensor, reference: torch.Tensor, limit: float | None, *, guard: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shifts, similarities, edge flags and significances (see :func:`_measure`). With
    ``guard``, one pixel beyond ``limit`` is searched too, so a peak there (or on that ring)
    tells that the shift exceeds ``limit`` (``on_edge``)."""
    height, width = moving.shape[-2:]
    f_moving, e_moving = _spectra(moving)
    f_reference, e_reference = _spectra(reference)
    cross = f_moving * f_reference.conj()
    surface = torch.fft.fftshift(torch.fft.ifft2(cross).real, dim=(-2, -1))
    cy, cx = height // 2, width // 2
    whole = surface
    searched = height * width
    radius = None
    if limit is not None:
        radius = math.ceil(limit) + (1 if guard else 0)
        ys = (torch.arange(height, device=surface.device) - cy).abs() <= radius
        xs = (torch.arange(width, device=surface.device) - cx).abs() <= radius
        inside = ys[:, None] & xs[None, :]
        searched = int(inside.sum())
        surface = surface.masked_fill(~inside, -math.inf)
    flat = surface.reshape(surface.shape[0], -1)
    best, index = flat.max(dim=1)
    significance = _significance(whole, best, searched, _null_spread(f_moving, f_reference))
    energy = torch.sqrt(e_moving * e_reference)
    similarity = torch.where(energy > 0, best / energy, torch.zeros_like(best))
    rows = torch.div(index, width, rounding_mode="floor") - cy
    cols = index % width - cx
    coarse = torch.stack([rows, cols], dim=1).to(torch.float64)
    refined = _upsampled_peaks(cross, coarse)
    on_edge = np.zeros(len(refined), bool)
    if guard and radius is not None:
        on_edge = (coarse.abs().max(dim=1).values >= radius).cpu().numpy()
    return refined, similarity.cpu().numpy(), on_edge, significance


def _upsampled_peaks(cross: torch.Tensor, coarse: torch.Tensor) -> np.ndarray:
    """The correlation's maximum near each ``coarse`` peak: a matrix DFT of ``cross`` on a
    1/UPSAMPLING grid of +-1.5 px (batched), then a parabola through its 3 x 3 maximum."""
    height, width = cross.shape[-2:]
    dev = cross.device
    freq_y = torch.fft.fftfreq(height, device=dev, dtype=torch.float64) * height
    freq_x = torch.fft.fftfreq(width, device=dev, dtype=torch.float64) * width
    offsets = (
        torch.arange(-1.5 * UPSAMPLING, 1.5 * UPSAMPLING + 1, device=dev, dtype=torch.float64)
        / UPSAMPLING
    )
    ys = coarse[:, 0, None] + offsets[None, :]  # (B, n)
    xs = coarse[:, 1, None] + offsets[None, :]
    rows = torch.exp(2j * math.pi * ys[:, :, None] * freq_y[None, None, :] / height)
    cols = torch.exp(2j * math.pi * freq_x[None, :, None] * xs[:, None, :] / width)
    surface = (rows @ cross @ cols).real  # (B, n, n)
    n = surface.shape[-1]
    index = surface.reshape(surface.shape[0], -1).argmax(dim=1)
    i = (torch.div(index, n, rounding_mode="floor")).clamp(1, n - 2)
    j = (index % n).clamp(1, n - 2)
    batch = torch.arange(surface.shape[0], device=dev)
    centre = surface[batch, i, j]
    di = _vertex(surface[batch, i - 1, j], centre, surface[batch, i + 1, j])
    dj = _vertex(surface[batch, i, j - 1], centre, surface[batch, i, j + 1])
    peak_y = ys[batch, i] + di / UPSAMPLING
    peak_x = xs[batch, j] + dj / UPSAMPLING
    return torch.stack([peak_y, peak_x], dim=1).cpu().numpy()


def _vertex(before: torch.Tensor, centre: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Offset (samples, within +-0.5) of the parabola through three samples' vertex; 0 where
    the samples do not bend down."""
    curvature = before - 2 * centre + after
    safe = torch.where(curvature < 0, curvature, -torch.ones_like(curvature))
    offset = (0.5 * (before - after) / safe).clamp(-0.5, 0.5)
    return torch.where(curvature < 0, offset, torch.zeros_like(offset))


def _block_starts(n: int, size: int) -> np.ndarray:
    """Block origins half a block apart, the last one flush with the far edge."""
    step = max(1, size // 2)
    starts = list(range(0, n - size + 1, step))
    if starts[-1] != n - size:
        starts.append(n - size)
    return np.asarray(starts)


def _blocks(data: torch.Tensor, rows: np.ndarray, cols: np.ndarray, size: int) -> torch.Tensor:
    """``(C, R, K, size, size)`` blocks of ``(C, H, W)`` images."""
    return torch.stack(
        [torch.stack([data[:, r : r + size, c : c + size] for c in cols], dim=1) for r in rows],
        dim=1,
    )


def _smooth_blocks(
    measured: np.ndarray,
    similarity: np.ndarray,
    translation: np.ndarray,
    min_similarity: float,
) -> np.ndarray:
    """Blocks below ``min_similarity`` take their good neighbours' median (the channel's
    translation where none is good); then a 3 x 3 median filter over the block grid."""
    out = measured.astype(np.float64).copy()
    n_channels, _, n_rows, n_cols = out.shape
    for c in range(n_channels):
        good = similarity[c] >= min_similarity
        for r in range(n_rows):
            for k in range(n_cols):
                if good[r, k]:
                    continue
                near = (slice(max(r - 1, 0), r + 2), slice(max(k - 1, 0), k + 2))
                usable = good[near]
                for axis in range(2):
                    values = out[c, axis][near][usable]
                    out[c, axis, r, k] = np.median(values) if values.size else translation[c, axis]
        for axis in range(2):
            out[c, axis] = ndimage.median_filter(out[c, axis], size=3, mode="nearest")
    return out


def _pixel_fields(
    blocks: np.ndarray, centres: tuple[np.ndarray, np.ndarray], shape: tuple[int, int]
) -> np.ndarray:
    """``(C, 2, H, W)`` bilinear interpolation of the block map between block centres (held
    constant beyond the outermost centres)."""
    rows = np.clip(np.arange(shape[0]), centres[0][0], centres[0][-1])
    cols = np.clip(np.arange(shape[1]), centres[1][0], centres[1][-1])
    row_pos = np.interp(rows, centres[0], np.arange(len(centres[0])))
    col_pos = np.interp(cols, centres[1], np.arange(len(centres[1])))
    grid_r, grid_c = np.meshgrid(row_pos, col_pos, indexing="ij")
    out = np.empty((*blocks.shape[:2], *shape), np.float32)
    for c in range(blocks.shape[0]):
        for axis in range(2):
            out[c, axis] = ndimage.map_coordinates(
                blocks[c, axis], [grid_r, grid_c], order=1, mode="nearest"
            )
    return out


# ---------------------------------------------------------------------------- resampling
def _shift_batch(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """``out[b, y, x] = images[b, y + dy_b, x + dx_b]`` for ``(B, H, W)`` images."""
    height, width = images.shape[-2:]
    dev = images.device
    ys = (
        torch.arange(height, device=dev, dtype=torch.float64)[None, :, None]
        + shifts[:, 0, None, None]
    )
    xs = (
        torch.arange(width, device=dev, dtype=torch.float64)[None, None, :]
        + shifts[:, 1, None, None]
    )
    return _sample(images, ys.expand(-1, height, width), xs.expand(-1, height, width))


def _sample(images: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """Catmull-Rom samples (the 4 x 4 tensor-product taps) of ``(B, H, W)`` images at float64
    positions, ``(H, W)`` shared by every image or ``(B, H, W)`` one set each; positions
    beyond the edges take the edge pixels."""
    count, height, width = images.shape
    shared = ys.dim() == 2
    y0, x0 = torch.floor(ys), torch.floor(xs)
    wy = catmull_rom_weights(ys - y0).to(images.dtype)  # (..., H, W, 4)
    wx = catmull_rom_weights(xs - x0).to(images.dtype)
    y0, x0 = y0.to(torch.int64), x0.to(torch.int64)
    flat = images.reshape(count, -1)
    out = torch.zeros_like(images)
    for ty in range(4):
        rows = (y0 + (ty - 1)).clamp(0, height - 1)
        for tx in range(4):
            index = rows * width + (x0 + (tx - 1)).clamp(0, width - 1)
            if shared:
                taps = flat[:, index.reshape(-1)].reshape(images.shape)
            else:
                taps = torch.gather(flat, 1, index.reshape(count, -1)).reshape(images.shape)
            out.add_(taps * (wy[..., ty] * wx[..., tx]))
    return out
