"""One drift estimate with blocks of a given length: the passes over the stack, each block
correlated with its reference, and the trace made of the block shifts."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from ..devices import device_context
from ..job_parts import scaled
from ..jobs import Job, Progress, is_stop
from ..memory import plan_chunk, run_in_chunks
from ..params import ParameterError
from ._drift_blocks import (
    _BlockSums,
    _noise_image,
    _StopReading,
    drift_blocks,
)
from ._drift_checks import _check_limit, _check_measured, _check_within_frame
from ._drift_correct import (
    CPU_CHUNK,
    GPU_CHUNK,
    _frames_on_device,
    shift_frames,
)
from ._drift_correlate import _Correlator
from ._drift_mean import _MeanReference, _Pass, _refine_mean
from ._drift_params import DriftParams
from ._drift_result import DriftResult
from ._drift_trace import _block_uncertainty, _interpolate
from ._reader import FrameReader


def _measure(
    stack: Any,
    params: DriftParams,
    length: int,
    frames_per_chunk: int | None,
    memory_budget: int | None,
    name: str,
    device: Any,
    stopping: dict[str, bool],
) -> Job[DriftResult]:
    """The estimate with blocks of ``length`` frames (a stop already requested: the first two
    measured blocks only)."""
    n, height, width = (int(s) for s in stack.shape)
    blocks = drift_blocks(n, length, name=name)
    limit = params.max_drift
    with torch.no_grad(), device_context(device) as dev, FrameReader(stack) as reader:
        itemsize = int(stack.dtype.itemsize)
        per_frame = height * width * (itemsize + 4 + 8)
        fixed = height * width * (6 * 8 + 4 * 16 + 8)
        if params.reference == "mean":  # its reference, the last pass's aligned sum and a
            fixed += height * width * 4 * 8  # block's part in it, left out (float64)
        cap = frames_per_chunk or (CPU_CHUNK if dev.type == "cpu" else GPU_CHUNK)
        chunk = plan_chunk(
            min(length, cap),
            per_frame,
            dev,
            fixed_bytes=fixed,
            budget=memory_budget,
            what="drift estimation",
        )
        correlator = _Correlator(height, width, dev)

        def summed(
            first: int, stop: int, sums: _BlockSums, *, interruptible: bool = False
        ) -> Job[None]:
            def process(start: int, end: int) -> Job[None]:
                host = reader.read(first + start, first + end, prefetch_until=stop)
                frames = _frames_on_device(host, dev, name, first + start).to(torch.float64)
                # Committed only now: a chunk retried after an out-of-memory error adds once.
                in_first_half = min(max(sums.middle - (first + start), 0), end - start)
                sums.total += frames.sum(0)
                sums.first_half += frames[:in_first_half].sum(0)
                sums.frames += end - start
                del frames
                command = yield Progress(
                    1.0, f"drift: frames {first + start}-{first + end - 1} of {n}"
                )
                if is_stop(command):
                    stopping["requested"] = True
                    if interruptible:
                        raise _StopReading

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

        def measuring(
            lo: float, hi: float, mean_reference: _MeanReference | None, earlier: _Pass | None
        ) -> Job[_Pass | None]:
            """One pass over the blocks, each correlated with its reference (progress from
            ``lo`` to ``hi``). ``earlier``: the pass a ``reference="mean"`` refinement follows
            (its half shifts are reused); a refinement returns None when a stop is requested
            (the earlier pass is kept)."""
            refining = earlier is not None
            measured = np.zeros((len(blocks), 2), np.float64)
            # known[k]: block k shares structure with its reference (its shift is measured);
            # the others are interpolated from the measured blocks (issue 26 item 1).
            known = np.zeros(len(blocks), bool)
            aligned = torch.zeros((1, height, width), dtype=torch.float64, device=dev)
            aligned_frames = 0
            # reference="previous": the last block with structure (index, spectrum, mean, noise)
            anchor: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
            # reference="first": block 0's spectrum and noise. The mean of the other frames
            # (reference="mean") averages their noise: a block can pass against it by chance
            # only where all other blocks are blank, and then it is the only measured block,
            # which is refused.
            reference_spectrum = None
            reference_noise = None
            if earlier is not None:  # the halves' shifts do not depend on the reference
                halves, structured = earlier.halves, earlier.structured
            else:
                halves = np.full((len(blocks), 2), np.nan)
                structured = np.zeros(len(blocks), bool)  # the block's halves share structure
            done = len(blocks)
            for k, (first, stop) in enumerate(blocks):
                sums = _BlockSums((height, width), dev, middle=first + (stop - first) // 2)
                block_lo = lo + (hi - lo) * k / len(blocks)
                block_hi = lo + (hi - lo) * (k + 1) / len(blocks)
                yield from scaled(summed(first, stop, sums), block_lo, block_hi)
                count = stop - first
                mean = sums.total / count
                spectrum = correlator.spectrum(mean)
                noise = correlator.spectrum(_noise_image(sums, count)) if count >= 2 else None
                if count >= 2 and not refining:
                    early = count // 2
                    second = (sums.total - sums.first_half) / (count - early)
                    half, _, half_significance = correlator.measure(
                        sums.first_half / early, correlator.spectrum(second), None
                    )
                    if half_significance >= 1.0:  # else unknown (NaN): no noise-only shifts
                        halves[k] = half
                        structured[k] = True  # its halves share structure: not blank
                if params.reference == "first" and k == 0:
                    reference_spectrum, reference_noise = spectrum, noise
                if params.reference == "previous":
                    if anchor is not None:
                        at, against, at_mean, at_noise = anchor
                        step, edge, significance = correlator.measure(
                            mean, against, limit, noise, at_noise
                        )
                        if significance >= 1.0:
                            what = "the previous block" if at == k - 1 else f"block {at + 1}"
                            _check_limit(step, edge, limit, k, first, stop, what)
                            if not known[at]:  # the chain's first block: its origin (0, 0)
                                known[at] = True
                                weight = (blocks[at][1] - blocks[at][0]) / n
                                aligned += at_mean[None] * weight
                                aligned_frames += blocks[at][1] - blocks[at][0]
                            measured[k] = measured[at] + step
                            known[k] = True
                            anchor = (k, spectrum, mean, noise)
                        elif not known[at] and not (structured[at] and not structured[k]):
                            # Nothing measured yet: the earlier block or this one is blank;
                            # the chain starts with the first pair that shares structure. An
                            # earlier block whose halves share structure stays the anchor
                            # while the blocks after it show none (a sample between blank
                            # blocks).
                            anchor = (k, spectrum, mean, noise)
                        # else: no structure in common with the last measured block: this
                        # block is unmeasured, and the next one is correlated with that
                        # block again.
                    else:
                        anchor = (k, spectrum, mean, noise)
                elif params.reference == "first" and k == 0:
                    measured[k] = 0.0  # known once another block correlates with it
                else:
                    if mean_reference is not None:  # the mean without this block's part
                        reference_spectrum = mean_reference.spectrum_without(
                            k, mean, count, correlator
                        )
                    shift, edge, significance = correlator.measure(
                        mean, reference_spectrum, limit, noise, reference_noise
                    )
                    if significance >= 1.0:
                        _check_limit(shift, edge, limit, k, first, stop, f"the {params.reference}")
                        measured[k] = shift
                        known[k] = True
                        if params.reference == "first":
                            known[0] = True
                if known[k] or (params.reference == "first" and k == 0):
                    # blocks without structure (no sample) are left out of the aligned mean;
                    # a first block that nothing correlates with is refused below
                    aligned += shift_frames(mean[None], measured[k : k + 1]) * (count / n)
                    aligned_frames += count
                del sums, spectrum, mean, noise
                centre = (first + stop - 1) / 2
                if refining:  # the first pass drew the live trace; this one refines it
                    yield Progress(
                        block_hi,
                        f"drift: block {k + 1}/{len(blocks)} against the aligned mean",
                    )
                elif known[k] or (params.reference == "first" and k == 0):
                    yield Progress(
                        block_hi,
                        f"drift: block {k + 1}/{len(blocks)} dy {measured[k, 0]:+.3f}, "
                        f"dx {measured[k, 1]:+.3f} px",
                        step=round(centre),
                        metrics={"dy": float(measured[k, 0]), "dx": float(measured[k, 1])},
                    )
                else:
                    yield Progress(
                        block_hi,
                        f"drift: block {k + 1}/{len(blocks)} has no structure in common with "
                        "its reference: its drift will be interpolated",
                    )
                if stopping["requested"]:
                    if refining:
                        return None
                    if k >= 1 and known[: k + 1].sum() >= 2:
                        done = k + 1
                        break
            return _Pass(measured, known, halves, structured, aligned, aligned_frames, done)

        refinement: dict[str, Any] | None = None
        if params.reference == "mean":
            sums = _BlockSums((height, width), dev)
            with contextlib.suppress(_StopReading):
                pass_over = summed(0, n, sums, interruptible=True)
                yield from scaled(pass_over, 0.0, 1.0 / 3.0, "reference: ")
            read = sums.frames  # all frames, or those read before a stop
            plain = _MeanReference(
                sums.total[None] / n,
                read,
                n,
                np.zeros((len(blocks), 2)),
                np.array([stop <= read for _, stop in blocks]),
            )
            del sums
            state = yield from measuring(1.0 / 3.0, 2.0 / 3.0, plain, None)
            assert state is not None  # only a refinement gives way to a stop
            state, refinement = yield from _refine_mean(
                state, plain, blocks, measuring, stopping, (2.0 / 3.0, 1.0)
            )
            del plain
        else:
            state = yield from measuring(0.0, 1.0, None, None)
            assert state is not None
        measured, known, halves = state.measured, state.known, state.halves
        aligned, aligned_frames, done = state.aligned, state.aligned_frames, state.done
        all_frames = n
        stopped = done < len(blocks)
        if stopped:  # the trace of the frames the measured blocks cover
            blocks, measured, halves = blocks[:done], measured[:done], halves[:done]
            known = known[:done]
            n = blocks[-1][1]
        _check_measured(known, blocks, params.reference, name)
        centres = np.array([(a + b - 1) / 2 for a, b in blocks], np.float64)
        good = np.nonzero(known)[0]
        uncertainty = np.full((len(blocks), 2), np.nan)
        uncertainty[good] = _block_uncertainty(
            centres[good], measured[good], halves[good], [blocks[i] for i in good]
        )
        trace = _interpolate(centres[good], measured[good], n, params.smoothing, uncertainty[good])
        # Beyond the measured blocks' frames the drift is unknown: held at the last value.
        start, end = blocks[good[0]][0], blocks[good[-1]][1]
        trace[:start] = trace[start]
        trace[end:] = trace[end - 1]
        frames = np.arange(n, dtype=np.float64)
        for k in np.nonzero(~known)[0]:
            measured[k] = [np.interp(centres[k], frames, trace[:, a]) for a in range(2)]
        origin = trace[0].copy()
        shifts = trace - origin
        shifts[0] = 0.0  # exactly, whatever the rounding of the subtraction
        block_shifts = measured - origin
        _check_within_frame(shifts, (height, width), params.reference, name)
        if limit is not None:
            worst = np.abs(shifts).max(axis=1)
            if worst.max() > limit:
                t = int(np.argmax(worst))
                raise ParameterError(
                    f"DriftParams.max_drift is {limit:g} px but frame {t} has drifted by "
                    f"(dy {shifts[t, 0]:+.2f}, dx {shifts[t, 1]:+.2f}) px from frame 0; "
                    "raise max_drift (or None)"
                )
        aligned *= all_frames / aligned_frames  # the blocks' weights were count / all frames
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
        stopped_early=stopped,
        kernel_paths={"drift": path},
        measured=known.copy(),
        time_averaging_chosen=length,
        mean_refinement=refinement,
    )
