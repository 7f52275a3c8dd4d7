"""The automatic regularization's per-frequency pass: a fused kernel beside its torch twin.

For every frequency's 2x2 Gram matrix :data:`regularization_components_op` writes the two
eigenvalues ``s_k``, the data's power along each eigenvector ``c_k`` (both computed in float64
from the float32 systems, stored as float32), and the histogram slot of each ``s_k``;
:class:`SpreadHistogram` sums them with one ``index_add_`` per pass into :data:`SPREAD` copies
of the selector's histogram (1 to 64, :func:`spread_for`: atomic adds on a GPU, kept off a few
hundred hot addresses), added up at the end. Nothing is read back to the host
(``torch.bincount`` reads its index's range twice a call). The twin (:func:`components`, ~165
torch operations per pass) took 18.8 ms at 2048 x 2048 on an H200 against a goal of 20 ms with
the selection, expected to be launch-bound, not profiled
(``benchmarks/phase_auto_regularization.py --profile`` and ``tests/gpu/test_gpu_phase.py``
time both paths). The kernel reads each input once (``phase_kernels.cu``, beside this file).
Its outputs are float32 whatever the systems' dtype: a float64 system (the twin's path only)
keeps ~5e-8 relative precision in the sums, as float32 systems have.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..kernels import FusedOp, KernelSource

__all__ = ["Binning", "SpreadHistogram", "components", "regularization_components_op", "spread_for"]

SOURCE = KernelSource("phase_kernels.cu", beside=__file__)
WEIGHTS = ("kept", "s", "c", "c s")
"""The statistics summed per bin, in the order of the histogram's rows."""
SPREAD = 64
"""The most copies of the histogram the frequencies are dealt over (frequency ``i`` to copy
``i % spread``); their slots stay below 2^24, exact in the float32 the kernel writes."""
FREQUENCIES_PER_COPY = 8192
"""A copy per this many frequencies of a pass (1 to :data:`SPREAD`): small images keep one
histogram (18 KB a copy), where a 2048² image's passes deal theirs over 64."""


def spread_for(chunk: int) -> int:
    """Copies of the histogram for passes of ``chunk`` frequencies."""
    return max(1, min(SPREAD, chunk // FREQUENCIES_PER_COPY))


def components(g_aa, g_pp, g_ap, b_a, b_p):
    """``(s_i, c_i)`` for the two eigen-directions of each 2x2 Gram matrix, float64."""
    a, p = g_aa.double(), g_pp.double()
    c = g_ap.to(torch.complex128)
    ba, bp = b_a.to(torch.complex128), b_p.to(torch.complex128)
    cc = c.real**2 + c.imag**2
    half = (a - p) / 2
    radius = torch.sqrt(half**2 + cc)
    s1 = (a + p) / 2 + radius
    # det / s1, not mean - radius: the small eigenvalue keeps its relative precision.
    s2 = torch.clamp(a * p - cc, min=0.0) / torch.clamp(s1, min=1e-300)
    # Eigenvector of s1 from the better-conditioned row of (G - s1 I) v = 0.
    first = a >= p
    v1 = torch.where(first, (s1 - p).to(c.dtype), c)
    v2 = torch.where(first, c.conj(), (s1 - a).to(c.dtype))
    norm = torch.sqrt(v1.real**2 + v1.imag**2 + v2.real**2 + v2.imag**2)
    flat = norm <= 0  # G = s I: any basis
    v1 = torch.where(flat, torch.ones_like(v1), v1 / torch.where(flat, 1.0, norm))
    v2 = torch.where(flat, torch.zeros_like(v2), v2 / torch.where(flat, 1.0, norm))
    along_1 = v1.conj() * ba + v2.conj() * bp  # v1^H b
    along_2 = -v2 * ba + v1 * bp  # v2^H b with v2 = (-conj(v12), conj(v11))
    q1 = along_1.real**2 + along_1.imag**2
    q2 = along_2.real**2 + along_2.imag**2
    yield s1, q1 / torch.clamp(s1, min=1e-300)
    yield s2, q2 / torch.clamp(s2, min=1e-300)


@dataclass(frozen=True)
class Binning:
    """The pass's scalars: components at or below ``floor_ratio x (max g_aa + max g_pp)`` are
    not counted; the
    others go to ``n_bins`` bins of ``1 / per_decade`` decades from ``log10 s = low``, in
    copy ``i % spread`` of the histogram."""

    floor_ratio: float
    low: float
    per_decade: float
    n_bins: int
    spread: int


def _components_views(g_aa, g_pp, g_ap, b_a, b_p, largest, slots, weights, binning: Binning):
    """Twin of the kernel on float views (complex as ``(N, 2)``): writes ``slots (2, N)`` and
    ``weights (4, 2, N)`` (:data:`WEIGHTS` by component) in place."""
    complex_fields = (torch.view_as_complex(t) for t in (g_ap, b_a, b_p))
    fields = [t.reshape(-1) for t in (g_aa, g_pp, *complex_fields)]
    floor = binning.floor_ratio * (largest[0].double() + largest[1].double())
    copy = (torch.arange(g_aa.numel(), device=g_aa.device) % binning.spread) * binning.n_bins
    for k, (s, c) in enumerate(components(*fields)):
        kept = s > floor
        s = torch.where(kept, s, 0.0)
        c = torch.where(kept, c, 0.0)
        at = torch.log10(torch.clamp(s, min=1e-300)).sub_(binning.low).mul_(binning.per_decade)
        slots[k].copy_(at.clamp_(0, binning.n_bins - 1).long() + copy)
        for row, values in enumerate((kept.double(), s, c, c * s)):
            weights[row, k].copy_(values)


def _launch_components(
    backend, g_aa, g_pp, g_ap, b_a, b_p, largest, slots, weights, binning: Binning
) -> None:
    n = g_aa.numel()
    if slots.shape != (2, n) or weights.shape != (4, 2, n) or largest.numel() != 2:
        raise ValueError(
            f"outputs {tuple(slots.shape)} / {tuple(weights.shape)} do not match {n} "
            f"frequencies (expected (2, N) and (4, 2, N)), or largest has {largest.numel()} values "
            "(expected max g_aa and max g_pp)"
        )
    if binning.spread * binning.n_bins > 1 << 24:
        raise ValueError(f"{binning} has more slots than float32 holds exactly (2^24)")
    kernel = backend.function(SOURCE, "phase_regularization_components")
    arrays = [backend.array(t) for t in (g_aa, g_pp, g_ap, b_a, b_p, largest, slots, weights)]
    floats = [np.float64(v) for v in (binning.floor_ratio, binning.low, binning.per_decade)]
    counts = [np.int64(v) for v in (binning.n_bins, binning.spread, n)]
    backend.launch(kernel, n, [*arrays, *floats, *counts])


def _components_example(device, generator):
    n = 67  # not a multiple of the block, more than one copy of the histogram
    g_aa = 4 * torch.rand(n, generator=generator)
    g_pp = 4 * torch.rand(n, generator=generator)
    g_pp[:9] = g_aa[:9]  # ties: the a >= p branch at equality
    # |g_ap|^2 <= g_aa g_pp (Cauchy-Schwarz), as for real Gram entries; rank 1 and G = s I too
    g_ap = (torch.rand((n, 2), generator=generator) - 0.5) * torch.sqrt(g_aa * g_pp)[:, None]
    g_ap[:3] = 0.0
    g_ap[3:6] = torch.sqrt(g_aa[3:6] * g_pp[3:6] / 2)[:, None]
    b_a, b_p = (torch.randn((n, 2), generator=generator) for _ in range(2))
    largest = torch.stack((g_aa.max(), g_pp.max()))
    slots, weights = torch.empty((2, n)), torch.empty((4, 2, n))
    args = (g_aa, g_pp, g_ap, b_a, b_p, largest, slots, weights)
    return (*(t.to(device) for t in args), Binning(1e-3, -12.0, 32.0, 576, 16)), {}


regularization_components_op = FusedOp(
    name="phase_regularization_components",
    launch=_launch_components,
    twin=_components_views,
    example=_components_example,
    outputs=(6, 7),
    rtol=1e-5,
    atol=1e-6,
)
"""``regularization_components_op(g_aa, g_pp, g_ap, b_a, b_p, largest, slots, weights,
binning)`` on float views: ``(N,)`` / ``(N, 2)`` and ``largest`` (max g_aa, max g_pp) in,
``slots (2, N)`` and ``weights (4, 2, N)`` float32 out."""


class SpreadHistogram:
    """The selector's ``(4, n_bins)`` histogram, summed pass by pass through the fused pass.

    Parameters
    ----------
    largest : torch.Tensor
        ``(max g_aa, max g_pp)`` on the systems' device; their sum (in float64, >= every
        eigenvalue) is what the floor is a fraction of.
    binning : Binning
        The floor, the bins and the copies of the histogram (:func:`spread_for`).
    """

    def __init__(self, largest: torch.Tensor, binning: Binning) -> None:
        self.largest = largest.reshape(2).float().contiguous()
        self.binning = binning
        size = binning.spread * binning.n_bins
        self.copies = torch.zeros((4, size), dtype=torch.float64, device=largest.device)

    def add(self, fields: tuple[torch.Tensor, ...]) -> None:
        """Add one chunk's components; ``fields`` flat ``(g_aa, g_pp, g_ap, b_a, b_p)``, the
        last three complex64."""
        g_aa, g_pp = (t.contiguous() for t in fields[:2])
        views = [torch.view_as_real(t.resolve_conj().contiguous()) for t in fields[2:]]
        n = g_aa.numel()
        slots = g_aa.new_empty((2, n), dtype=torch.float32)
        weights = g_aa.new_empty((4, 2, n), dtype=torch.float32)
        regularization_components_op(g_aa, g_pp, *views, self.largest, slots, weights, self.binning)
        self.copies.index_add_(1, slots.reshape(-1).long(), weights.reshape(4, -1).double())

    def total(self) -> torch.Tensor:
        """The histogram, ``(4, n_bins)`` float64 (the copies added up)."""
        return self.copies.reshape(4, self.binning.spread, -1).sum(dim=1)
