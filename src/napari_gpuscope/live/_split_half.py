"""The noise of a live eSRRF's running reconstruction, without a reference: split halves.

The track measures the running reconstruction ``R_n`` (the mean of ``n`` frames' maps, AVG)
every few frames. Between two measurements at ``m`` and ``n`` frames, ``n R_n - m R_m`` is the
sum of the maps of the block of frames in between (exactly so without the macro-pixel
correction; with it, up to the change of its per-phase means, which average over the whole
image). :class:`SplitHalves` adds the blocks alternately into two halves (the half with fewer
frames takes the next block, so a skipped measurement only makes one block longer), from the
same frames as the reconstruction and disjoint: the blinking and the noise of one half are
independent of the other's, the structure is the same.

How far apart the halves are says how noisy the full reconstruction is. A half of ``k`` frames
is ``T + noise`` with the noise's variance ``u var(T) / k`` (``T``: the reconstruction of
infinitely many frames), so the Pearson correlation of two halves of ``k1`` and ``k2`` frames
is ``r = 1 / sqrt((1 + u / k1) (1 + u / k2))``: solved for ``u``, the full reconstruction of
``n`` frames has the reliability ``rho = 1 / (1 + u / n)`` (Spearman-Brown's, for halves of
any length), and its correlation with anything noiseless is ``sqrt(rho)`` times that of ``T``:
``1 - sqrt(rho)`` is the part of its error that more frames remove (:attr:`Halves.noise`).

The halves are compared at the resolution the reconstruction is judged at (blurred by a
Gaussian of ``sigma`` output px, :data:`SPLIT_SIGMA_PER_RSP` of the RSP's fitted widefield
blur): at the pixel scale they disagree much more (eSRRF's sharp, sparse spots of the emitters
that happened to blink), a disagreement an error at the image's resolution barely feels. On
the two simulated stacks of ``tests/live/test_live_quality.py`` (their truth blurred by 1.5
output px), ``(1 - true error) / sqrt(rho)`` -- the model's constant -- stayed within 1 % and
4 % over 20-150 frames with the halves blurred alike (0.55 x the RSP's blur is 1.4-1.5 output px
there); unblurred it fell by 8 % and 29 %.

Only the central crop the RSP reads is kept (three float64 arrays of at most ``256 M`` px a
side: 24 MiB at M 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..compute._types import Device

__all__ = ["SPLIT_SIGMA_PER_RSP", "Halves", "SplitHalves", "noise_part"]

SPLIT_SIGMA_PER_RSP = 0.55
"""The halves' blur: this fraction of the RSP's fitted sigma (the widefield PSF seen from the
reconstruction's grid). eSRRF resolves about twice as finely as the widefield, so about half
its blur; 0.55 was chosen with :data:`~._plateau.FLOOR_PER_RSP` on the development stacks
(0.5 and 0.6 agreed with the truth on one and two stacks fewer)."""


def noise_part(r: float, first: int, second: int, frames: int) -> float:
    """``1 - sqrt(rho)``: the full reconstruction's loss of correlation to its noise, from the
    correlation ``r`` of two disjoint halves of ``first`` and ``second`` frames (see the
    module docstring); NaN when the halves do not correlate at all.

    Examples
    --------
    Equal halves of 10 frames correlating at 0.5 (``u = 10``): 20 frames have the reliability
    ``1 / (1 + 10 / 20)``, the Spearman-Brown ``2 r / (1 + r)``.

    >>> round(noise_part(0.5, 10, 10, 20), 4), round(1 - (2 * 0.5 / 1.5) ** 0.5, 4)
    (0.1835, 0.1835)
    """
    if not (math.isfinite(r) and 0 < r < 1) or min(first, second) <= 0:
        return math.nan if not (math.isfinite(r) and r >= 1) else 0.0
    a, b, c = 1 / (first * second), 1 / first + 1 / second, 1 - 1 / r**2
    u = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    return 1 - math.sqrt(1 / (1 + u / frames))


@dataclass(frozen=True)
class Halves:
    """The halves' comparison at one measurement."""

    r: float
    """Pearson correlation of the two (blurred) halves."""
    frames: tuple[int, int]
    """Frames in each half."""
    noise: float
    """``1 - sqrt(rho)`` of the full reconstruction (NaN: not yet two halves)."""


class SplitHalves:
    """Two disjoint halves of a running AVG reconstruction, built from its measurements.

    Parameters
    ----------
    border : int
        Output px left out at each edge (eSRRF's zero border band).

    Examples
    --------
    Blocks of noise around one structure: the halves agree as much as the noise allows.

    >>> rng = np.random.default_rng(0)
    >>> structure = np.zeros((40, 40)); structure[10:30, 20] = 1.0
    >>> halves, running, total = SplitHalves(border=2), None, np.zeros((40, 40))
    >>> for n in range(10, 110, 10):
    ...     total += 10 * structure + rng.normal(0, 3, (40, 40))
    ...     result = halves.add(total / n, n, sigma=1.0)
    >>> result.frames, 0 < result.noise < 0.5
    ((50, 50), True)
    """

    def __init__(self, border: int = 0) -> None:
        self.border = border
        self._previous: np.ndarray | None = None
        self._previous_frames = 0
        self._sums: list[np.ndarray] = []
        self._frames = [0, 0]

    def reset(self) -> None:
        """Start again (a rolling session's next time point)."""
        self._previous, self._previous_frames = None, 0
        self._sums, self._frames = [], [0, 0]

    def add(
        self, image: np.ndarray, frames: int, sigma: float, device: Device | None = None
    ) -> Halves:
        """Add the block since the previous call (``image``: the reconstruction of the first
        ``frames`` frames) to the half with fewer frames, and compare the halves blurred by
        ``sigma`` output px (on ``device`` when it is a GPU: the blurs of a large crop took
        0.3-0.5 s on the host)."""
        from scipy import ndimage

        from ..compute.esrrf._qnr_device import on_gpu

        current = np.asarray(image, np.float64)
        previous = self._previous
        if previous is None or previous.shape != current.shape or frames <= self._previous_frames:
            self.reset()
            previous = np.zeros_like(current)
        block = frames * current - self._previous_frames * previous
        if not self._sums:
            self._sums = [np.zeros_like(current), np.zeros_like(current)]
        side = 0 if self._frames[0] <= self._frames[1] else 1
        self._sums[side] += block
        self._frames[side] += frames - self._previous_frames
        self._previous, self._previous_frames = current, frames
        first, second = self._frames
        if min(first, second) == 0 or not (math.isfinite(sigma) and sigma >= 0):
            return Halves(math.nan, (first, second), math.nan)
        cut = self.border
        inner = (slice(cut, current.shape[0] - cut), slice(cut, current.shape[1] - cut))
        if on_gpu(device):
            import torch

            from ..compute.esrrf._qnr_device import blurred_correlation

            r = blurred_correlation(*self._sums, sigma, inner, torch.device(device))
        else:
            a, b = (ndimage.gaussian_filter(s, sigma) if sigma else s for s in self._sums)
            a, b = a[inner], b[inner]
            constant = a.std() == 0 or b.std() == 0
            r = math.nan if constant else float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
        if not math.isfinite(r):
            return Halves(math.nan, (first, second), math.nan)
        return Halves(r, (first, second), noise_part(r, first, second, first + second))
