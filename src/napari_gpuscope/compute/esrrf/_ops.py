"""The per-frame eSRRF pipeline as torch operations (the twins of ``esrrf.cu``).

Per frame chunk ``(B, H, W)`` float32:

1. :func:`magnify_twin` -- Catmull-Rom magnification by ``M`` (intensity for the weighting);
2. :func:`half_gradients_twin` -- Roberts-cross gradients, Catmull-Rom-interpolated onto the
   half-pixel lattice (``(B, 2H + 1, 2W + 1)`` each) and normalised to unit length
   (:func:`normalise`): all the RGC ever reads of NanoPyx's x2M gradient maps (25x less memory
   at M = 5), and only their direction matters to it;
3. :func:`rgc_twin` -- radial gradient convergence of every output pixel from the per-phase tap
   table (:class:`~._lattice.TapTable`), sensitivity, intensity weighting, zero border band.

The separable magnifications are matrix products with the weight matrices of
:func:`~._lattice.catmull_rom_matrix`; the RGC loops over taps, and for each tap over the (at
most four) groups of sub-pixel phases that read the same lattice sample, so every step is a
strided view of whole arrays. The fused kernels in ``esrrf.cu`` compute the same expressions
one output pixel per thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._lattice import (
    TapTable,
    catmull_rom_matrix,
    half_lattice_positions,
    magnified_positions,
    tap_table,
)

__all__ = [
    "FrameGeometry",
    "half_gradients_twin",
    "magnify_twin",
    "normalise",
    "rgc_twin",
    "roberts_cross",
    "twin_bytes_per_frame",
]


@dataclass(frozen=True)
class FrameGeometry:
    """Everything a frame of one shape needs, on one device: matrices and the tap table.

    Attributes
    ----------
    height, width : int
        Input frame shape.
    table : TapTable
    margin : int
        Zero border band of the output, ``int(radius * M)`` output pixels (NanoPyx).
    rows_m, cols_m : torch.Tensor
        ``(H M, H)`` and ``(W M, W)`` magnification matrices.
    rows_half, cols_half : torch.Tensor
        ``(2H + 1, H)`` and ``(2W + 1, W)`` half-lattice matrices.
    """

    height: int
    width: int
    table: TapTable
    margin: int
    rows_m: torch.Tensor
    cols_m: torch.Tensor
    rows_half: torch.Tensor
    cols_half: torch.Tensor

    @classmethod
    def build(
        cls,
        height: int,
        width: int,
        magnification: int,
        radius: float,
        centred: bool,
        device: torch.device,
    ) -> FrameGeometry:
        """The geometry of ``(height, width)`` frames for one setting, on ``device``."""

        def matrix(n: int, positions: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(catmull_rom_matrix(n, positions).astype(np.float32)).to(device)

        m = magnification
        return cls(
            height=height,
            width=width,
            table=tap_table(m, float(radius), centred),
            margin=int(radius * m),
            rows_m=matrix(height, magnified_positions(height, m, centred)),
            cols_m=matrix(width, magnified_positions(width, m, centred)),
            rows_half=matrix(height, half_lattice_positions(height, m, centred)),
            cols_half=matrix(width, half_lattice_positions(width, m, centred)),
        )

    @property
    def magnification(self) -> int:
        """M."""
        return self.table.magnification

    @property
    def output_shape(self) -> tuple[int, int]:
        """``(H M, W M)``."""
        return self.height * self.magnification, self.width * self.magnification


def twin_bytes_per_frame(height: int, width: int, magnification: int, radius: float) -> int:
    """Device bytes one more frame of a chunk costs in the twins (the fused kernels need less):
    the frame, its gradients and their half-lattice versions, the magnified image, numerator,
    denominator and result, and the temporaries of one tap row (about five arrays of ``J``
    times the output, ``J = 4 R + 1`` tap columns)."""
    out = height * width * magnification**2
    half = (2 * height + 1) * (2 * width + 1)
    taps = int(2.0 * radius + 1.0) + int(2.0 * radius)
    return 4 * (3 * height * width + 2 * half + 9 * out + 5 * taps * out)


def magnify_twin(frames: torch.Tensor, geometry: FrameGeometry) -> torch.Tensor:
    """Catmull-Rom magnified frames ``(B, H M, W M)`` (NanoPyx's zero padding)."""
    return geometry.rows_m @ frames @ geometry.cols_m.T


def roberts_cross(frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NanoPyx's Roberts cross ``(Gcol, Grow)``, each ``(B, H, W)``.

    With ``r0 = max(r - 1, 0)`` and ``c0 = max(c - 1, 0)``: ``d1 = I[r, c] - I[r0, c0]``,
    ``d2 = I[r0, c] - I[r, c0]``, ``Gcol = d1 + d2``, ``Grow = d1 - d2`` (twice the 2 x 2 forward
    difference at the block corner; row 0 has ``Grow = 0``, column 0 ``Gcol = 0``).
    """
    up = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)  # I[r0, c]
    left = torch.cat([frames[:, :, :1], frames[:, :, :-1]], dim=2)  # I[r, c0]
    diagonal = torch.cat([up[:, :, :1], up[:, :, :-1]], dim=2)  # I[r0, c0]
    d1 = frames - diagonal
    d2 = up - left
    return d1 + d2, d1 - d2


def normalise(gx: torch.Tensor, gy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit vectors along ``(gx, gy)`` (0 where both are 0), scaled by the larger component
    first so that squares of tiny or huge gradients neither underflow nor overflow (the same
    operations as ``esrrf_half_gradients``).

    Examples
    --------
    >>> x, y = normalise(torch.tensor([3e-30, 0.0]), torch.tensor([-4e-30, 0.0]))
    >>> [round(v, 6) for v in x.tolist()], [round(v, 6) for v in y.tolist()]
    ([0.6, 0.0], [-0.8, 0.0])
    """
    scale = torch.maximum(gx.abs(), gy.abs())
    safe = torch.where(scale > 0, scale, 1.0)
    x, y = gx / safe, gy / safe
    norm = torch.sqrt(x * x + y * y)
    norm = torch.where(scale > 0, norm, 1.0)
    return x / norm, y / norm


def half_gradients_twin(
    frames: torch.Tensor, geometry: FrameGeometry
) -> tuple[torch.Tensor, torch.Tensor]:
    """Roberts-cross gradient directions on the half-pixel lattice: unit vectors
    ``(Gcol, Grow) / |G|``, each ``(B, 2H + 1, 2W + 1)`` (0 where the gradient is 0; see
    :func:`~._lattice.half_lattice_positions`)."""
    gcol, grow = roberts_cross(frames)
    rows, cols = geometry.rows_half, geometry.cols_half.T
    return normalise(rows @ gcol @ cols, rows @ grow @ cols)


def _phase_groups(magnification: int) -> list[tuple[int, int, int]]:
    """``(base, first phase, stop)``: phases ``s`` with ``floor((2 s + 1) / M) = base``."""
    base = [(2 * s + 1) // magnification for s in range(magnification)]
    groups = []
    for value in sorted(set(base)):
        phases = [s for s in range(magnification) if base[s] == value]
        groups.append((value, phases[0], phases[-1] + 1))
    return groups


def _lattice_view(g: torch.Tensor, axis: int, start: int, count: int) -> torch.Tensor:
    """``count`` samples of the lattice along ``axis`` from ``start`` in steps of 2; reads
    beyond the last sample are clamped to it (NanoPyx's index clamp)."""
    length = 2 * (count - 1) + 1
    n = g.shape[axis]
    if start + length > n:
        shape = list(g.shape)
        shape[axis] = start + length - n
        g = torch.cat([g, g.narrow(axis, n - 1, 1).expand(shape)], axis)
    index = [slice(None)] * g.ndim
    index[axis] = slice(None, None, 2)
    return g.narrow(axis, start, length)[tuple(index)]


def rgc_twin(
    gcol: torch.Tensor,
    grow: torch.Tensor,
    magnified: torch.Tensor | None,
    geometry: FrameGeometry,
    sensitivity: float,
) -> torch.Tensor:
    """Radial gradient convergence (times the magnified intensity unless ``magnified`` is None)
    of every output pixel, ``(B, H M, W M)``, zero within the border band, from the unit
    gradient vectors of :func:`half_gradients_twin`.

    Loops over tap rows and the (at most two) row-phase groups; the tap columns and column
    phases of one step are gathered at once, so a chunk costs a few hundred torch operations
    whatever its size.
    """
    table = geometry.table
    m = table.magnification
    batch = gcol.shape[0]
    h, w = geometry.height, geometry.width
    num = gcol.new_zeros((batch, h, m, w, m))
    den = gcol.new_zeros((batch, h, m, w, m))
    groups = _phase_groups(m)
    shift = table.lattice_shift
    columns = [_column_taps(table, w, base, c0, c1, gcol.device) for base, c0, c1 in groups]
    for a, step_row in enumerate(table.steps):
        for base_r, r0, r1 in groups:
            offset_r = base_r + int(step_row) + shift
            q0 = max(0, math.ceil((1 - offset_r) / 2))
            if q0 >= h:
                continue
            dy = table.distances[r0:r1, a]
            gx_rows = _lattice_view(gcol, 1, 2 * q0 + offset_r, h - q0)
            gy_rows = _lattice_view(grow, 1, 2 * q0 + offset_r, h - q0)
            for (c0, c1), index, valid, dx in columns:
                d = np.sqrt(dx[:, None, :] ** 2 + dy[None, :, None] ** 2)  # (J, nr, nc)
                keep = (d > 0) & (d <= table.max_distance)
                if not keep.any():
                    continue
                weight = np.where(keep, table.weight(d), 0.0)
                _accumulate_row(
                    (gx_rows, gy_rows, index, valid),
                    (num[:, q0:, r0:r1, :, c0:c1], den[:, q0:, r0:r1, :, c0:c1]),
                    (dx, dy, np.where(keep, d, 1.0), weight),
                )
    rgc = torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)
    # Clamp before the power: a rounding a hair below 0 would give NaN at a non-integer
    # sensitivity (and macro-pixel correction would spread it over a whole phase class).
    rgc = rgc.clamp_min_(0.0)
    if sensitivity > 1:
        rgc = rgc.pow(sensitivity)
    rgc = rgc.reshape(batch, h * m, w * m)
    if magnified is not None:
        rgc = rgc * magnified
    return _zero_border(rgc, geometry.margin)


def _column_taps(table: TapTable, w: int, base: int, c0: int, c1: int, device: torch.device):
    """For one column-phase group: the lattice column each tap column reads for every macro
    column ``(J, W)`` (clamped into the lattice), whether it is valid (index >= 1), and the
    taps' x distances ``(J, nc)``."""
    q = np.arange(w)
    offsets = base + table.steps + table.lattice_shift  # (J,)
    lattice = 2 * q[None, :] + offsets[:, None]
    valid = lattice >= 1
    index = np.clip(lattice, 0, 2 * w)  # sample 2W holds the clamped last value
    return (
        (c0, c1),
        torch.from_numpy(index).to(device),
        torch.from_numpy(valid.astype(np.float32)).to(device),
        table.distances[c0:c1, :].T,  # (J, nc)
    )


def _accumulate_row(gradients, sums, constants) -> None:
    """Add one tap row's terms for one (row group, column group) block.

    ``num``/``den`` views are ``(B, H', nr, W, nc)``; gradients (unit vectors) are gathered to
    ``(B, H', 1, J, W, 1)`` and the per-tap constants broadcast as ``(1, 1, nr, J, 1, nc)``.
    A tap's term is ``1 - |sin|`` of the angle between the gradient and the unit vector
    ``(dx, dy) / d`` from the pixel to the tap, where the gradient converges on the pixel.
    """
    gx_rows, gy_rows, index, valid = gradients
    num, den = sums
    dx, dy, d, weight = constants
    device, dtype = num.device, num.dtype
    j, nr, nc = d.shape
    gx = gx_rows[:, :, index][:, :, None, :, :, None]
    gy = gy_rows[:, :, index][:, :, None, :, :, None]

    def constant(values: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(values, dtype=dtype, device=device)

    shape = (1, 1, nr, j, 1, nc)
    ux = constant((dx[:, None, :] / d).transpose(1, 0, 2)).reshape(shape)
    uy = constant((dy[None, :, None] / d).transpose(1, 0, 2)).reshape(shape)
    tw = constant(weight.transpose(1, 0, 2)).reshape(shape)
    tw = tw * valid.to(dtype).view(1, 1, 1, j, -1, 1)
    cross = torch.abs(gy * ux - gx * uy)
    converging = (gx * ux + gy * uy) < 0  # a zero gradient never converges
    term = torch.where(converging, 1.0 - cross, 0.0)
    num += (term * tw).sum(dim=3)
    den += tw.sum(dim=3)


def _zero_border(image: torch.Tensor, margin: int) -> torch.Tensor:
    if margin <= 0:
        return image
    rows, cols = image.shape[-2], image.shape[-1]
    image[..., :margin, :] = 0
    image[..., rows - margin :, :] = 0
    image[..., :, :margin] = 0
    image[..., :, cols - margin :] = 0
    return image
