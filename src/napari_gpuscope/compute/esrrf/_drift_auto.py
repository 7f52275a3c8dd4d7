"""The automatic block length of a drift estimate (``time_averaging=None``, issue 27 item
3): a pilot pass measures every candidate length at once, and
:func:`choose_block_length` picks the one of least estimated trace error (noise from the
blocks' uncertainty, bias from the candidates' traces compared: :mod:`._drift_pooled_bias`)."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import torch

from ..devices import device_context
from ..jobs import Job, Progress, is_stop
from ..memory import plan_chunk, run_in_chunks
from ._drift_blocks import (
    _BlockSums,
    _noise_image,
    _StopReading,
    drift_blocks,
)
from ._drift_checks import _MIN_MEASURED
from ._drift_choice import BlockLengthChoice
from ._drift_correct import (
    CPU_CHUNK,
    GPU_CHUNK,
    _frames_on_device,
)
from ._drift_correlate import _Correlator
from ._drift_params import DriftParams
from ._drift_pooled_bias import consistent_lengths, pooled_bias
from ._drift_trace import _block_uncertainty, _interpolate
from ._reader import FrameReader

_Measurement = tuple[np.ndarray, np.ndarray, np.ndarray, int, list[tuple[int, int]]]
"""A candidate length's measured blocks: centres, values, uncertainty, frames, frame ranges."""

_AUTO_DRAWS = 24
"""Noise draws of the Monte Carlo error propagation in :func:`choose_block_length`."""


class _PilotTrack:
    """One candidate block length of the pilot: its blocks summed as frames stream by, each
    finished block correlated with the first block whose halves share structure."""

    def __init__(self, length: int, n: int, shape: tuple[int, int], dev: torch.device) -> None:
        self.length = length
        self.blocks = drift_blocks(n, length)
        self.shape, self.dev = shape, dev
        self.k = 0
        self.sums = self._new_sums()
        self.pending: list[tuple[int, _BlockSums]] = []
        count = len(self.blocks)
        self.values = np.zeros((count, 2))
        self.halves = np.full((count, 2), np.nan)
        self.known = np.zeros(count, bool)
        self.done = 0  # blocks correlated
        self.reference: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def _new_sums(self) -> _BlockSums:
        first, stop = self.blocks[min(self.k, len(self.blocks) - 1)]
        return _BlockSums(self.shape, self.dev, middle=first + (stop - first) // 2)

    def updates(self, cumulative: torch.Tensor, start: int, end: int) -> list[tuple]:
        """What frames ``start:end`` add (``cumulative``: their cumulative sum), as
        ``(block, total, first_half)`` pieces; nothing is committed yet."""
        out = []
        pos, k = start, self.k
        while pos < end and k < len(self.blocks):
            first, stop = self.blocks[k]
            middle = first + (stop - first) // 2
            upto = min(stop, end)

            def between(a: int, b: int) -> torch.Tensor | None:
                if b <= a:
                    return None
                total = cumulative[b - 1 - start]
                return total - cumulative[a - 1 - start] if a > start else total

            out.append((k, between(pos, upto), between(pos, min(upto, middle)), upto - pos))
            pos, k = upto, k + 1 if upto == stop else k
        return out

    def commit(self, pieces: list[tuple]) -> None:
        for k, total, early, frames in pieces:
            self.sums.total += total
            if early is not None:
                self.sums.first_half += early
            self.sums.frames += frames
            first, stop = self.blocks[k]
            if self.sums.frames == stop - first:  # finished: correlated by flush()
                self.pending.append((k, self.sums))
                self.k = k + 1
                self.sums = self._new_sums()

    def flush(self, correlator: _Correlator, limit: float | None) -> None:
        """Correlate the finished blocks (each removed once measured: a retried chunk after an
        out-of-memory error measures it again, never twice)."""
        while self.pending:
            k, sums = self.pending[0]
            first, stop = self.blocks[k]
            count = stop - first
            mean = sums.total / count
            structured = False
            if count >= 2:
                early = count // 2
                second = (sums.total - sums.first_half) / (count - early)
                half, _, significance = correlator.measure(
                    sums.first_half / early, correlator.spectrum(second), None
                )
                if significance >= 1.0:
                    self.halves[k], structured = half, True
            spectrum = correlator.spectrum(mean)
            noise = correlator.spectrum(_noise_image(sums, count)) if count >= 2 else None
            if self.reference is None:
                if structured or count < 2:
                    self.reference = (spectrum, noise)
                    self.values[k], self.known[k] = 0.0, True
            else:
                shift, _, significance = correlator.measure(
                    mean, self.reference[0], limit, noise, self.reference[1]
                )
                if significance >= 1.0:
                    self.values[k], self.known[k] = shift, True
            self.pending.pop(0)
            self.done = k + 1

    def measurement(self) -> _Measurement | None:
        """``(centres, values, uncertainty, frames, blocks)`` of the measured blocks among
        those correlated (``frames``: how many frames they hold), or None when this length
        has fewer than two, or a block without a noise estimate."""
        blocks = self.blocks[: self.done]
        known = self.known[: self.done]
        if known.sum() < _MIN_MEASURED:
            return None
        good = np.nonzero(known)[0]
        if not np.isfinite(self.halves[good]).all():
            return None  # a block's halves share no structure: too short to measure noise
        centres = np.array([(a + b - 1) / 2 for a, b in blocks], np.float64)[good]
        values = self.values[good]
        errors = _block_uncertainty(centres, values, self.halves[good], [blocks[i] for i in good])
        chosen = [blocks[i] for i in good]
        return centres, values, errors, sum(b - a for a, b in chosen), chosen


def _mean_uncertainty(
    centres: np.ndarray, values: np.ndarray, halves: np.ndarray, blocks: list[tuple[int, int]]
) -> np.ndarray:
    """``(B, 2)``: each block's standard error from the *mean* of all blocks' squared half
    differences (scaled to frames), not :func:`_block_uncertainty`'s local median: the
    trace's mean squared error counts the blocks whose halves, or whose shift, caught a wrong
    peak, which a median hides (short blocks of sparse blinking)."""
    count = np.array([stop - start for start, stop in blocks], np.float64)
    early = np.floor(count / 2)
    rate = np.gradient(values, centres, axis=0, edge_order=2 if len(centres) > 2 else 1)
    residual = halves + rate * (count / 2)[:, None]
    per_frame = (residual * (np.sqrt(early * (count - early)) / count)[:, None]) ** 2
    per_frame *= count[:, None]
    return np.sqrt(per_frame.mean(axis=0)[None, :] / count[:, None])


def _pilot(
    stack: Any,
    params: DriftParams,
    lengths: list[int],
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
) -> Job[BlockLengthChoice]:
    """Stream the stack once, measuring the drift at every candidate length at the same time
    (one block sum per candidate on the device: memory O(frame x candidates), whatever the
    number of frames), then :func:`choose_block_length`."""
    n, height, width = (int(s) for s in stack.shape)
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        itemsize = int(stack.dtype.itemsize)
        per_frame = height * width * (itemsize + 4 + 8 + 8)  # + the cumulative sum
        fixed = height * width * (len(lengths) * (2 * 8 + 2 * 16) + 6 * 8 + 4 * 16 + 8)
        cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
        chunk = plan_chunk(
            min(n, cap), per_frame, dev, fixed_bytes=fixed, budget=memory_budget,
            what="drift estimation (block length)",
        )  # fmt: skip
        correlator = _Correlator(height, width, dev)
        tracks = [_PilotTrack(length, n, (height, width), dev) for length in lengths]
        read = {"frames": 0, "stopped": False}

        def process(start: int, end: int) -> Job[None]:
            for track in tracks:
                track.flush(correlator, params.max_drift)
            host = reader.read(start, end, prefetch_until=n)
            frames = _frames_on_device(host, dev, name, start).to(torch.float64)
            cumulative = frames.cumsum(0)
            del frames
            pieces = [track.updates(cumulative, start, end) for track in tracks]
            for track, piece in zip(tracks, pieces, strict=True):
                track.commit(piece)  # in place: nothing allocated, nothing to retry
            del cumulative, pieces
            read["frames"] = end
            command = yield Progress(1.0, f"frames {start}-{end - 1} of {n}")
            if is_stop(command):
                read["stopped"] = True
                raise _StopReading

        with contextlib.suppress(_StopReading):
            yield from run_in_chunks(
                n, chunk, process, device=dev, bytes_per_item=per_frame, fixed_bytes=fixed,
                budget=memory_budget, what="drift estimation (block length)",
            )  # fmt: skip
        for track in tracks:
            track.flush(correlator, params.max_drift)
        measured = {t.length: t.measurement() for t in tracks}
    return choose_block_length(measured, read["frames"], params.smoothing, stopped=read["stopped"])


def _trace(
    centres: np.ndarray, values: np.ndarray, n: int, smoothing: float, errors: np.ndarray
) -> np.ndarray:
    """The trace :func:`_estimate` makes of these blocks, relative to frame 0."""
    trace = _interpolate(centres, values, n, smoothing, errors)
    return trace - trace[0]


def choose_block_length(
    measured: dict[int, _Measurement | None],
    n: int,
    smoothing: float = 0.0,
    *,
    stopped: bool = False,
    seed: int = 0,
) -> BlockLengthChoice:
    """The block length of least estimated mean squared error of the trace, from the block
    measurements of each candidate length (``(centres, values, uncertainty, frames
    covered, blocks)``, None where unusable).

    Each candidate's trace error is noise plus bias. **Noise**: the blocks' measured
    uncertainty (:func:`_block_uncertainty`, calibrated on simulated stacks) propagated
    through the trace's construction (spline, ends, and frame 0, whose extrapolated value
    offsets every frame), by drawing block errors of that size (Monte Carlo, fixed seed);
    these single estimates are noisy, so the law they follow, variance ``a / L`` (frames
    averaged), is fitted through them (``a`` their median of ``noise^2 L``). **Bias**: no
    model of the drift is needed; the candidates' traces are compared with each other
    (:func:`._drift_pooled_bias.pooled_bias`): without bias a trace differs from a shorter
    candidate's by their nested noise, ``a (1/S - 1/L)``; a smooth drift's bias grows as
    ``L^2``, so the excess over every shorter candidate is fitted (weighted least squares) as
    ``(1 - (S/L)^2)^2`` times ``L``'s squared bias, floored at 0. Candidates whose trace
    disagrees with the others' by far more than their noise (a wrong peak:
    :func:`._drift_pooled_bias.consistent_lengths`) are left out first. The length
    of least ``bias^2 + a / L`` is chosen. A candidate is usable when it measured at least
    two blocks, all with a noise estimate (their halves correlate), covering at least 90 %
    of the frames the best-covered candidate covers.

    Examples
    --------
    >>> from napari_gpuscope.compute.esrrf._drift_blocks import drift_blocks
    >>> def still(length, n=96, error=0.05):  # a still stack, each block measured within 0.05 px
    ...     blocks = drift_blocks(n, length)
    ...     centres = np.array([(a + b - 1) / 2 for a, b in blocks])
    ...     errors = np.full((len(blocks), 2), error / np.sqrt(length / 4))
    ...     return centres, np.zeros((len(blocks), 2)), errors, n, blocks
    >>> choose_block_length({L: still(L) for L in (4, 8, 16, 32)}, 96).length
    32
    """
    usable = {length: m for length, m in measured.items() if m is not None}
    if usable:
        most = max(m[3] for m in usable.values())
        usable = {length: m for length, m in usable.items() if m[3] >= 0.9 * most}
    if not usable:  # nothing measures: the longest blocks hold the most signal; the
        # estimate then says which blocks have no structure
        longest = max(measured)
        scores = dict.fromkeys(measured, math.nan)
        return BlockLengthChoice(longest, scores, None, stopped=stopped)
    rng = np.random.default_rng(seed)
    noise: dict[int, float] = {}
    traces: dict[int, np.ndarray] = {}
    for length, (centres, values, errors, _, _) in sorted(usable.items()):
        noise[length] = float(
            np.mean(
                [
                    np.mean(_trace(centres, rng.normal(0.0, errors), n, smoothing, errors) ** 2)
                    for _ in range(_AUTO_DRAWS)
                ]
            )
        )
        traces[length] = _trace(centres, values, n, smoothing, errors)
    a = float(np.median([noise[length] * length for length in noise]))
    kept = consistent_lengths(traces, a)
    parts = pooled_bias({length: traces[length] for length in kept}, a)
    scores = {
        length: math.sqrt(sum(p**2 for p in parts[length])) if length in parts else math.nan
        for length in sorted(measured)
    }
    best = min(parts, key=lambda length: scores[length])  # ties: the shortest
    return BlockLengthChoice(best, scores, kept[0], parts=parts, stopped=stopped)
