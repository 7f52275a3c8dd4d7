"""Drift of a time series: estimation by block cross-correlation, correction by resampling.

Conventions (the whole plugin uses them): a drift trace is a float64 ``(T, 2)`` array of
``(dy, dx)`` in input pixels; frame ``t`` shows frame 0's content moved by ``+shifts[t]``, so
``shifts[0]`` is ``(0, 0)`` and :func:`correct_drift` moves frame ``t`` by ``-shifts[t]``.

Estimation streams the stack once (twice for ``reference="mean"``): frames are summed into
blocks of ``time_averaging`` frames on the device; each finished block is correlated with the
reference at once (FFTs), so device and host memory are O(frame), whatever the number of
frames. The correlation peak is refined by an upsampled DFT around the integer peak
(Guizar-Sicairos et al., Opt. Lett. 2008; 1/20 px grid) and a parabola through the finest
grid's 3 x 3 maximum. Block shifts are placed at the blocks' centre frames and interpolated
to every frame by a cubic spline (a parabola for 3 blocks, a line for 2); before the first and
after the last centre the trace goes on straight, with the slope at that centre of a
least-squares parabola through the nearest blocks (3 to 5 of them), or of a line through them
where the parabola's curvature is within their noise.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..arrays import InvalidInputError, download_into, to_device, validate_image
from ..devices import device_context
from ..jobs import Job, Progress, blocking, scaled
from ..memory import check_budget, plan_chunk, run_in_chunks
from ..params import ParameterError, takes_params
from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ._drift_params import DriftParams
from ._reader import FrameReader

__all__ = [
    "DriftResult",
    "check_shifts",
    "correct_drift",
    "drift_blocks",
    "estimate_drift",
    "iter_correct_drift",
    "iter_estimate_drift",
    "load_drift_trace",
    "shift_frames",
]

UPSAMPLING = 20
"""Sub-pixel grid of the peak refinement: 1/20 px, then a parabola through its maximum."""

MIN_FRAME = 8
"""Smallest frame side a correlation is computed on."""

CPU_CHUNK = 8
GPU_CHUNK = 64


# ----------------------------------------------------------------------------- correction
def _catmull_rom(fraction: torch.Tensor) -> torch.Tensor:
    """``(..., 4)`` weights of the taps at offsets -1, 0, 1, 2 for fractions in [0, 1).

    Exactly ``(0, 1, 0, 0)`` at 0, so integer shifts copy pixels (no rounding).
    """
    f = fraction
    f2, f3 = f * f, f * f * f
    return torch.stack(
        [
            (-f3 + 2 * f2 - f) / 2,
            (3 * f3 - 5 * f2 + 2) / 2,
            (-3 * f3 + 4 * f2 + f) / 2,
            (f3 - f2) / 2,
        ],
        dim=-1,
    )


def _shift_axis(frames: torch.Tensor, shift: np.ndarray, axis: int) -> torch.Tensor:
    """``out[b, ..., i, ...] = frames[b, ..., i + shift[b], ...]`` along ``axis`` (1 or 2)
    of ``(B, H, W)``, Catmull-Rom, edge pixels repeated outside the frame.

    The shift is one number per frame, so each tap is a slice of the edge-padded frames times
    one weight (no per-pixel index tensor: 8 bytes an element that a gather would read)."""
    n = frames.shape[axis]
    # Beyond the frame every tap reads the edge pixel, so larger shifts change nothing.
    base = np.clip(np.floor(shift), -(n + 1), n + 1).astype(np.int64)
    weights = _catmull_rom(torch.as_tensor(shift - np.floor(shift))).numpy()  # (B, 4)
    pad = int(np.abs(base).max()) + 2
    padding = (0, 0, pad, pad) if axis == 1 else (pad, pad, 0, 0)
    padded = torch.nn.functional.pad(frames[None], padding, mode="replicate")[0]
    out = torch.zeros_like(frames)
    for b in range(frames.shape[0]):
        for tap in range(4):
            weight = float(weights[b, tap])
            if weight == 0.0:
                continue  # integer shifts: three of the four taps are zero
            first = pad + int(base[b]) + tap - 1
            part = padded[b].narrow(axis - 1, first, n)
            out[b].add_(part, alpha=weight)
    return out


def shift_frames(frames: torch.Tensor, shifts: Any) -> torch.Tensor:
    """Frames moved back by their drift: ``out[b, y, x] = frames[b, y + dy_b, x + dx_b]``.

    Parameters
    ----------
    frames : torch.Tensor
        float32 ``(B, H, W)``.
    shifts : array-like
        ``(B, 2)`` ``(dy, dx)`` per frame, on the host (NumPy: the weights and slices are
        planned there, so a GPU never waits for a copy back).

    Returns
    -------
    torch.Tensor
        float32 ``(B, H, W)``; separable Catmull-Rom interpolation (rows, then columns),
        samples outside the frame take the nearest edge pixel; integer shifts are exact.

    Examples
    --------
    >>> f = torch.arange(16.0).reshape(1, 4, 4)
    >>> shift_frames(f, [[0.0, 1.0]])[0, 0].tolist()
    [1.0, 2.0, 3.0, 3.0]
    """
    shifts = np.asarray(shifts, dtype=np.float64).reshape(-1, 2)
    out = _shift_axis(frames, shifts[:, 0], 1)
    return _shift_axis(out, shifts[:, 1], 2)


def check_shifts(shifts: Any, n_frames: int, *, name: str = "shifts") -> np.ndarray:
    """A drift trace as float64 ``(T, 2)``, or a ValueError saying what is valid.

    Examples
    --------
    >>> check_shifts([[0, 0], [0.5, -1]], 2).dtype
    dtype('float64')
    """
    array = np.asarray(shifts, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != 2:
        raise ParameterError(
            f"{name} has shape {array.shape}; a drift trace is (T, 2): (dy, dx) per frame"
        )
    if array.shape[0] != n_frames:
        raise ParameterError(
            f"{name} holds {array.shape[0]} frame(s) but the stack has {n_frames}; a drift "
            "trace needs one (dy, dx) per frame (was it estimated on another stack?)"
        )
    if not np.isfinite(array).all():
        bad = int(np.nonzero(~np.isfinite(array).all(axis=1))[0][0])
        raise ParameterError(f"{name}[{bad}] is not finite ({array[bad].tolist()})")
    return array


def _check_stack(stack: Any, name: str) -> tuple[int, int, int]:
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)
    shape = tuple(int(s) for s in stack.shape)
    if len(shape) != 3:
        raise InvalidInputError(
            f"{name} has {len(shape)} dimension(s) {shape}; drift is estimated and corrected "
            "on a time series (T, Y, X)"
        )
    validate_image(stack, name=name, min_ndim=3, max_ndim=3, check_values=False)
    if min(shape[1:]) < MIN_FRAME:
        raise InvalidInputError(
            f"{name} frames are {shape[1]} x {shape[2]} pixels; drift needs at least "
            f"{MIN_FRAME} pixels per side"
        )
    return shape  # type: ignore[return-value]


def _frames_on_device(host: Any, device: torch.device, name: str, first: int) -> torch.Tensor:
    frames = to_device(host, device)
    if not bool(torch.isfinite(frames).all()):
        bad = int(torch.nonzero(~torch.isfinite(frames).flatten(1).all(1))[0, 0])
        if np.isfinite(
            np.asarray(host[bad] if not isinstance(host, torch.Tensor) else host[bad].cpu())
        ).all():
            raise InvalidInputError(
                f"{name} frame {first + bad} holds values beyond float32's range (|value| > "
                "3.4e38); drift is computed in float32: divide the stack by a constant first"
            )
        raise InvalidInputError(
            f"{name} frame {first + bad} holds NaN or infinite values; drift needs finite "
            "intensities (replace them, e.g. numpy.nan_to_num)"
        )
    return frames


def iter_correct_drift(
    stack: Any,
    shifts: Any,
    *,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    device: str | torch.device | None = None,
) -> Job[np.ndarray]:
    """Drift correction as a job: every frame moved back by its drift, chunk by chunk.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames, any real dtype (NumPy, dask, zarr, torch); never modified.
    shifts : array-like
        ``(T, 2)`` drift trace ``(dy, dx)`` in input pixels (frame ``t`` shows frame 0's
        content moved by ``+shifts[t]``), e.g. :attr:`DriftResult.shifts`.
    frames_per_chunk : int, optional
        At most this many frames per device chunk (default 64 on a GPU, 8 on the CPU; fewer
        when device memory is short).
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory.
    name : str
        How the input is called in error messages.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` runs on the CPU.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` per chunk; returns float32
        ``(T, Y, X)``.

    Notes
    -----
    Separable Catmull-Rom interpolation (the kernel eSRRF magnifies with): exact for integer
    shifts, reproduces quadratic intensity profiles, no ringing; a half-pixel shift slightly
    smooths the frame. Pixels whose source lies outside the frame repeat the nearest edge
    pixel (a band as wide as the drift along the edges holds no new information).
    """
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)  # a nested list: as NumPy reads it
    n = _check_stack(stack, name)[0]
    shifts = check_shifts(shifts, n)
    memory_budget = check_budget(memory_budget)
    return _correct(stack, shifts, frames_per_chunk, memory_budget, name, device)


def _correct(
    stack: Any,
    shifts: np.ndarray,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
) -> Job[np.ndarray]:
    n, height, width = (int(s) for s in stack.shape)
    out = np.empty((n, height, width), np.float32)
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        per_frame = correction_bytes_per_frame(height, width, int(stack.dtype.itemsize))
        cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
        chunk = plan_chunk(
            min(n, cap), per_frame, dev, budget=memory_budget, what="drift correction"
        )

        def process(start: int, stop: int) -> Job[None]:
            frames = _frames_on_device(reader.read(start, stop, prefetch_until=n), dev, name, start)
            download_into(out[start:stop], shift_frames(frames, shifts[start:stop]))
            del frames
            if not np.isfinite(out[start:stop]).all():
                raise InvalidInputError(
                    f"{name} frames {start}-{stop - 1}: the interpolation overflowed float32 "
                    "(intensities near 3.4e38); divide the stack by a constant first"
                )
            yield Progress(1.0, f"drift correction: frames {start}-{stop - 1} of {n}")

        yield from run_in_chunks(
            n,
            chunk,
            process,
            device=dev,
            bytes_per_item=per_frame,
            budget=memory_budget,
            what="drift correction",
        )
    return out


def correction_bytes_per_frame(height: int, width: int, itemsize: int) -> int:
    """Device bytes one more frame costs in :func:`shift_frames`: the raw upload, the float32
    frame, its edge-padded copy (drifts up to a frame's side), the row pass and the output."""
    return height * width * (itemsize + 4 * 5)


correct_drift = blocking(iter_correct_drift)
correct_drift.__doc__ = """The stack with its drift removed; blocking version of
:func:`iter_correct_drift` (same parameters).

Returns
-------
numpy.ndarray
    float32 ``(T, Y, X)``.

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.esrrf import correct_drift
>>> stack = np.zeros((2, 8, 8), np.uint16); stack[0, 3, 3] = stack[1, 4, 5] = 100
>>> aligned = correct_drift(stack, [[0, 0], [1, 2]], device="cpu")
>>> float(aligned[1, 3, 3])
100.0
"""


# ----------------------------------------------------------------------------- estimation
def drift_blocks(
    n_frames: int, time_averaging: int, *, name: str = "stack"
) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the blocks: ``time_averaging`` frames each, the remainder
    joined to the last block; at least two blocks, or an error saying how many frames are
    needed.

    Examples
    --------
    >>> drift_blocks(250, 100)
    [(0, 100), (100, 250)]
    """
    count = n_frames // time_averaging
    if count < 2:
        raise InvalidInputError(
            f"{name} has {n_frames} frame(s); drift estimation with time_averaging="
            f"{time_averaging} needs at least {2 * time_averaging} frames (two blocks to "
            f"correlate). Lower time_averaging to at most {max(1, n_frames // 2)}"
            + (" (a single frame has no drift to estimate)" if n_frames < 2 else "")
        )
    edges = [k * time_averaging for k in range(count)] + [n_frames]
    return list(itertools.pairwise(edges))


def _window(n: int, device: torch.device) -> torch.Tensor:
    """Tukey window (a quarter of each side tapered): the frame's edges, which the periodic
    FFT wraps around, do not correlate with themselves at zero shift."""
    taper = max(1, n // 8)
    w = torch.ones(n, dtype=torch.float64, device=device)
    ramp = 0.5 * (1 - torch.cos(math.pi * (torch.arange(taper, device=device) + 0.5) / taper))
    w[:taper] = ramp.to(torch.float64)
    w[n - taper :] = ramp.flip(0).to(torch.float64)
    return w


class _Correlator:
    """Spectra of windowed, mean-subtracted images and the sub-pixel peak of their
    cross-correlation."""

    def __init__(self, height: int, width: int, device: torch.device) -> None:
        self.shape = (height, width)
        self.device = device
        self.window = _window(height, device)[:, None] * _window(width, device)[None, :]
        self.freq_y = torch.fft.fftfreq(height, device=device, dtype=torch.float64) * height
        self.freq_x = torch.fft.fftfreq(width, device=device, dtype=torch.float64) * width

    def spectrum(self, image: torch.Tensor) -> torch.Tensor:
        """complex128 FFT of the windowed image (its mean removed)."""
        image = image.to(torch.float64)
        return torch.fft.fft2((image - image.mean()) * self.window)

    def peak(
        self, moved: torch.Tensor, reference: torch.Tensor, limit: float | None
    ) -> tuple[np.ndarray, bool]:
        """``(dy, dx)`` such that ``moved`` is ``reference`` moved by it, and whether the
        integer peak lies on the edge of the search window (the drift may exceed ``limit``)."""
        height, width = self.shape
        cross = moved * reference.conj()
        surface = torch.fft.ifft2(cross).real
        surface = torch.fft.fftshift(surface)
        cy, cx = height // 2, width // 2
        on_edge = False
        if limit is not None:
            radius = math.ceil(limit) + 1
            r0, r1 = max(0, cy - radius), min(height, cy + radius + 1)
            c0, c1 = max(0, cx - radius), min(width, cx + radius + 1)
            sub = surface[r0:r1, c0:c1]
            index = int(torch.argmax(sub))
            row, col = divmod(index, sub.shape[1])
            row, col = row + r0, col + c0
            on_edge = abs(row - cy) >= radius or abs(col - cx) >= radius
        else:
            index = int(torch.argmax(surface))
            row, col = divmod(index, width)
        coarse = np.array([row - cy, col - cx], np.float64)
        refined = self._upsampled_peak(cross, coarse)
        return refined, on_edge

    def measure(
        self, image: torch.Tensor, reference: torch.Tensor, limit: float | None
    ) -> tuple[np.ndarray, bool]:
        """``(dy, dx)`` of ``image`` relative to the image of the spectrum ``reference``.

        The window that keeps the frame's edges out of the correlation stays put while the
        content moves, which pulls a shift measured in one go towards zero (0.08 px at 5 px on
        a 96 px frame); so the image is moved back by the first estimate and the small residual
        measured again, where the window is symmetric about the content.
        """
        first, on_edge = self.peak(self.spectrum(image), reference, limit)
        back = shift_frames(image.to(torch.float32)[None], first[None])[0]
        residual, _ = self.peak(self.spectrum(back), reference, 2.0)
        return first + residual, on_edge

    def _upsampled_peak(self, cross: torch.Tensor, coarse: np.ndarray) -> np.ndarray:
        """The correlation's maximum near ``coarse``: a matrix DFT of ``cross`` on a
        1/UPSAMPLING grid of +-1.5 px, then a parabola through the 3 x 3 around its maximum."""
        height, width = self.shape
        steps = torch.arange(
            -1.5 * UPSAMPLING, 1.5 * UPSAMPLING + 1, device=self.device, dtype=torch.float64
        )
        offsets = steps / UPSAMPLING
        ys = coarse[0] + offsets
        xs = coarse[1] + offsets
        rows = torch.exp(2j * math.pi * ys[:, None] * self.freq_y[None, :] / height)
        cols = torch.exp(2j * math.pi * self.freq_x[:, None] * xs[None, :] / width)
        surface = (rows @ cross @ cols).real  # (n, n)
        n = surface.shape[0]
        index = int(torch.argmax(surface))
        i, j = divmod(index, n)
        i, j = min(max(i, 1), n - 2), min(max(j, 1), n - 2)
        patch = surface[i - 1 : i + 2, j - 1 : j + 2].cpu().numpy()
        di = _parabola_vertex(patch[0, 1], patch[1, 1], patch[2, 1])
        dj = _parabola_vertex(patch[1, 0], patch[1, 1], patch[1, 2])
        return np.array(
            [float(ys[i]) + di / UPSAMPLING, float(xs[j]) + dj / UPSAMPLING], np.float64
        )


def _parabola_vertex(before: float, centre: float, after: float) -> float:
    """Offset (in samples, within +-0.5) of the vertex of the parabola through three samples."""
    curvature = before - 2 * centre + after
    if curvature >= 0:
        return 0.0
    return float(np.clip(0.5 * (before - after) / curvature, -0.5, 0.5))


@dataclass(frozen=True)
class DriftResult:
    """A drift trace and how it was estimated.

    Attributes
    ----------
    shifts : numpy.ndarray
        float64 ``(T, 2)``: ``(dy, dx)`` of every frame relative to frame 0, in input pixels;
        frame ``t`` shows frame 0's content moved by ``+shifts[t]``; ``shifts[0]`` is exactly
        ``(0, 0)``.
    block_shifts : numpy.ndarray
        float64 ``(B, 2)``: the measured shift of each block (its frames' mean), relative to
        frame 0 as ``shifts`` (the value of the interpolated trace at frame 0 subtracted).
    uncertainty : numpy.ndarray
        float64 ``(B, 2)``: a one-sample estimate of each block shift's standard error per
        axis, ``|shift(even frames) - shift(odd frames)| / 2`` (the two halves' noise is
        independent, and each half's error is ``sqrt(2)`` times the whole block's); its RMS
        over blocks (:attr:`rms_uncertainty`) estimates the typical error. NaN for blocks of
        one frame, and for a loaded trace.
    block_frames : list of (int, int)
        Frame range ``[start, stop)`` of each block.
    params : DriftParams or None
        None for a trace loaded from a file.
    aligned_mean : numpy.ndarray or None
        float32 ``(Y, X)``: the mean of all frames, each block moved back by its shift (in
        frame 0's coordinates); None for a loaded trace.
    frame_shape : tuple of int
        ``(Y, X)`` of the frames.
    """

    shifts: np.ndarray
    block_shifts: np.ndarray
    uncertainty: np.ndarray
    block_frames: list[tuple[int, int]]
    params: DriftParams | None = None
    aligned_mean: np.ndarray | None = None
    frame_shape: tuple[int, int] | None = None
    stopped_early: bool = False
    kernel_paths: dict[str, str] = field(default_factory=dict)

    @property
    def rms_uncertainty(self) -> float:
        """RMS of :attr:`uncertainty` over blocks and axes (NaN when unknown)."""
        values = self.uncertainty[np.isfinite(self.uncertainty)]
        return float(np.sqrt(np.mean(values**2))) if values.size else float("nan")

    @property
    def max_drift(self) -> float:
        """Largest displacement from frame 0 (Euclidean, input pixels)."""
        return float(np.hypot(self.shifts[:, 0], self.shifts[:, 1]).max())

    @classmethod
    def from_shifts(cls, shifts: Any, frame_shape: tuple[int, int] | None = None) -> DriftResult:
        """A result holding a given (e.g. loaded) trace.

        Examples
        --------
        >>> DriftResult.from_shifts([[0, 0], [0.5, 1.0]]).max_drift
        1.118033988749895
        """
        array = check_shifts(shifts, len(np.asarray(shifts)))
        n = array.shape[0]
        return cls(
            shifts=array,
            block_shifts=array.copy(),
            uncertainty=np.full_like(array, np.nan),
            block_frames=[(t, t + 1) for t in range(n)],
            frame_shape=frame_shape,
        )

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance, the trace included (per frame, in pixels)."""
        return {
            "params": None if self.params is None else self.params.to_dict(),
            "frames": int(self.shifts.shape[0]),
            "shifts_px": [[float(dy), float(dx)] for dy, dx in self.shifts],
            "block_frames": [list(r) for r in self.block_frames] if self.params else None,
            "block_shifts_px": self.block_shifts.tolist() if self.params else None,
            "uncertainty_px": _json_floats(self.uncertainty) if self.params else None,
            "rms_uncertainty_px": _json_float(self.rms_uncertainty),
            "max_drift_px": self.max_drift,
            "stopped_early": bool(self.stopped_early),
            "kernel_paths": dict(self.kernel_paths),
        }

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> DriftResult:
        """The trace back from :meth:`summary` (e.g. a batch result's provenance).

        Examples
        --------
        >>> r = DriftResult.from_shifts([[0, 0], [0.25, -1.5]])
        >>> DriftResult.from_summary(r.summary()).shifts.tolist()
        [[0.0, 0.0], [0.25, -1.5]]
        """
        return cls.from_shifts(summary["shifts_px"])

    def describe(self) -> str:
        """One line in plain words."""
        last = self.shifts[-1]
        text = (
            f"drift over {self.shifts.shape[0]} frames: up to {self.max_drift:.2f} px from "
            f"frame 0 (last frame dy {last[0]:+.2f}, dx {last[1]:+.2f} px)"
        )
        if self.params is None:
            return text + ", loaded trace"
        p = self.params
        error = self.rms_uncertainty
        noise = f", block error ~{error:.3f} px RMS" if math.isfinite(error) else ""
        return (
            f"{text}; {len(self.block_frames)} blocks of {p.time_averaging} frames vs the "
            f"{p.reference} {'frames' if p.reference == 'mean' else 'block'}{noise}"
        )

    def tracks_data(self, anchor: tuple[float, float] | None = None) -> np.ndarray:
        """napari Tracks data ``(T, 4)``: ``[track 0, frame, y, x]``, the path of frame 0's
        content at ``anchor`` (input pixels; default the frame's centre)."""
        if anchor is None:
            rows, cols = self.frame_shape or (1, 1)
            anchor = ((rows - 1) / 2, (cols - 1) / 2)
        n = self.shifts.shape[0]
        data = np.zeros((n, 4), np.float64)
        data[:, 1] = np.arange(n)
        data[:, 2] = anchor[0] + self.shifts[:, 0]
        data[:, 3] = anchor[1] + self.shifts[:, 1]
        return data

    def layers(
        self,
        name: str = "stack",
        geometry: Geometry | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """The aligned mean (``"drift-corrected mean · <name>"``, when estimated) and the
        trace as a Tracks layer (``"drift · <name>"``).

        The track is the path of the content that frame 0 shows at the frame's centre, drawn
        at true size in the input's coordinates (its ``t`` axis is the frame index, at the
        input's time scale), so it sits over the middle of the widefield image and a drift
        of a few pixels is a short path there.
        """
        metadata = dict(metadata or {})
        layers: list[LayerDataTuple] = []
        if self.aligned_mean is not None:
            layers.append(
                image_layer(
                    self.aligned_mean,
                    result_name("drift-corrected mean", name),
                    geometry,
                    metadata=metadata,
                )
            )
        layers.append(self.tracks_layer(name, geometry, metadata))
        return layers

    def tracks_layer(
        self,
        name: str = "stack",
        geometry: Geometry | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> LayerDataTuple:
        """The Tracks layer of :meth:`layers`.

        Coloured by frame (turbo: blue at frame 0 to red at the last, so the path says which
        way the sample went) and 4 px wide with the whole path shown: one track coloured by
        its id takes turbo's darkest blue, invisible over a dark image. The geometry is the
        input's ``(t, y, x)`` (its last three axes), units and axis labels included, so that
        napari keeps its units and scale bar on; a 2D geometry (a frame's) gives the ``y, x``
        axes and a time axis of scale 1 in frames.

        Examples
        --------
        >>> trace = DriftResult.from_shifts([[0.0, 0.0], [0.5, -1.0]], frame_shape=(8, 8))
        >>> geometry = Geometry(scale=(2.0, 0.1, 0.1), units=("s", "µm", "µm"))
        >>> data, kwargs, kind = trace.tracks_layer("cells", geometry)
        >>> kind, kwargs["color_by"], kwargs["properties"]["frame"].tolist(), kwargs["units"]
        ('tracks', 'frame', [0.0, 1.0], ('s', 'µm', 'µm'))
        """
        kwargs: dict[str, Any] = {"name": result_name("drift", name)}
        if geometry is not None:
            g = geometry.trailing(3).as_kwargs()
            pads = {"scale": 1.0, "translate": 0.0, "units": "pixel", "axis_labels": "t"}
            for key, pad in pads.items():
                if key in g and len(g[key]) == 2:  # a frame's geometry: the track adds time
                    g[key] = (pad, *g[key])
                elif key in g and len(g[key]) != 3:
                    del g[key]
            kwargs.update(g)
        data = self.tracks_data()
        n = data.shape[0]
        kwargs.update(
            {
                "metadata": {**dict(metadata or {}), "quantity": "drift", "unit": "px"},
                "properties": {"frame": data[:, 1].copy()},
                "color_by": "frame",
                "colormap": "turbo",
                "tail_width": 4,
                "tail_length": max(1, n),
                "head_length": 0,
            }
        )
        return data, kwargs, "tracks"

    # ------------------------------------------------------------------ CSV
    def to_csv(
        self, path: str | Path, *, pixel_size: float | None = None, unit: str = "µm"
    ) -> Path:
        """Write the trace: ``frame, dy_px, dx_px`` (and ``dy_<unit>, dx_<unit>`` with a pixel
        size), after ``#`` header lines naming the convention and units.

        Examples
        --------
        >>> import tempfile, os
        >>> r = DriftResult.from_shifts([[0, 0], [0.5, -0.25]])
        >>> p = r.to_csv(os.path.join(tempfile.mkdtemp(), "drift.csv"), pixel_size=0.1)
        >>> DriftResult.from_csv(p).shifts.tolist()
        [[0.0, 0.0], [0.5, -0.25]]
        """
        if pixel_size is not None and not (
            isinstance(pixel_size, (int, float)) and math.isfinite(pixel_size) and pixel_size > 0
        ):
            raise ParameterError(f"pixel_size must be a positive number, got {pixel_size!r}")
        path = Path(path)
        buffer = io.StringIO()
        buffer.write("# napari-gpuscope drift trace\n")
        buffer.write(
            "# (dy, dx) of each frame relative to frame 0: frame t shows frame 0's content "
            "moved by +(dy, dx); correct by moving frame t by -(dy, dx)\n"
        )
        buffer.write("# unit: px (input pixels)\n")
        if pixel_size is not None:
            buffer.write(f"# pixel_size: {float(pixel_size)!r} {unit}\n")
        if self.params is not None:
            buffer.write(f"# estimated with: {self.params.to_json(indent=None)}\n")
        writer = csv.writer(buffer, lineterminator="\n")
        header = ["frame", "dy_px", "dx_px"]
        if pixel_size is not None:
            header += [f"dy_{unit}", f"dx_{unit}"]
        writer.writerow(header)
        for t, (dy, dx) in enumerate(self.shifts):
            row = [t, repr(float(dy)), repr(float(dx))]
            if pixel_size is not None:
                row += [repr(float(dy) * pixel_size), repr(float(dx) * pixel_size)]
            writer.writerow(row)
        path.write_text(buffer.getvalue(), encoding="utf-8")
        return path

    @classmethod
    def from_csv(cls, path: str | Path) -> DriftResult:
        """Read a trace written by :meth:`to_csv` (or any CSV with ``dy_px, dx_px`` columns,
        or ``dy_<unit>, dx_<unit>`` and a ``# pixel_size: <value> <unit>`` line)."""
        return cls.from_shifts(load_drift_trace(path))


def load_drift_trace(path: str | Path) -> np.ndarray:
    """float64 ``(T, 2)`` ``(dy, dx)`` in pixels from a drift-trace CSV.

    Raises
    ------
    ValueError
        For a file without the columns, or with a frame missing or out of order.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    pixel_size, size_unit = None, None
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            match = re.match(r"#\s*pixel_size:\s*(\S+)\s*(\S*)", line)
            if match:
                pixel_size, size_unit = float(match.group(1)), match.group(2)
        elif line.strip():
            lines.append(line)
    rows = list(csv.DictReader(lines))
    if not rows:
        raise ValueError(f"{path}: no drift trace rows (expected columns frame, dy_px, dx_px)")
    columns = rows[0].keys()
    if {"dy_px", "dx_px"} <= columns:
        keys, factor = ("dy_px", "dx_px"), 1.0
    elif pixel_size and size_unit and {f"dy_{size_unit}", f"dx_{size_unit}"} <= columns:
        keys, factor = (f"dy_{size_unit}", f"dx_{size_unit}"), 1.0 / pixel_size
    else:
        raise ValueError(
            f"{path}: columns {list(columns)}; a drift trace needs dy_px and dx_px (or "
            "dy_<unit>, dx_<unit> with a '# pixel_size: <value> <unit>' line)"
        )
    try:
        shifts = np.array([[float(r[keys[0]]), float(r[keys[1]])] for r in rows]) * factor
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: a {keys} value is not a number ({error})") from None
    if "frame" in columns:
        frames = [int(float(r["frame"])) for r in rows]
        if frames != list(range(len(frames))):
            raise ValueError(f"{path}: frames must be 0, 1, 2, ... in order, one row each")
    return check_shifts(shifts, shifts.shape[0], name=str(path))


def _json_float(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _json_floats(values: np.ndarray) -> list[list[float | None]]:
    return [[_json_float(v) for v in row] for row in values]


def _interpolate(
    centres: np.ndarray,
    values: np.ndarray,
    n_frames: int,
    smoothing: float,
    errors: np.ndarray | None = None,
) -> np.ndarray:
    """Per-frame trace from block values at ``centres``: optional Gaussian smoothing (sigma
    in blocks), a cubic spline between the centres (not-a-knot: a parabola through 3 blocks;
    linear between 2), and beyond the first and last centres a straight line with the slope
    of :func:`_end_slope` (``errors``: the blocks' standard errors, ``(B, 2)``, NaN where
    unknown)."""
    values = values.copy()
    if errors is None:
        errors = np.full(values.shape, np.nan)
    if smoothing > 0 and len(values) > 1:
        from scipy.ndimage import gaussian_filter1d

        values = gaussian_filter1d(values, smoothing, axis=0, mode="nearest")
    frames = np.arange(n_frames, dtype=np.float64)
    out = np.empty((n_frames, 2), np.float64)
    inside = (frames >= centres[0]) & (frames <= centres[-1])
    if len(centres) >= 3:
        from scipy.interpolate import CubicSpline

        spline = CubicSpline(centres, values, axis=0)
        out[inside] = spline(frames[inside])
    else:
        for axis in range(2):
            out[inside, axis] = np.interp(frames[inside], centres, values[:, axis])
    low, high = frames < centres[0], frames > centres[-1]
    for mask, order in ((low, slice(None)), (high, slice(None, None, -1))):
        if mask.any():
            ends, at_end = centres[order], values[order]
            slope = _end_slope(ends - ends[0], at_end, errors[order])
            out[mask] = at_end[0] + (frames[mask, None] - ends[0]) * slope
    return out


_CURVATURE_SE = 2.0
"""A parabola's curvature counts beyond this many standard errors. The blocks' reported
errors run low on real stacks (a linear drift's curvature came out 1.6 of them, median),
but 3 or 4 lost more on curved drifts than they gained on linear ones (simulated stacks)."""


def _end_slope(offsets: np.ndarray, values: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """``(2,)`` slope at the end centre (``offsets[0] == 0``; the others run inwards) with
    which the trace is continued beyond it.

    A least-squares parabola through the nearest ``k = clip(B // 2, 3, 5)`` of the ``B``
    block values (the secant for 2 blocks) gives the slope at 0 where its curvature stands
    out of the blocks' noise (beyond twice its standard error, from the RMS of their
    ``errors``; always when these are unknown), else the least-squares line through the same
    blocks does. The secant of the last two blocks (the old rule) gives the rate half a
    block further in: a drift ``a t^2`` in blocks of ``w`` frames was 0.75 a w^2 off half a
    block beyond the end; the parabola follows the changing rate, the line averages the
    noise of a steady one, and neither extrapolates the curvature, which the noise makes
    unreliable. Measured on smooth drifts (quadratic, oscillating, exponential settling,
    linear; jitter 0.03 px a frame, block noise 0.01 to 0.06 px; 3 to 20 blocks): the
    trace's RMS error against the drift falls by 40 to 55 % for 3 blocks, 20 to 50 % for 4
    or 5, 8 to 36 % for 6 to 9 and ~10 % for more (the most where the noise is lowest); a
    linear drift's changes by 0.01 px at most. On simulated blinking stacks (96 x 96 px, 5
    of each): from 0.28 to 0.09 px for a quadratic drift in 3 blocks, 0.22 to 0.09 px for
    an oscillating one in 5, 0.31 to 0.16 px for a settling one in 5, 0.07 to 0.06 px for a
    quadratic in 8; a linear drift in 5 blocks went from 0.043 to 0.056 px.
    """
    if len(values) < 3:
        return (values[1] - values[0]) / (offsets[1] - offsets[0])
    k = int(np.clip(len(values) // 2, 3, 5))
    scale = float(abs(offsets[k - 1]))
    x = offsets[:k] / scale
    design = np.column_stack([x**2, x, np.ones(k)])
    (curvature, slope, _), *_ = np.linalg.lstsq(design, values[:k], rcond=None)
    line = np.linalg.lstsq(design[:, 1:], values[:k], rcond=None)[0][0]
    known = np.isfinite(errors[:k])
    count = known.sum(axis=0)
    squares = np.where(known, errors[:k], 0.0) ** 2
    sigma = np.sqrt(squares.sum(axis=0) / np.maximum(count, 1))
    sigma[count == 0] = np.nan  # blocks of one frame have no error estimate
    spread = sigma * math.sqrt(np.linalg.inv(design.T @ design)[0, 0])
    curved = ~(np.abs(curvature) <= _CURVATURE_SE * spread)  # NaN (errors unknown): curved
    return np.where(curved, slope, line) / scale


@takes_params(DriftParams)
def iter_estimate_drift(
    stack: Any,
    params: DriftParams,
    *,
    frames_per_chunk: int | None = None,
    memory_budget: int | None = None,
    name: str = "stack",
    device: str | torch.device | None = None,
) -> Job[DriftResult]:
    """Estimate the drift of a time series as a job.

    Parameters
    ----------
    stack : array-like
        ``(T, Y, X)`` frames (NumPy, dask, zarr, memory-mapped TIFF, torch), any real dtype,
        read chunk by chunk; never modified.
    {params}
    params : DriftParams, optional
        All parameters at once (keywords given as well override its fields).
    frames_per_chunk : int, optional
        At most this many frames per device chunk (default 64 on a GPU, 8 on the CPU).
    memory_budget : int, optional
        Device bytes to plan with instead of the free memory.
    name : str
        How the input is called in error messages.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` runs on the CPU.

    Returns
    -------
    generator
        Yields :class:`~napari_gpuscope.compute.jobs.Progress` after every chunk, with the
        metrics ``dy`` and ``dx`` (px) of each finished block at its centre frame (``step``);
        returns a :class:`DriftResult`.

    Raises
    ------
    InvalidInputError
        For a stack that is not ``(T, Y, X)``, frames smaller than 8 pixels, fewer than
        ``2 * time_averaging`` frames, or NaN/infinite values.
    ParameterError
        For invalid parameters, or a drift beyond ``max_drift`` (naming the block).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.esrrf import estimate_drift
    >>> y, x = np.mgrid[:64, :64]
    >>> blob = lambda cy, cx: 1000 * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / 8)
    >>> stack = np.stack([blob(30, 30)] * 4 + [blob(31, 32.5)] * 4)
    >>> r = estimate_drift(stack, time_averaging=4, device="cpu")
    >>> np.round(r.block_shifts[-1] - r.block_shifts[0], 2).tolist()
    [1.0, 2.5]
    """
    if frames_per_chunk is not None and (
        isinstance(frames_per_chunk, bool)
        or int(frames_per_chunk) != frames_per_chunk
        or frames_per_chunk < 1
    ):
        raise ParameterError(
            f"frames_per_chunk must be a positive integer, got {frames_per_chunk!r}"
        )
    if not (hasattr(stack, "shape") and hasattr(stack, "dtype")):
        stack = np.asarray(stack)
    n, height, width = _check_stack(stack, name)
    drift_blocks(n, params.time_averaging, name=name)
    if params.max_drift is not None and params.max_drift >= min(height, width) / 2:
        raise ParameterError(
            f"DriftParams.max_drift is {params.max_drift:g} px but the frames are {height} x "
            f"{width}: the correlation can only measure up to half a frame "
            f"({min(height, width) // 2 - 1} px); lower max_drift or use None"
        )
    memory_budget = check_budget(memory_budget)
    return _estimate(stack, params, frames_per_chunk, memory_budget, name, device)


class _BlockSums:
    """Per-block sums of all, even and odd frames, filled chunk by chunk."""

    def __init__(self, shape: tuple[int, int], device: torch.device) -> None:
        self.total = torch.zeros(shape, dtype=torch.float64, device=device)
        self.even = torch.zeros_like(self.total)
        self.odd = torch.zeros_like(self.total)


def _estimate(
    stack: Any,
    params: DriftParams,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
) -> Job[DriftResult]:
    n, height, width = (int(s) for s in stack.shape)
    blocks = drift_blocks(n, params.time_averaging, name=name)
    limit = params.max_drift
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        itemsize = int(stack.dtype.itemsize)
        per_frame = height * width * (itemsize + 4 + 8)
        fixed = height * width * (6 * 8 + 4 * 16 + 8)
        cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
        chunk = plan_chunk(
            min(params.time_averaging, cap),
            per_frame,
            dev,
            fixed_bytes=fixed,
            budget=memory_budget,
            what="drift estimation",
        )
        correlator = _Correlator(height, width, dev)
        passes = 2 if params.reference == "mean" else 1

        def summed(first: int, stop: int, sums: _BlockSums) -> Job[None]:
            def process(start: int, end: int) -> Job[None]:
                host = reader.read(first + start, first + end, prefetch_until=stop)
                frames = _frames_on_device(host, dev, name, first + start).to(torch.float64)
                # Committed only now: a chunk retried after an out-of-memory error adds once.
                parity = (first + start) % 2
                total = frames.sum(0)
                even = frames[parity::2].sum(0)
                sums.total += total
                sums.even += even
                sums.odd += total - even
                del frames
                yield Progress(1.0, f"drift: frames {first + start}-{first + end - 1} of {n}")

            yield from run_in_chunks(
                stop - first,
                min(chunk, stop - first),
                process,
                device=dev,
                bytes_per_item=per_frame,
                fixed_bytes=fixed,
                budget=memory_budget,
                what="drift estimation",
            )

        reference_spectrum = None
        if params.reference == "mean":
            sums = _BlockSums((height, width), dev)
            yield from scaled(summed(0, n, sums), 0.0, 1.0 / passes, "reference: ")
            reference_spectrum = correlator.spectrum(sums.total / n)
            del sums

        measured = np.zeros((len(blocks), 2), np.float64)
        uncertainty = np.full((len(blocks), 2), np.nan)
        aligned = torch.zeros((1, height, width), dtype=torch.float64, device=dev)
        previous = None
        for k, (first, stop) in enumerate(blocks):
            sums = _BlockSums((height, width), dev)
            lo = (passes - 1 + k / len(blocks)) / passes
            hi = (passes - 1 + (k + 1) / len(blocks)) / passes
            yield from scaled(summed(first, stop, sums), lo, hi)
            count = stop - first
            mean = sums.total / count
            spectrum = correlator.spectrum(mean)
            if params.reference == "first" and k == 0:
                reference_spectrum = spectrum
            if params.reference == "previous":
                if previous is None:
                    step = np.zeros(2)
                else:
                    step, edge = correlator.measure(mean, previous, limit)
                    _check_limit(step, edge, limit, k, first, stop, "the previous block")
                measured[k] = (measured[k - 1] if k else 0.0) + step
                previous = spectrum
            elif params.reference == "first" and k == 0:
                measured[k] = 0.0
            else:
                shift, edge = correlator.measure(mean, reference_spectrum, limit)
                _check_limit(shift, edge, limit, k, first, stop, f"the {params.reference}")
                measured[k] = shift
            if count >= 2:
                n_even = (stop + 1) // 2 - (first + 1) // 2
                halves = (sums.even / n_even, sums.odd / (count - n_even))
                between, _ = correlator.measure(halves[0], correlator.spectrum(halves[1]), None)
                uncertainty[k] = np.abs(between) / 2
            aligned += shift_frames(mean[None], measured[k : k + 1]) * (count / n)
            del sums, spectrum, mean
            centre = (first + stop - 1) / 2
            yield Progress(
                hi,
                f"drift: block {k + 1}/{len(blocks)} dy {measured[k, 0]:+.3f}, "
                f"dx {measured[k, 1]:+.3f} px",
                step=round(centre),
                metrics={"dy": float(measured[k, 0]), "dx": float(measured[k, 1])},
            )
        centres = np.array([(a + b - 1) / 2 for a, b in blocks], np.float64)
        trace = _interpolate(centres, measured, n, params.smoothing, uncertainty)
        origin = trace[0].copy()
        shifts = trace - origin
        shifts[0] = 0.0  # exactly, whatever the rounding of the subtraction
        block_shifts = measured - origin
        if limit is not None:
            worst = np.abs(shifts).max(axis=1)
            if worst.max() > limit:
                t = int(np.argmax(worst))
                raise ParameterError(
                    f"DriftParams.max_drift is {limit:g} px but frame {t} has drifted by "
                    f"(dy {shifts[t, 0]:+.2f}, dx {shifts[t, 1]:+.2f}) px from frame 0; "
                    "raise max_drift (or None)"
                )
        # The aligned mean is in the reference's coordinates; frame 0's are ``origin`` away.
        moved = shift_frames(aligned, -origin[None])
        aligned_mean = moved[0].cpu().numpy().astype(np.float32)
        path = "torch FFT + matrix-DFT refinement on " + str(dev)
    return DriftResult(
        shifts=shifts,
        block_shifts=block_shifts,
        uncertainty=uncertainty,
        block_frames=blocks,
        params=params,
        aligned_mean=aligned_mean,
        frame_shape=(height, width),
        kernel_paths={"drift": path},
    )


def _check_limit(
    shift: np.ndarray,
    on_edge: bool,
    limit: float | None,
    k: int,
    first: int,
    stop: int,
    against: str,
) -> None:
    if limit is None:
        return
    if on_edge or np.abs(shift).max() > limit:
        raise ParameterError(
            f"DriftParams.max_drift is {limit:g} px but block {k + 1} (frames {first}-"
            f"{stop - 1}) correlates best with {against} at the edge of that search range or "
            f"beyond it (dy {shift[0]:+.2f}, dx {shift[1]:+.2f} px): the drift is larger; "
            "raise max_drift (or None)"
        )


estimate_drift = blocking(iter_estimate_drift)
estimate_drift.__doc__ = """Estimate the drift of a time series; blocking version of
:func:`iter_estimate_drift` (same parameters).

Returns
-------
DriftResult
    ``.shifts`` float64 ``(T, 2)``: ``(dy, dx)`` of every frame relative to frame 0.

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.esrrf import estimate_drift
>>> rng = np.random.default_rng(0)
>>> stack = rng.poisson(100, (8, 32, 32)).astype(np.uint16)
>>> estimate_drift(stack, time_averaging=4, device="cpu").shifts.shape
(8, 2)
"""
