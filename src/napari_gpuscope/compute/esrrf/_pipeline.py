"""One frame chunk through eSRRF: upload, checks, magnification, gradients, RGC."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..arrays import InvalidInputError, to_device
from . import _kernels
from ._ops import FrameGeometry, half_gradients_twin, magnify_twin, rgc_twin, twin_bytes_per_frame
from ._params import EsrrfParams
from ._temporal import TemporalAccumulator

__all__ = ["MAX_INTENSITY", "FramePipeline"]

MAX_INTENSITY = 1e18
"""Largest intensity magnitude eSRRF accepts. The per-frame maps and their squares (VAR, TAC2)
are float32: at 1e20 a variance overflows to infinity and the result turns NaN (measured on the
filament sample); camera data stay below 1e7, so a stack beyond this was scaled by mistake."""


class FramePipeline:
    """Per-frame eSRRF maps (RGC x intensity) of frame chunks of one shape, on one device.

    Parameters
    ----------
    height, width : int
        Frame shape.
    params : EsrrfParams
    device : torch.device
    name : str
        How the input is called in error messages.
    """

    def __init__(
        self, height: int, width: int, params: EsrrfParams, device: torch.device, name: str
    ) -> None:
        self.params = params
        self.device = device
        self.name = name
        self.geometry = FrameGeometry.build(
            height,
            width,
            params.magnification,
            params.radius,
            params.geometry == "centred",
            device,
        )
        self.fused = _kernels.FusedChain.for_device(self.geometry, device)
        # Uploads run on their own stream, so that the next chunk's copy overlaps this chunk's
        # kernels (on one stream the copy would queue behind them).
        self._copy_stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    @property
    def output_shape(self) -> tuple[int, int]:
        """``(H M, W M)``."""
        return self.geometry.output_shape

    def bytes_per_frame(self, itemsize: int) -> int:
        """Device bytes one more frame in a chunk costs (raw upload included; on a GPU also
        the next chunk's frames, uploaded while this chunk computes)."""
        g = self.geometry
        raw = g.height * g.width * itemsize
        ahead = raw + 4 * g.height * g.width if self._copy_stream is not None else 0
        if self.fused is not None:
            return raw + ahead + self.fused.bytes_per_frame()
        return (
            raw + ahead + twin_bytes_per_frame(g.height, g.width, g.magnification, g.table.radius)
        )

    def fixed_bytes(self) -> int:
        """Device bytes independent of the chunk: the interpolation matrices, their bands and
        the tap table; the committed and the staged temporal state
        (:class:`~._temporal.TemporalAccumulator`); the temporaries of the statistic and of
        the macro-pixel correction (up to six float64 planes and two float32 ones; the twins'
        one-frame float64 copy fits in them); and the float64 widefield sums with one float32
        partial."""
        g = self.geometry
        rows, cols = self.output_shape
        lat_rows, lat_cols = 2 * g.height + 1, 2 * g.width + 1
        matrices = 4 * (rows + lat_rows) * g.height + 4 * (cols + lat_cols) * g.width
        bands = 4 * 8 * (rows + cols + lat_rows + lat_cols)
        table = 16 * g.table.taps_per_axis**2 * g.magnification**2
        state = TemporalAccumulator.state_bytes((rows, cols), self.params.temporal)
        temporaries = (6 * 8 + 2 * 4) * rows * cols
        widefield = (2 * 8 + 4) * g.height * g.width
        return matrices + bands + table + state + temporaries + widefield + (1 << 16)

    def upload(self, host: Any, first_frame: int) -> torch.Tensor:
        """float32 frames on the device (raw dtype uploaded, converted there), checked finite.

        On a GPU, host frames are copied, converted and (floats) checked on the upload stream
        while the previous chunk's kernels still run; the compute stream waits for the upload
        before it uses the frames, and the frames' memory is not reused until the compute
        stream is done with it. Frames already on a device are converted on the compute
        stream (torch's current one).
        """
        # Floats, and 64-bit integers (beyond MAX_INTENSITY), are checked; smaller integers
        # cannot be out of range, and checking them would cost a wait on every chunk.
        check = (
            host.dtype.is_floating_point or host.dtype.itemsize == 8
            if isinstance(host, torch.Tensor)
            else not np.issubdtype(host.dtype, np.integer) or host.dtype.itemsize == 8
        )
        frames, peak = self._to_device(host, check)
        if peak > MAX_INTENSITY and math.isfinite(peak):
            raise InvalidInputError(
                f"{self.name} frames {first_frame}-{first_frame + len(frames) - 1} hold values "
                f"up to {peak:.3g}; eSRRF computes in float32 and accepts intensities up to "
                f"{MAX_INTENSITY:.0e} in magnitude. Divide the stack by a constant (e.g. "
                f"{10 ** math.ceil(math.log10(peak / 1e6)):.0e}) first."
            )
        if not math.isfinite(peak):
            bad = ~torch.isfinite(frames)
            per_frame = bad.flatten(1).sum(1)
            k = int(torch.nonzero(per_frame)[0, 0])
            if _finite_on_host(host):
                raise InvalidInputError(
                    f"{self.name} frame {first_frame + k} holds values beyond float32's range "
                    f"(|value| > 3.4e38, e.g. float64 1e300); eSRRF computes in float32 and "
                    f"accepts intensities up to {MAX_INTENSITY:.0e} in magnitude. Divide the "
                    "stack by a constant first."
                )
            raise InvalidInputError(
                f"{self.name} frame {first_frame + k} contains {int(per_frame[k])} NaN or "
                f"infinite value(s) ({int(bad.sum())} in frames {first_frame}-"
                f"{first_frame + len(frames) - 1}); eSRRF needs finite intensities. Replace "
                "them (e.g. numpy.nan_to_num) or crop them away."
            )
        return frames

    def _to_device(self, host: Any, check: bool) -> tuple[torch.Tensor, float]:
        """The frames on the device, and their largest magnitude (0 unless ``check``; NaN or
        infinity when a value is not finite)."""
        if self._copy_stream is None or (
            isinstance(host, torch.Tensor) and host.device.type != "cpu"
        ):
            # A device tensor is ready on torch's current stream, where its producer queued
            # the writes; the upload stream does not wait for that stream, so reading it there
            # could see the tensor before it is written (issue 16). Nothing crosses the bus, so
            # there is no copy to overlap either.
            frames = to_device(host, self.device)
            return frames, _peak(frames) if check else 0.0
        compute = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._copy_stream):
            frames = to_device(host, self.device)
            # Read on the upload stream: the host then waits for this upload only, not for the
            # previous chunk's kernels queued on the compute stream, and can queue this chunk's
            # kernels behind them at once.
            peak = _peak(frames) if check else 0.0
        compute.wait_stream(self._copy_stream)
        frames.record_stream(compute)
        return frames, peak

    def stage(self, frames: torch.Tensor, accumulator: TemporalAccumulator) -> None:
        """Stage a chunk of float32 frames in ``accumulator`` (committed sums unchanged; the
        caller commits when the whole chunk has finished). The fused kernels fold the frames
        into the sums themselves (two launches per chunk, no per-frame maps); the twins
        compute the maps, then fold them."""
        p = self.params
        if self.fused is not None:
            self.fused.accumulate(frames, accumulator, p.sensitivity, p.intensity_weighting)
        else:
            accumulator.stage(self.maps(frames))

    def maps(self, frames: torch.Tensor) -> torch.Tensor:
        """``(B, H M, W M)`` RGC (x magnified intensity) of each frame, zero border band (a
        job never stores these on the fused path: :meth:`stage`)."""
        p = self.params
        weighting = p.intensity_weighting
        if self.fused is not None:
            return self.fused(frames, p.sensitivity, weighting)
        gcol, grow = half_gradients_twin(frames, self.geometry)
        magnified = magnify_twin(frames, self.geometry) if weighting else None
        return rgc_twin(gcol, grow, magnified, self.geometry, p.sensitivity)

    def kernel_paths(self) -> dict[str, str]:
        """Which implementation ran, for provenance."""
        if self.fused is not None:
            return self.fused.paths()
        return {"esrrf": "torch twins (" + _kernels.why_twins(self.device) + ")"}


def _peak(frames: torch.Tensor) -> float:
    """Largest magnitude of ``frames`` (NaN when one is NaN, infinity when one is infinite): one
    read of the device, as the finite check it replaces, and no temporary of the chunk's size."""
    low, high = torch.aminmax(frames)
    return float(torch.maximum(-low, high))  # maximum propagates NaN


def _finite_on_host(host: Any) -> bool:
    """Whether the input chunk itself is finite (then the float32 conversion overflowed)."""
    if isinstance(host, torch.Tensor):
        return bool(torch.isfinite(host).all())
    array = np.asarray(host)
    return bool(np.issubdtype(array.dtype, np.integer) or np.isfinite(array).all())
