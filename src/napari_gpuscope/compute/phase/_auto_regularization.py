"""The automatic Tikhonov strength: the value whose phase correlates best with the truth.

Per spatial frequency ``f`` the slices' spectra ``d_f`` (``Z`` values) are fitted by
``H_f x`` with ``H_f = [A_f P_f]`` (``Z x 2``) and ``x = (G_f + reg I)^-1 b_f``,
``G_f = H_f^H H_f``, ``b_f = H_f^H d_f`` (:mod:`._inverse`). With the eigenvalues ``s_i`` and
unit eigenvectors ``v_i`` of the 2x2 Gram matrix, ``H_f``'s singular values are ``sqrt(s_i)``,
and the data's component along the matching left singular vector has power
``c_i = |v_i^H b|^2 / s_i``. In that basis the reconstruction is
``x_hat_i = sqrt(s_i) y_i / (s_i + reg)`` with ``y_i = sqrt(s_i) x_i + noise``, so, with
``sigma^2`` the noise power of one coefficient and ``E = sum_f |d_f|^2`` the data's energy,

    E |y_i|^2  = s_i |x_i|^2 + sigma^2         ((c_i - sigma^2) / s_i estimates |x_i|^2)
    sigma^2    = (E - sum c_i) / (N - n)        (least-squares residual per degree of
                                                 freedom: N data, n fitted components)
    <x_hat, x> ~ sum (c_i - sigma^2) / (s_i + reg)   (unbiased)
    |x_hat|^2  = sum s_i c_i / (s_i + reg)^2         (exact)

and the selector maximises ``rho(reg) = <x_hat, x> / |x_hat|``, the correlation of the
reconstruction with the true object up to the constant ``|x|``: an unbiased estimate of the
numerator over a norm known exactly, less one standard error of the numerator's estimate
(:data:`MARGIN`: a lower confidence bound, which keeps the choice off the flat, noisy small-``reg``
end of the estimate). It equals minimising the expected error of the
reconstruction after the best rescaling (Stein's unbiased risk estimate for the solution, not for
the data), which is what a user judges (contrast is set by the display, not by the scale).

Generalized cross-validation (GCV, Golub, Heath & Wahba 1979),
``V(reg) = N RSS(reg) / (N - tr(reg))^2`` with ``RSS = E - sum c_i + sum c_i (reg / (s_i +
reg))^2`` and ``tr = sum s_i / (s_i + reg)``, is computed too (:func:`gcv_curve`) but not used:
it minimises the error of *predicting the data*, which weighs each component by ``s_i``; the
phase's low frequencies have small ``s_i`` (the phase transfer function grows from zero), so
GCV chose 3 to 1000 times too strong a regularization on simulated cells (correlation 0.94
instead of 0.95 at 1 % noise, 0.53 instead of 0.76 at 3 %; docs/phase.md).

The per-frequency numbers are gathered into a histogram over ``log10 s`` (:data:`BINS_PER_DECADE`
bins; each bin keeps its count, ``sum s``, ``sum c`` and ``sum c s``, so it is evaluated at its
own means): a criterion then costs a few thousand operations per ``reg`` whatever the image
size, and the histograms of the tiles of a tilt map add up (one ``reg`` for the blended image).
The optimum is searched on a logarithmic grid, then refined by golden section in ``log reg``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from ._regularization_ops import Binning, SpreadHistogram, spread_for

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BINS_PER_DECADE",
    "RegularizationStats",
    "data_energy",
    "gcv_curve",
    "select_regularization",
    "stats_bytes",
]

LOG_RANGE = (-12.0, 6.0)
"""``log10 s`` covered by the histogram (the Gram entries are ~1 per slice)."""
BINS_PER_DECADE = 32
"""Histogram resolution: ``s`` varies by 7.5 % inside a bin, and each bin is evaluated at its
weighted means, so a criterion is exact to second order in that spread."""
FLOOR = 1e-6
"""Eigenvalues below ``FLOOR x`` the largest of a system count as zero (their direction is not
fitted): float32 Gram entries hold ~7 digits, so a smaller one is rounding."""
GRID = (-6.0, 2.0, 8)
"""The search grid in ``log10(reg / s_max)``: from, to, points per decade."""
MARGIN = 1.0
"""Standard errors of the correlation estimate taken off before maximising (a lower confidence
bound): at small ``reg`` the estimate sums the noisy ``(c - sigma^2) / s`` of weak components
and can stay flat where the truth falls (picks 10x too small on 3 of 24 simulated stacks, 0.07
of correlation lost); the bound trades that for a slight lean to larger values."""
MAXIMUM = 1e3
"""The largest value the parameter allows (:class:`~._params.PhaseParams`)."""
_CHUNK = 1 << 20
"""Most frequencies per pass (up to ~300 MB of the twin's temporaries, above ~2900²). Each
pass is one fused kernel (:mod:`._regularization_ops`) and one ``index_add_``; its twin
is ~165 small torch operations (at 2048², 16 passes of the twin took 18.8 ms on an H200
against a goal of 20 ms with the selection; expected to be launch-bound, not profiled). The
per-frequency values are stored as float32 (computed in float64); on a GPU the histogram's
atomic sums change in their last bits with the order they land in."""
_PARTS = 8
"""At least this many passes: their temporaries stay below what the normal equations' build
needs, so the automatic choice does not raise a region's peak."""
BYTES_PER_FREQUENCY = {"fused": 120, "twin": 300}
"""Temporaries of :meth:`RegularizationStats.of` per frequency of a chunk, measured with the CPU
allocator at 64 x 64 to 1024 x 1024: the fused pass (emulated on the host) 120 bytes (its
float32 outputs 40, the sum's int64 slots and float64 weights 80), the twin at most 300."""
ENERGY_BYTES_PER_PIXEL = 12
"""Temporaries of :func:`data_energy`, per pixel of one slice (its contrast in float32, then
that in float64 for the norm; measured with the CPU allocator): freed before the histogram's."""


class GramSystem(Protocol):
    """What the statistics read of a :class:`~._inverse.NormalEquations` (a protocol: the
    normal equations hold their statistics, so this module does not import them back)."""

    g_aa: torch.Tensor
    g_pp: torch.Tensor

    def fields(self) -> Sequence[torch.Tensor]:
        """``(g_aa, g_pp, g_ap, b_a, b_p)``, each ``(h, w)``."""
        ...


N_BINS = int((LOG_RANGE[1] - LOG_RANGE[0]) * BINS_PER_DECADE)
"""Bins of the histogram over ``log10 s``."""


def binning_for(chunk: int) -> Binning:
    """The fused pass's floor and bins for passes of ``chunk`` frequencies."""
    return Binning(FLOOR, LOG_RANGE[0], BINS_PER_DECADE, N_BINS, spread_for(chunk))


def stats_bytes(plane: int, *, fused: bool) -> int:
    """Device bytes the statistics of a ``plane``-pixel system allocate at most: the data's
    energy (:func:`data_energy`), then :meth:`RegularizationStats.of` (its temporaries and the
    histogram it keeps, through the fused pass or its twin)."""
    per_frequency = BYTES_PER_FREQUENCY["fused" if fused else "twin"]
    chunk = _chunk(plane)
    histograms = (spread_for(chunk) + 1) * 4 * 8 * N_BINS  # the copies and their total
    return max(per_frequency * chunk + histograms, ENERGY_BYTES_PER_PIXEL * plane)


def _chunk(plane: int) -> int:
    return min(_CHUNK, max(1, -(-plane // _PARTS)))


def data_energy(stack: torch.Tensor) -> torch.Tensor:
    """``sum |FFT2(I / mean(I) - 1)|^2`` of a ``(Z, h, w)`` region, float64 (Parseval).

    Slice by slice: one slice's temporary at a time, not a copy of the stack.
    """
    plane = stack.shape[-1] * stack.shape[-2]
    total = torch.zeros((), dtype=torch.float64, device=stack.device)
    for image in stack:
        mean = torch.clamp(image.mean(), min=1e-12)
        total += torch.linalg.vector_norm((image - mean) / mean, dtype=torch.float64) ** 2
    return total * plane


@dataclass
class RegularizationStats:
    """Histogram of one or more systems' eigen-components, and their data's energy and size.

    Attributes
    ----------
    bins : torch.Tensor
        ``(4, n_bins)`` float64: count, ``sum s``, ``sum c``, ``sum c s`` per bin.
    energy : torch.Tensor
        ``E``, float64 scalar.
    n_data : int
        ``N``: data values (slices x pixels).
    s_max : float
        The largest eigenvalue (sets the search grid); read when selecting.
    """

    bins: torch.Tensor
    energy: torch.Tensor
    n_data: int
    s_max: torch.Tensor

    @classmethod
    def of(cls, system: GramSystem, energy: torch.Tensor, n_slices: int) -> RegularizationStats:
        """The statistics of one system ``(h, w)`` whose data have energy ``energy``."""
        fields = [t.reshape(-1) for t in system.fields()]
        largest = torch.stack((system.g_aa.max(), system.g_pp.max()))
        s_max = largest.double().sum()  # >= every eigenvalue
        step = _chunk(fields[0].numel())
        # the floor from the largest entries on the device: no read-back per system (or tile)
        histogram = SpreadHistogram(largest, binning_for(step))
        for start in range(0, fields[0].numel(), step):
            histogram.add(tuple(t[start : start + step] for t in fields))
        bins = histogram.total()
        return cls(bins, energy.double(), int(n_slices * fields[0].numel()), s_max)

    @classmethod
    def total(cls, parts: Sequence[RegularizationStats]) -> RegularizationStats:
        """The statistics of several systems together (new tensors; the parts are kept)."""
        if not parts:
            raise ValueError("no systems to choose a regularization for")
        first = parts[0]
        out = cls(first.bins.clone(), first.energy.clone(), first.n_data, first.s_max.clone())
        for part in parts[1:]:
            out.add_(part)
        return out

    def add_(self, other: RegularizationStats) -> RegularizationStats:
        """Add another system's statistics (a tile of the same image); returns ``self``."""
        self.bins += other.bins
        self.energy = self.energy + other.energy
        self.n_data += other.n_data
        self.s_max = torch.maximum(self.s_max, other.s_max)
        return self

    def host(self) -> _HostStats:
        """The non-empty bins on the host (one small copy)."""
        values = torch.cat((self.bins.reshape(-1), self.energy[None], self.s_max[None])).cpu()
        array = values.numpy()
        bins = array[:-2].reshape(4, -1)
        bins = bins[:, bins[0] > 0]
        return _HostStats(bins, float(array[-2]), self.n_data, float(array[-1]))


@dataclass
class _HostStats:
    bins: np.ndarray
    energy: float
    n_data: int
    s_max: float

    def _means(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        count, s_sum, c_sum, cs_sum = self.bins
        s_count = s_sum / count  # the mean eigenvalue of the bin (terms weighted by count)
        s_power = np.where(c_sum > 0, cs_sum / np.where(c_sum > 0, c_sum, 1.0), s_count)
        return count, c_sum, s_count, s_power

    def noise(self) -> float:
        """``sigma^2``: the residual of the least-squares fit per degree of freedom."""
        count, c_sum = self.bins[0], self.bins[2]
        return max(self.energy - c_sum.sum(), 0.0) / max(self.n_data - count.sum(), 1.0)

    def correlation(self, reg: np.ndarray, *, margin: float = 0.0) -> np.ndarray:
        """``rho(reg)``, the estimated correlation with the truth times ``|x|``, less
        ``margin`` standard errors of its estimate."""
        count, c_sum, s_count, s_power = self._means()
        reg = np.asarray(reg, np.float64)[:, None]
        sigma2 = self.noise()
        inner = (c_sum / (s_power + reg) - sigma2 * count / (s_count + reg)).sum(axis=1)
        norm = (s_power * c_sum / (s_power + reg) ** 2).sum(axis=1)
        if margin:
            # Var |y|^2 = sigma^4 + 2 sigma^2 s |x|^2 ~ sigma^2 (2 c - sigma^2) per component;
            # x2: the frequencies f and -f of real data carry the same noise.
            spread = sigma2 * (2 * c_sum - sigma2 * count) / (s_power + reg) ** 2
            inner = inner - margin * np.sqrt(2 * np.maximum(spread.sum(axis=1), 0.0))
        return inner / np.sqrt(np.maximum(norm, 1e-300))

    def gcv(self, reg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        count, c_sum, s_count, s_power = self._means()
        reg = np.asarray(reg, np.float64)[:, None]
        shrink = reg / (s_power + reg)
        rss = np.maximum(self.energy - c_sum.sum() + (c_sum * shrink**2).sum(axis=1), 0.0)
        trace = (count * s_count / (s_count + reg)).sum(axis=1)
        return rss, trace, self.n_data * rss / (self.n_data - trace) ** 2


def gcv_curve(stats: RegularizationStats, reg: np.ndarray) -> dict[str, np.ndarray]:
    """``RSS``, ``tr``, GCV's ``V`` and the selector's ``rho`` at each regularization in
    ``reg`` (for plots and tests)."""
    host = stats.host()
    rss, trace, score = host.gcv(reg)
    return {"rss": rss, "trace": trace, "gcv": score, "correlation": host.correlation(reg)}


def select_regularization(stats: RegularizationStats) -> float:
    """The regularization of largest estimated correlation: grid in ``log reg``, then golden
    section.

    The grid spans ``1e-6`` to ``1e2`` times the largest eigenvalue (8 points per decade);
    the result lies in ``(0, 1e3]`` (the parameter's range).
    """
    host = stats.host()
    if host.bins.shape[1] == 0 or host.s_max <= 0:
        return MAXIMUM  # nothing the model can fit: all data are noise
    start, stop, per_decade = GRID
    logs = math.log10(host.s_max) + np.linspace(start, stop, int((stop - start) * per_decade) + 1)
    scores = -host.correlation(10.0**logs, margin=MARGIN)
    k = int(np.argmin(scores))
    low, high = logs[max(k - 1, 0)], logs[min(k + 1, len(logs) - 1)]

    def score(log_reg: float) -> float:
        return float(-host.correlation(np.array([10.0**log_reg]), margin=MARGIN)[0])

    ratio = (math.sqrt(5) - 1) / 2
    a, b = low + (1 - ratio) * (high - low), low + ratio * (high - low)
    fa, fb = score(a), score(b)
    for _ in range(30):  # the bracket shrinks to 0.618**30 of a grid step: 1e-7 decades
        if fa <= fb:
            high, b, fb = b, a, fa
            a = low + (1 - ratio) * (high - low)
            fa = score(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = score(b)
    best = min((scores[k], logs[k]), (fa, a), (fb, b))[1]
    return float(min(10.0**best, MAXIMUM))
