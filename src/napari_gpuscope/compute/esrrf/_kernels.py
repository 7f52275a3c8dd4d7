"""The fused eSRRF kernels (``esrrf.cu``) as :class:`~..kernels.FusedOp` s, and the chain that
runs a frame chunk through them.

- :data:`half_gradients` -- ``(frames, gcol2, grow2, row_band, col_band)``: Roberts cross +
  Catmull-Rom onto the half-pixel lattice; twin: :func:`._ops.half_gradients_twin`.
- :data:`rgc` -- ``(gcol2, grow2, frames, row_band, col_band, lut, counts, out, geometry=,
  sensitivity=, weighting=)``: magnified intensity and RGC per output pixel; twin:
  :func:`._ops.rgc_twin` (and :func:`._ops.magnify_twin`).

Separable Catmull-Rom matrices are handed to the kernels as *bands* (:func:`band`): the four
input indices and weights of each output index, taken from the same matrices the twins
multiply with, so kernel and twin interpolate with identical weights.
"""

from __future__ import annotations

import numpy as np
import torch

from ..devices import cupy_status
from ..kernels import Backend, FusedOp, KernelSource, kill_switch_active
from ._ops import FrameGeometry, half_gradients_twin, magnify_twin, rgc_twin

__all__ = ["SOURCE", "FusedChain", "band", "half_gradients", "rgc", "why_twins"]

SOURCE = KernelSource("esrrf.cu", beside=__file__)


def band(matrix: torch.Tensor) -> torch.Tensor:
    """``(n_out, 8)`` float32: four consecutive input indices per output row (clamped into the
    input) and the matrix's weights at them (every non-zero of a Catmull-Rom row lies within
    four consecutive inputs).

    Examples
    --------
    >>> band(torch.tensor([[0.0, 0.5, 0.5, 0.0, 0.0]]))[0].tolist()
    [1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 0.0, 0.0]
    """
    dense = matrix.detach().cpu().double().numpy()
    n_out, n_in = dense.shape
    out = np.zeros((n_out, 8), np.float32)
    for i in range(n_out):
        nonzero = np.flatnonzero(dense[i])
        start = int(nonzero[0]) if nonzero.size else 0
        start = min(max(0, start), max(0, n_in - 4))
        indices = np.arange(start, start + 4).clip(0, n_in - 1)
        if nonzero.size and nonzero[-1] >= start + 4:
            raise ValueError(f"row {i} spans more than four inputs")
        out[i, :4] = indices
        out[i, 4:] = np.where(np.arange(start, start + 4) < n_in, dense[i, indices], 0.0)
    return torch.from_numpy(out).to(matrix.device)


def _dense(band_: torch.Tensor, n_in: int) -> torch.Tensor:
    """The matrix a band stands for (twins)."""
    dense = band_.new_zeros((band_.shape[0], n_in))
    dense.scatter_add_(1, band_[:, :4].long(), band_[:, 4:])
    return dense


# -- half-lattice gradients -------------------------------------------------------------------
def _half_twin(frames, gcol2, grow2, row_band, col_band) -> None:
    rows, cols = frames.shape[1:]
    geometry = _BandGeometry(_dense(row_band, rows), _dense(col_band, cols))
    gcol, grow = half_gradients_twin(frames, geometry)  # type: ignore[arg-type]
    gcol2.copy_(gcol)
    grow2.copy_(grow)


class _BandGeometry:
    """What :func:`half_gradients_twin` / :func:`magnify_twin` read of a geometry."""

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor) -> None:
        self.rows_half = self.rows_m = rows
        self.cols_half = self.cols_m = cols


def _half_launch(backend: Backend, frames, gcol2, grow2, row_band, col_band) -> None:
    _batch, rows, cols = frames.shape
    total = gcol2.numel()
    backend.launch(
        backend.function(SOURCE, "esrrf_half_gradients"),
        total,
        [
            backend.array(frames),
            backend.array(gcol2),
            backend.array(grow2),
            backend.array(row_band),
            backend.array(col_band),
            np.int32(rows),
            np.int32(cols),
            np.int64(total),
        ],
    )


def _example_geometry(device: torch.device) -> FrameGeometry:
    return FrameGeometry.build(9, 11, 3, 1.5, False, device)


def _half_example(device: torch.device, generator: torch.Generator):
    frames = (100 + 50 * torch.rand((2, 9, 11), generator=generator)).to(device)
    g = _example_geometry(device)
    gcol2 = torch.empty((2, 19, 23), device=device)
    grow2 = torch.empty_like(gcol2)
    return (frames, gcol2, grow2, band(g.rows_half), band(g.cols_half)), {}


half_gradients = FusedOp(
    "esrrf_half_gradients",
    launch=_half_launch,
    twin=_half_twin,
    example=_half_example,
    outputs=(1, 2),
    rtol=1e-5,
    atol=1e-4,
)


# -- RGC ----------------------------------------------------------------------------------------
def _rgc_twin(
    gcol2,
    grow2,
    frames,
    row_band,
    col_band,
    lut,
    counts,
    out,
    *,
    geometry,
    sensitivity,
    weighting,
) -> None:
    rows, cols = frames.shape[1:]
    magnified = None
    if weighting:
        magnified = magnify_twin(
            frames,
            _BandGeometry(_dense(row_band, rows), _dense(col_band, cols)),  # type: ignore[arg-type]
        )
    out.copy_(rgc_twin(gcol2, grow2, magnified, geometry, sensitivity))


def _rgc_launch(
    backend: Backend,
    gcol2,
    grow2,
    frames,
    row_band,
    col_band,
    lut,
    counts,
    out,
    *,
    geometry,
    sensitivity,
    weighting,
) -> None:
    _batch, rows, cols = frames.shape
    total = out.numel()
    backend.launch(
        backend.function(SOURCE, "esrrf_rgc"),
        total,
        [
            backend.array(gcol2),
            backend.array(grow2),
            backend.array(frames),
            backend.array(row_band),
            backend.array(col_band),
            backend.array(lut),
            backend.array(counts),
            backend.array(out),
            np.int32(rows),
            np.int32(cols),
            np.int32(geometry.magnification),
            np.int32(geometry.margin),
            np.int32(lut.shape[1]),
            np.float32(sensitivity),
            np.int32(1 if weighting else 0),
            np.int64(total),
        ],
    )


def _tables(geometry: FrameGeometry, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    table = geometry.table
    lut = torch.from_numpy(table.packed()).to(device)
    counts = torch.from_numpy(table.counts().astype(np.float32)).to(device)
    return lut, counts


def _rgc_example(device: torch.device, generator: torch.Generator):
    g = _example_geometry(device)
    frames = (100 + 50 * torch.rand((2, 9, 11), generator=generator)).to(device)
    gcol2, grow2 = half_gradients_twin(frames, g)
    lut, counts = _tables(g, device)
    out = torch.empty((2, 27, 33), device=device)
    args = (gcol2, grow2, frames, band(g.rows_m), band(g.cols_m), lut, counts, out)
    return args, {"geometry": g, "sensitivity": 2.0, "weighting": True}


rgc = FusedOp(
    "esrrf_rgc",
    launch=_rgc_launch,
    twin=_rgc_twin,
    example=_rgc_example,
    outputs=(7,),
    rtol=1e-4,
    atol=1e-3,
)


# -- the chain ------------------------------------------------------------------------------------
class FusedChain:
    """A frame chunk through :data:`half_gradients` and :data:`rgc`, bound once per shape.

    Only built where the kernels can run (CUDA with CuPy, or host emulation requested); the
    twins otherwise run in :class:`._pipeline.FramePipeline` directly.
    """

    def __init__(self, geometry: FrameGeometry, device: torch.device) -> None:
        self.geometry = geometry
        self.device = device
        self.row_half, self.col_half = band(geometry.rows_half), band(geometry.cols_half)
        self.row_m, self.col_m = band(geometry.rows_m), band(geometry.cols_m)
        self.lut, self.counts = _tables(geometry, device)

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
        """Device bytes per frame in a chunk: the float32 frame, the two half-lattice
        gradients and the output (the kernels need no temporaries)."""
        g = self.geometry
        rows, cols = g.output_shape
        return 4 * (g.height * g.width + 2 * (2 * g.height + 1) * (2 * g.width + 1) + rows * cols)

    def __call__(self, frames: torch.Tensor, sensitivity: float, weighting: bool) -> torch.Tensor:
        g = self.geometry
        batch = frames.shape[0]
        gcol2 = frames.new_empty((batch, 2 * g.height + 1, 2 * g.width + 1))
        grow2 = torch.empty_like(gcol2)
        half_gradients(frames, gcol2, grow2, self.row_half, self.col_half)
        out = frames.new_empty((batch, *g.output_shape))
        rgc(
            gcol2,
            grow2,
            frames,
            self.row_m,
            self.col_m,
            self.lut,
            self.counts,
            out,
            geometry=g,
            sensitivity=float(sensitivity),
            weighting=bool(weighting),
        )
        return out

    def paths(self) -> dict[str, str]:
        """Which implementation each op took on this device, and why."""
        return {op.name: op.path(self.device).describe() for op in (half_gradients, rgc)}


def why_twins(device: torch.device) -> str:
    """Why the fused kernels do not run on ``device``."""
    if kill_switch_active():
        return "fused kernels switched off"
    if device.type == "cuda":
        return cupy_status(device)[1]
    return "CPU reference path"
