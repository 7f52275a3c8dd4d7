"""The chain that runs a frame chunk through the fused eSRRF kernels (:class:`FusedChain`), and
why the torch twins run instead where the kernels cannot (:func:`why_twins`).

The ops, their launchers, twins and self-test examples are :mod:`._kernel_ops` (beside
``esrrf.cu``); their names stay importable from here.
"""

from __future__ import annotations

import torch

from ..devices import cupy_status
from ..kernels import kill_switch_active

# The tests reach the twins through this module.
from ._kernel_ops import (
    SOURCE,
    TILE,
    _accumulate_twin,  # noqa: F401
    _half_twin,  # noqa: F401
    _lut,
    _rgc_twin,  # noqa: F401
    accumulator_bytes,
    band,
    half_gradients,
    rgc,
    rgc_accumulate,
)
from ._ops import FrameGeometry
from ._temporal import TemporalAccumulator

__all__ = [
    "SOURCE",
    "TILE",
    "FusedChain",
    "accumulator_bytes",
    "band",
    "half_gradients",
    "rgc",
    "rgc_accumulate",
    "why_twins",
]


# -- the chain ------------------------------------------------------------------------------------
class FusedChain:
    """A frame chunk through :data:`half_gradients` and :data:`rgc_accumulate` (or :data:`rgc`
    for per-frame maps), bound once per shape.

    Only built where the kernels can run (CUDA with CuPy, or host emulation requested); the
    twins otherwise run in :class:`._pipeline.FramePipeline` directly.
    """

    LAUNCHES_PER_CHUNK = 2
    """Kernel launches of :meth:`accumulate`, whatever the number of frames."""

    def __init__(self, geometry: FrameGeometry, device: torch.device) -> None:
        self.geometry = geometry
        self.device = device
        self.row_half, self.col_half = band(geometry.rows_half), band(geometry.cols_half)
        self.row_m, self.col_m = band(geometry.rows_m), band(geometry.cols_m)
        self.lut = _lut(geometry, device)

    @classmethod
    def for_device(cls, geometry: FrameGeometry, device: torch.device) -> FusedChain | None:
        """The chain, or None where the kernels would not run (then the twins run directly)."""
        from ..kernels import host_kernels_requested

        if kill_switch_active():
            return None
        if device.type == "cuda" and cupy_status(device)[0]:
            return cls(geometry, device)
        if device.type == "cpu" and host_kernels_requested():
            return cls(geometry, device)
        return None

    def bytes_per_frame(self) -> int:
        """Device bytes per frame in a chunk: the float32 frame and its half-lattice unit
        gradients (two floats per sample); no per-frame output exists."""
        g = self.geometry
        return 4 * (g.height * g.width + 2 * (2 * g.height + 1) * (2 * g.width + 1))

    def gradients(self, frames: torch.Tensor) -> torch.Tensor:
        """``(B, 2H + 1, 2W + 1, 2)`` unit gradients of a chunk (one launch)."""
        g = self.geometry
        grad = frames.new_empty((frames.shape[0], 2 * g.height + 1, 2 * g.width + 1, 2))
        half_gradients(frames, grad, self.row_half, self.col_half)
        return grad

    def accumulate(
        self,
        frames: torch.Tensor,
        accumulator: TemporalAccumulator,
        sensitivity: float,
        weighting: bool,
    ) -> None:
        """Stage a chunk in ``accumulator``: two launches, no per-frame maps."""
        grad = self.gradients(frames)
        sums, edges, staged_sums, staged_edges = accumulator.buffers()
        f32 = torch.float32
        rgc_accumulate(
            grad,
            frames,
            self.row_m,
            self.col_m,
            self.lut,
            sums.view(f32),
            edges,
            staged_sums.view(f32),
            staged_edges,
            geometry=self.geometry,
            sensitivity=float(sensitivity),
            weighting=bool(weighting),
            statistic=accumulator.mode,
            continuing=accumulator.continuing,
        )
        accumulator.staged(frames.shape[0])

    def __call__(self, frames: torch.Tensor, sensitivity: float, weighting: bool) -> torch.Tensor:
        """``(B, H M, W M)`` per-frame maps (two launches)."""
        grad = self.gradients(frames)
        out = frames.new_empty((frames.shape[0], *self.geometry.output_shape))
        rgc(
            grad,
            frames,
            self.row_m,
            self.col_m,
            self.lut,
            out,
            geometry=self.geometry,
            sensitivity=float(sensitivity),
            weighting=bool(weighting),
        )
        return out

    def paths(self) -> dict[str, str]:
        """Which implementation each op of a job took on this device, and why."""
        return {op.name: op.path(self.device).describe() for op in (half_gradients, rgc_accumulate)}


def why_twins(device: torch.device) -> str:
    """Why the fused kernels do not run on ``device``."""
    if kill_switch_active():
        return "fused kernels switched off"
    if device.type == "cuda":
        return cupy_status(device)[1]
    return "CPU reference path"
