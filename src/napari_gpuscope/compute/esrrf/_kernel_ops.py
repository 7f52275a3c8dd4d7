"""The fused eSRRF kernels (``esrrf.cu``) as :class:`~..kernels.FusedOp` s, beside their torch
twins; the chain that runs a frame chunk through them is :class:`._kernels.FusedChain`.

- :data:`half_gradients` -- ``(frames, grad, row_band, col_band)``: Roberts cross +
  Catmull-Rom onto the half-pixel lattice, as unit vectors ``grad (B, 2H+1, 2W+1, 2)``; twin:
  :func:`._ops.half_gradients_twin`.
- :data:`rgc` -- ``(grad, frames, row_band, col_band, lut, out, geometry=, sensitivity=,
  weighting=)``: RGC x magnified intensity of every frame, ``out (B, HM, WM)``; twin:
  :func:`._ops.rgc_twin` (and :func:`._ops.magnify_twin`).
- :data:`rgc_accumulate` -- ``(grad, frames, row_band, col_band, lut, sums_in, edges_in,
  sums_out, edges_out, geometry=, sensitivity=, weighting=, statistic=, continuing=)``: the same
  values folded into the running temporal state of :class:`._temporal.TemporalAccumulator`
  (float64 sums, float32 first/last values) inside the kernel; twin: :data:`rgc` then
  :func:`._temporal.fold`.

The kernels take float32 tensors only (:class:`~..kernels.FusedOp`'s rule), so the float64
sums travel as float32 *views* of their memory (``sums.view(torch.float32)``) and the kernel
reads them as ``double``; the op's self-test compares the float32 edges (the first and the last
frame's values: every per-frame value goes through the same code), not those views, whose
halves of a double mean nothing as floats.

Separable Catmull-Rom matrices are handed to the kernels as *bands* (:func:`band`): the four
input indices and weights of each output index, taken from the same matrices the twins
multiply with, so kernel and twin interpolate with identical weights.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import Backend, FusedOp, KernelSource
from ._ops import FrameGeometry, half_gradients_twin, magnify_twin, rgc_twin
from ._temporal import EDGE_ROWS, STATE_ROWS, STATISTIC_CODES, fold

__all__ = [
    "SOURCE",
    "TILE",
    "accumulator_bytes",
    "band",
    "half_gradients",
    "rgc",
    "rgc_accumulate",
]


SOURCE = KernelSource("esrrf.cu", beside=__file__)

TILE = (8, 32)
"""Output rows x columns of the tiles the RGC kernels walk (``ESRRF_TILE_ROWS/COLS``)."""


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


class _BandGeometry:
    """What :func:`half_gradients_twin` / :func:`magnify_twin` read of a geometry."""

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor) -> None:
        self.rows_half = self.rows_m = rows
        self.cols_half = self.cols_m = cols


def _example_geometry(device: torch.device) -> FrameGeometry:
    return FrameGeometry.build(9, 11, 3, 1.5, False, device)


def _example_frames(device: torch.device, generator: torch.Generator, batch: int):
    return (100 + 50 * torch.rand((batch, 9, 11), generator=generator)).to(device)


def _example_grad(frames: torch.Tensor, g: FrameGeometry) -> torch.Tensor:
    return torch.stack(half_gradients_twin(frames, g), dim=-1).contiguous()


# -- half-lattice gradients -------------------------------------------------------------------
def _half_twin(frames, grad, row_band, col_band) -> None:
    rows, cols = frames.shape[1:]
    geometry = _BandGeometry(_dense(row_band, rows), _dense(col_band, cols))
    gcol, grow = half_gradients_twin(frames, geometry)  # type: ignore[arg-type]
    grad.copy_(torch.stack((gcol, grow), dim=-1))


def _half_launch(backend: Backend, frames, grad, row_band, col_band) -> None:
    _batch, rows, cols = frames.shape
    total = grad.numel() // 2
    backend.launch(
        backend.function(SOURCE, "esrrf_half_gradients"),
        total,
        [
            backend.array(frames),
            backend.array(grad),
            backend.array(row_band),
            backend.array(col_band),
            np.int32(rows),
            np.int32(cols),
            np.int64(total),
        ],
    )


def _half_example(device: torch.device, generator: torch.Generator):
    frames = _example_frames(device, generator, 2)
    g = _example_geometry(device)
    grad = torch.empty((2, 19, 23, 2), device=device)
    return (frames, grad, band(g.rows_half), band(g.cols_half)), {}


half_gradients = FusedOp(
    "esrrf_half_gradients",
    launch=_half_launch,
    twin=_half_twin,
    example=_half_example,
    outputs=(1,),
    # unit vectors: float32 rounding moves them < 1e-6 on the example (vs float64); the margin
    # covers a GPU's fused multiply-adds
    rtol=1e-5,
    atol=1e-4,
)


# -- RGC: shared launch arguments ---------------------------------------------------------------
def _threads(geometry: FrameGeometry) -> int:
    """Threads of one RGC launch: whole tiles covering the output (one thread per pixel)."""
    rows, cols = geometry.output_shape
    tiles = -(-rows // TILE[0]) * -(-cols // TILE[1])
    return tiles * TILE[0] * TILE[1]


def _geometry_args(geometry: FrameGeometry, batch: int, sensitivity: float, weighting: bool):
    table = geometry.table
    return [
        np.int32(batch),
        np.int32(geometry.height),
        np.int32(geometry.width),
        np.int32(geometry.magnification),
        np.int32(geometry.margin),
        np.int32(table.taps_per_axis),
        np.int32(table.first_offset),
        np.float32(sensitivity),
        np.int32(1 if weighting else 0),
    ]


def _maps_twin(grad, frames, row_band, col_band, geometry, sensitivity, weighting):
    rows, cols = frames.shape[1:]
    magnified = None
    if weighting:
        magnified = magnify_twin(
            frames,
            _BandGeometry(_dense(row_band, rows), _dense(col_band, cols)),  # type: ignore[arg-type]
        )
    return rgc_twin(grad[..., 0], grad[..., 1], magnified, geometry, sensitivity)


# -- RGC: per-frame maps --------------------------------------------------------------------------
def _rgc_twin(
    grad, frames, row_band, col_band, lut, out, *, geometry, sensitivity, weighting
) -> None:
    out.copy_(_maps_twin(grad, frames, row_band, col_band, geometry, sensitivity, weighting))


def _rgc_launch(
    backend: Backend,
    grad,
    frames,
    row_band,
    col_band,
    lut,
    out,
    *,
    geometry,
    sensitivity,
    weighting,
) -> None:
    threads = _threads(geometry)
    backend.launch(
        backend.function(SOURCE, "esrrf_rgc"),
        threads,
        [
            backend.array(grad),
            backend.array(frames),
            backend.array(row_band),
            backend.array(col_band),
            backend.array(lut),
            backend.array(out),
            *_geometry_args(geometry, frames.shape[0], sensitivity, weighting),
            np.int64(threads),
        ],
    )


def _lut(geometry: FrameGeometry, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(geometry.table.unit_table()).to(device)


def _rgc_example(device: torch.device, generator: torch.Generator):
    g = _example_geometry(device)
    frames = _example_frames(device, generator, 5)  # a group of 4 frames and one more
    out = torch.empty((5, 27, 33), device=device)
    args = (_example_grad(frames, g), frames, band(g.rows_m), band(g.cols_m), _lut(g, device), out)
    return args, {"geometry": g, "sensitivity": 2.0, "weighting": True}


rgc = FusedOp(
    "esrrf_rgc",
    launch=_rgc_launch,
    twin=_rgc_twin,
    example=_rgc_example,
    outputs=(5,),
    rtol=1e-4,
    atol=1e-3,
)


# -- RGC folded into the temporal sums ----------------------------------------------------------
def _accumulate_twin(
    grad,
    frames,
    row_band,
    col_band,
    lut,
    sums_in,
    edges_in,
    sums_out,
    edges_out,
    *,
    geometry,
    sensitivity,
    weighting,
    statistic,
    continuing,
) -> None:
    maps = _maps_twin(grad, frames, row_band, col_band, geometry, sensitivity, weighting)
    f64 = torch.float64
    fold(
        maps,
        statistic,
        sums_in.view(f64),
        edges_in,
        sums_out.view(f64),
        edges_out,
        bool(continuing),
    )


def _accumulate_launch(
    backend: Backend,
    grad,
    frames,
    row_band,
    col_band,
    lut,
    sums_in,
    edges_in,
    sums_out,
    edges_out,
    *,
    geometry,
    sensitivity,
    weighting,
    statistic,
    continuing,
) -> None:
    threads = _threads(geometry)
    backend.launch(
        backend.function(SOURCE, "esrrf_rgc_accumulate"),
        threads,
        [
            backend.array(grad),
            backend.array(frames),
            backend.array(row_band),
            backend.array(col_band),
            backend.array(lut),
            backend.array(sums_in),
            backend.array(edges_in),
            backend.array(sums_out),
            backend.array(edges_out),
            *_geometry_args(geometry, frames.shape[0], sensitivity, weighting),
            np.int32(STATISTIC_CODES[statistic]),
            np.int32(1 if continuing else 0),
            np.int64(threads),
        ],
    )


def _accumulate_example(device: torch.device, generator: torch.Generator):
    g = _example_geometry(device)
    frames = _example_frames(device, generator, 5)
    shape = g.output_shape
    rows = len(STATE_ROWS["TAC2"])
    sums_in = (1e4 * torch.rand((rows, *shape), generator=generator, dtype=torch.float64)).to(
        device
    )
    edges_in = (100 * torch.rand((len(EDGE_ROWS), *shape), generator=generator)).to(device)
    args = (
        _example_grad(frames, g),
        frames,
        band(g.rows_m),
        band(g.cols_m),
        _lut(g, device),
        sums_in.view(torch.float32),
        edges_in,
        torch.empty_like(sums_in).view(torch.float32),
        torch.empty_like(edges_in),
    )
    kwargs = {
        "geometry": g,
        "sensitivity": 1.5,
        "weighting": True,
        "statistic": "TAC2",
        "continuing": True,
    }
    return args, kwargs


rgc_accumulate = FusedOp(
    "esrrf_rgc_accumulate",
    launch=_accumulate_launch,
    twin=_accumulate_twin,
    example=_accumulate_example,
    outputs=(8,),  # the float32 edges: see the module docstring
    rtol=1e-4,
    atol=1e-3,
)


def accumulator_bytes(mode: str) -> int:
    """Device bytes of temporal state one :data:`rgc_accumulate` launch moves per output pixel,
    whatever the number of frames in the chunk: the float64 sums and float32 edges, read once
    and written once."""
    return 2 * (8 * len(STATE_ROWS[mode]) + 4 * len(EDGE_ROWS))
